"""kill -9 of alloclab at any moment loses at most the run in progress and never corrupts the store
(the promise the WAL + synchronous=NORMAL choice in store.py keeps).

alloclab runs a tiny shell command many times a second (a commit every few milliseconds), and is
killed with SIGKILL at random moments: during start-up, set-up, runs and commits. Each run of the
command appends a line to a file, so the runs that started are counted outside alloclab; before
each kill an independent reader also counts the runs it sees committed. After the kills the store
must pass SQLite's integrity check, hold every run that had been seen committed, hold all the runs
that started but the last one, without gaps in the planned order, and be readable by `alloclab
report` and `alloclab experiments`."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from alloclab.store.db import Store
from conftest import run_cli

KILLS = 8


def committed_runs(db, exp_id: int | None) -> int:
    """What another process sees committed right now (a reader never blocks the WAL writer)."""
    if exp_id is None or not db.exists():
        return 0
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return con.execute("SELECT count(*) FROM runs WHERE experiment_id=?", (exp_id,)).fetchone()[0]
    except sqlite3.OperationalError:
        return 0  # the schema is not created yet
    finally:
        con.close()


def latest_experiment(db) -> int | None:
    if not db.exists():
        return None
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return con.execute("SELECT max(id) FROM experiments").fetchone()[0]
    except sqlite3.OperationalError:
        return None
    finally:
        con.close()


def wait_for_runs(db, before: int, proc, limit_s: float = 60) -> None:
    end = time.monotonic() + limit_s
    while time.monotonic() < end and proc.poll() is None:
        exp = latest_experiment(db)
        if exp and exp > before and committed_runs(db, exp):
            return
        time.sleep(0.01)
    raise AssertionError(f"alloclab stored no run within {limit_s:g} s (exit status {proc.poll()})")


@pytest.mark.slow
@pytest.mark.e2e
def test_kill_9_at_random_moments_loses_at_most_the_run_in_progress(tmp_path):
    db = tmp_path / "killed.db"
    env = dict(os.environ, TMPDIR=str(tmp_path))  # the killed runs' scratch directories stay in here
    rng = random.Random(14)
    seen_before_kill: dict[int, int] = {}
    started: dict[int, int] = {}
    for i in range(KILLS):
        counter = tmp_path / f"started-{i}"
        counter.touch()
        before = latest_experiment(db) or 0
        proc = subprocess.Popen([sys.executable, "-m", "alloclab.cli", "compare", "--db", str(db), "--runs", "5000",
                                 "--no-verify", "--warmup", "0", "-a", "glibc", "--",
                                 "/bin/sh", "-c", f"echo run >> {counter}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        try:
            if i % 3 == 0:  # a third of the kills land in start-up and set-up
                time.sleep(rng.uniform(0.0, 1.0))
            else:  # the others among the runs and their commits
                wait_for_runs(db, before, proc)
                time.sleep(rng.uniform(0.0, 0.5))
            exp = latest_experiment(db)
            exp = exp if exp and exp > before else None
            count = committed_runs(db, exp)
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait()
        if exp is not None:
            seen_before_kill[exp] = count
            started[exp] = len(counter.read_text().splitlines())

    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    store = Store(db)
    assert any(n > 0 for n in seen_before_kill.values()), "no kill landed among the runs: the test tested nothing"
    for exp_id, count in seen_before_kill.items():
        e = store.load(exp_id)
        assert len(e.runs) >= count, f"experiment {exp_id}: {count} runs were committed before the kill, " \
                                     f"{len(e.runs)} after"
        assert started[exp_id] - 1 <= len(e.runs) <= started[exp_id], \
            f"experiment {exp_id}: {started[exp_id]} runs started, {len(e.runs)} stored"
        # One cell, no warm-up: the runs are blocks 0, 1, 2, ... with no gap.
        assert [r.block for r in e.runs] == list(range(len(e.runs)))
        assert all(r.status == "ok" for r in e.runs)
    store.close()

    listing = run_cli(["experiments", "--db", str(db)], timeout=60)
    assert listing.returncode == 0, listing.stderr
    exp_id = max(exp for exp, n in seen_before_kill.items() if n >= 2)
    report = run_cli(["report", str(exp_id), "--db", str(db), "-f", "md"], timeout=120)
    assert report.returncode == 0, report.stderr
    assert "glibc" in report.stdout
