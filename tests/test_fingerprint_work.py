"""Allocations per unit of work (measure/fingerprint_work.py): the window arithmetic on hand-made
interposer files; the real server's figures are checked in test_fingerprint_postgres_e2e.py."""

from __future__ import annotations

import pytest

from alloclab.measure.fingerprint_work import calls_between, per_work
from alloclab.workloads.experiment_file import MetricSpec

S = 1_000_000_000   # ns


def proc(start_s: float, rows: list[tuple[int, int, int]], end_s: float | None = None, total: int | None = None,
         total_bytes: int = 0) -> dict:
    """An interposer file: series rows (ms since start, calls so far, bytes so far)."""
    p = {"start_ns": int(start_s * S), "series": [[t, 0, 0, 0, -1, -1, c, b] for t, c, b in rows],
         "final": end_s is not None, "t_ns": int((end_s if end_s is not None else start_s) * S),
         "calls": {"malloc": total or 0}, "bytes": total_bytes}
    return p


def test_calls_are_read_between_two_times_across_processes_born_and_ended_in_between():
    # A long-lived parent counting 1,000 calls a second, a child forked at 12 s (its counts start
    # at zero) that makes 500 calls and exits at 13 s, and a process that ended before the window.
    parent = proc(0.0, [(t * 1000, t * 1000, t * 8000) for t in range(0, 21)])
    child = proc(12.0, [(500, 250, 2500)], end_s=13.0, total=500, total_bytes=5000)
    before = proc(1.0, [(100, 50, 100)], end_s=2.0, total=90, total_bytes=200)
    calls, nbytes = calls_between([parent, child, before], 10 * S, 15 * S)
    assert calls == pytest.approx(5000 + 500)
    assert nbytes == pytest.approx(40_000 + 5000)
    # Halfway between two readings the counts are interpolated.
    calls, _ = calls_between([parent], int(10.5 * S), 11 * S)
    assert calls == pytest.approx(500)


def test_an_older_interposer_without_counts_gives_nothing():
    old = {"start_ns": 0, "series": [[0, 1, 2, 3, -1, -1]], "final": False, "t_ns": 0, "calls": {}}
    assert calls_between([old], 0, S) is None


def tps(work: str | None = "transaction", progress: str | None = r"progress: \S+ s, ([\d.]+) tps") -> MetricSpec:
    return MetricSpec("tps", "tps", True, True, progress=progress, skip=2 if progress else 0, work=work)


def test_calls_per_transaction_count_only_the_steady_intervals():
    # 10 s of load from t=100 s, 10 progress intervals of which the first 2 are skipped: the
    # window is the last 8 s; 2,000 calls a second at 10 tps is 200 calls per transaction.
    parent = proc(0.0, [(t * 1000, t * 2000, t * 2000 * 20_000) for t in range(0, 121)])
    values = {"tps": 10.0, "load_window_monotonic_s": [100.0, 110.0], "intervals": {"tps": [7.0] * 2 + [10.0] * 8}}
    pw = per_work([parent], values, (tps(),))
    assert pw["work"] == "transaction" and pw["window_s"] == pytest.approx(8.0)
    assert pw["calls"] == pytest.approx(200) and pw["bytes"] == pytest.approx(200 * 20_000)
    assert pw["calls_in_window"] == 16_000 and pw["median_of"] == 8


def test_a_burst_in_one_steady_second_does_not_move_the_demand_per_transaction():
    # 8 steady seconds at 10 tps and 2,000 calls a second, but in one of them the server also
    # rebuilt its caches (30,000 calls more) and the rate halved: the median of the seconds' own
    # figures is the steady demand; the whole window's mean would read 200 x 1.21 and more.
    rows, calls = [], 0
    for t in range(0, 121):
        rows.append((t * 1000, calls, calls * 100))
        calls += 2000 + (30_000 if t == 104 else 0)
    parent = proc(0.0, rows)
    seen = [7.0] * 2 + [10.0] * 2 + [5.0] + [10.0] * 5
    values = {"tps": sum(seen[2:]) / 8, "load_window_monotonic_s": [100.0, 110.0], "intervals": {"tps": seen}}
    pw = per_work([parent], values, (tps(),))
    assert pw["calls"] == pytest.approx(200) and pw["bytes"] == pytest.approx(200 * 100)
    assert pw["median_of"] == 8 and pw["calls_in_window"] == 46_000
    # With two steady seconds only, the window's own mean is all there is.
    short = {"tps": 7.5, "load_window_monotonic_s": [100.0, 104.0], "intervals": {"tps": [7.0, 7.0, 10.0, 5.0]}}
    pw = per_work([parent], short, (tps(),))
    assert pw["median_of"] == 0 and pw["calls"] == pytest.approx(4000 / 15)


def test_no_figure_without_a_named_work_a_window_or_a_rate():
    parent = proc(0.0, [(t * 1000, t * 2000, 0) for t in range(0, 21)])
    values = {"tps": 10.0, "load_window_monotonic_s": [5.0, 15.0]}
    assert per_work([parent], values, (tps(work=None),)) is None
    assert per_work([parent], {"tps": 10.0}, (tps(),)) is None
    assert per_work([parent], values | {"tps": 0.0}, (tps(),)) is None
    # A metric over the whole run (no progress intervals): the whole window counts.
    assert per_work([parent], values, (tps(progress=None),))["calls"] == pytest.approx(200)
