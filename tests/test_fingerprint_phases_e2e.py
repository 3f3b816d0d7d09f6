"""Live bytes against RSS after each memory phase of a real server (tests/programs/memserver.py:
its large objects are mallocs of the allocator under test), from the fingerprint run: what the
program still holds, and what its allocator keeps beyond it."""

from __future__ import annotations

import pytest

from conftest import require_allocator
from test_service_e2e import scratch  # noqa: F401 (fixture)
from test_service_phases_e2e import PHASED, experiment

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_live_bytes_and_overhead_after_each_phase(tmp_path, scratch, cli, store_of):
    require_allocator("jemalloc")
    path, _ = experiment(tmp_path, PHASED, params="rest = 0.5")
    p = cli("run", str(path), "-a", "glibc", "-a", "jemalloc", "--runs", "1", "--warmup", "0", "--no-verify",
            "--fingerprint", "--details")
    assert p.returncode == 0, p.stdout + p.stderr
    e = store_of(cli.db).load()
    for (_, vi), fp in e.fingerprints.items():
        phases = {ph["name"]: ph for ph in fp["phases"]}
        assert list(phases) == ["load", "half", "flush", "idle"], fp["phases"]
        # 40,000 objects of 1000 B are live after the load, half of them after "half", none after "flush".
        assert phases["load"]["live_kb"] > 35 * 1024
        assert 15 * 1024 < phases["half"]["live_kb"] < phases["load"]["live_kb"] - 15 * 1024
        assert phases["flush"]["live_kb"] < phases["load"]["live_kb"] - 30 * 1024
        for ph in phases.values():
            # The anonymous memory holds at least what is live; what is beyond it is the allocator's (and stacks').
            assert ph["overhead_kb"] == ph["anon_kb"] - ph["live_kb"] and ph["anon_kb"] > ph["live_kb"] * 0.95
            assert ph["rss_kb"] and ph["rss_kb"] >= ph["anon_kb"]   # the phase's RSS reading holds the same memory
    out = " ".join(p.stdout.split())
    assert "after flush: live, anon RSS" in out and "after idle (fingerprint run): glibc holds" in out


def test_phase_memory_reads_the_series_at_each_phase_end():
    from alloclab.measure.fingerprint import phase_memory
    from alloclab.measure.service.values import summary_line
    series = [(0.0, 100, 5000, 900), (1.0, 40000, 50000, 44000), (2.0, 20000, 50000, 44000), (3.0, 50, 48000, 42000)]
    stdout = "client output\n" + summary_line({
        "rss_after_load_mb": 48.8, "rss_after_flush_mb": 46.9,
        "phases": [{"name": "load", "t_start": 0.5, "t_end": 1.5}, {"name": "flush", "t_start": 2.5, "t_end": 3.2},
                   {"name": "never", "t_start": -2, "t_end": -1}]}) + "\n"
    got = phase_memory(series, stdout)
    assert got == [{"name": "load", "t_end": 1.5, "live_kb": 40000, "anon_kb": 44000, "overhead_kb": 4000,
                    "rss_kb": 49971},
                   {"name": "flush", "t_end": 3.2, "live_kb": 50, "anon_kb": 42000, "overhead_kb": 41950,
                    "rss_kb": 48026}]
    assert phase_memory(series, "no summary line\n") == []


def test_a_phase_no_sample_reached_has_no_reading_rather_than_the_one_before_it():
    # The server's file was last written before the flush began (a neighbour held the CPU, and the
    # server was stopped by a signal, so no final file): the series' last value is what "half" left.
    from alloclab.measure.fingerprint import phase_memory
    from alloclab.measure.service.values import summary_line
    series = [(0.0, 100, 5000, 900), (1.0, 40000, 50000, 44000), (2.0, 20000, 50000, 44000)]
    stdout = summary_line({"phases": [{"name": "load", "t_start": 0.5, "t_end": 1.5},
                                      {"name": "half", "t_start": 1.5, "t_end": 2.2},
                                      {"name": "flush", "t_start": 2.2, "t_end": 3.2}]}) + "\n"
    got = phase_memory(series, stdout, sampled_at=[0.0, 1.0, 2.0])
    assert [ph["name"] for ph in got] == ["load", "half"]
    assert [ph["name"] for ph in phase_memory(series, stdout, sampled_at=[0.0, 1.0, 2.0, 3.1])] == [
        "load", "half", "flush"]
