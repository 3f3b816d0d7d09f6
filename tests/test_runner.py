"""The runner's bookkeeping: schedule, store, adaptive runs (on a real program)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest

from alloclab.plan.schedule import Planner, schedule
from alloclab.store.db import SCHEMA_VERSION


def test_schedule_blocks_hold_every_cell_once_in_a_seeded_order():
    jobs = schedule(n_cells=5, runs=4, warmup=1, seed=7)
    assert len(jobs) == 25 and [j.warmup for j in jobs[:5]] == [True] * 5 and jobs[0].verify
    for b in range(5):
        assert sorted(j.cell for j in jobs if j.block == b) == list(range(5))
    assert jobs == schedule(5, 4, 1, 7)
    assert jobs != schedule(5, 4, 1, 8)


def test_a_blocks_runs_of_one_workload_are_adjacent_and_both_orders_are_shuffled():
    groups = [0, 0, 0, 1, 1, 1, 2, 2, 2]    # three workloads of three variants
    jobs = schedule(n_cells=9, runs=30, warmup=0, seed=3, verify=False, groups=groups)
    group_orders, first_variants = set(), set()
    for b in range(30):
        cells = [j.cell for j in jobs if j.block == b]
        seq = [groups[c] for c in cells]
        assert sorted(cells) == list(range(9))
        # each workload's runs form one stretch: the group changes exactly twice in a block
        assert sum(x != y for x, y in zip(seq, seq[1:])) == 2
        group_orders.add(tuple(dict.fromkeys(seq)))
        first_variants.add(cells[0] % 3)
    assert len(group_orders) > 1 and len(first_variants) == 3
    narrowed = Planner(9, 1, groups).block(cells=[0, 4, 5, 8])
    assert sorted(j.cell for j in narrowed) == [0, 4, 5, 8]


def test_measured_blocks_are_counterbalanced_in_pairs():
    """Each measured block after a shuffled one runs its workload's variants in reverse: every two
    variants run in both orders in each pair of blocks, so a position effect cancels in the pair."""
    groups = [0, 0, 0, 1, 1]
    jobs = schedule(n_cells=5, runs=20, warmup=1, seed=11, verify=True, groups=groups)
    order = {b: [j.cell for j in jobs if j.block == b] for b in range(21)}
    for b in range(1, 21, 2):            # block 0 is the warm-up; measured blocks pair up (1, 2), (3, 4), ...
        for g in (0, 1):
            first = [c for c in order[b] if groups[c] == g]
            assert [c for c in order[b + 1] if groups[c] == g] == first[::-1]
    firsts = {tuple(c for c in order[b] if groups[c] == 0) for b in range(1, 21, 2)}
    assert len(firsts) > 2               # the first block of each pair is still shuffled
    # A block that measures fewer variants than the one before is shuffled afresh and starts a new pair.
    p = Planner(3, 5)
    p.block()
    assert sorted(j.cell for j in p.block(cells=[0, 2])) == [0, 2]
    c = [j.cell for j in p.block()]
    assert [j.cell for j in p.block()] == c[::-1]


def test_no_verification_and_no_warmup_means_no_warmup_block():
    jobs = schedule(n_cells=2, runs=3, warmup=0, seed=1, verify=False)
    assert not any(j.warmup or j.verify for j in jobs) and len(jobs) == 6


@pytest.mark.e2e
def test_until_precise_adds_blocks_and_stops_at_the_cap(build, cli, store_of):
    prog = build("churn")
    p = cli("compare", "--runs", "3", "--warmup", "0", "--no-verify", "-a", "glibc",
            "--until-precise", "0.01%", "--max-runs", "5", "--metric", "ops=ops/s: (\\d+)", "--", str(prog), "50", "1")
    assert p.returncode == 0, p.stderr
    e = store_of(cli.db).load()
    # 0.01% is out of reach: blocks are added up to the cap, then it says so.
    assert len([r for r in e.runs if not r.warmup]) == 5
    assert "stopped at 5 runs" in p.stderr
    assert e.config.until_precise == pytest.approx(0.0001)


@pytest.mark.e2e
def test_store_is_versioned_and_keeps_every_run(build, cli):
    prog = build("churn")
    p = cli("compare", "--runs", "2", "-a", "glibc", "--", str(prog), "20", "1")
    assert p.returncode == 0, p.stderr
    db = sqlite3.connect(cli.db)
    assert db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    assert db.execute("SELECT count(*) FROM runs").fetchone()[0] == 3  # 1 verification + 2 measured
    assert db.execute("SELECT count(*) FROM metrics WHERE name='peak_rss_mb'").fetchone()[0] == 3
    series = db.execute("SELECT rss_series FROM runs LIMIT 1").fetchone()[0]
    assert series.startswith("[")


@pytest.mark.serial
@pytest.mark.e2e
def test_other_work_is_told_apart_from_the_workloads_own_threads(cli, store_of):
    """The runs record how much CPU other processes took: a 32-thread workload alone leaves that
    near zero (though it drives the load average far above the core count); two spinning
    processes started beside it show up as about the cores they took."""
    def other_cpu():
        e = store_of(cli.db).load()
        values = [r.extra["other_cpu"] for r in e.runs if not r.warmup and r.status == "ok"]
        assert len(values) == 3
        return sorted(values)[1]

    # Runs long enough (>= 0.25 s) for /proc/stat's 10 ms ticks to tell.
    args = ("suite", "--workload", "threadcache", "--param", "ops=6000000", "--runs", "3", "--warmup", "0", "-a", "glibc")
    cli(*args, check=True)
    alone = other_cpu()
    spin = [sys.executable, "-c", "while True: pass"]
    spinners = [subprocess.Popen(spin) for _ in range(2)]
    try:
        cli.db.unlink()
        p = cli(*args, check=True)
    finally:
        for s in spinners:
            s.kill()
            s.wait()
    busy = other_cpu()
    assert alone < 0.3, alone
    assert busy > 0.6 and busy > alone + 0.4, (alone, busy)
    assert "other processes used up to" in (p.stdout + p.stderr).lower()
