#!/usr/bin/env python3
"""Split mode's speed-up: a 12-block experiment on a local fleet of 2 workers against 1 worker.

Runs the real CLI, `alloclab compare --fleet local:N --fleet-mode split --runs 12`, on
tests/programs/churn.c (built here with cc), alternating N = 1 and N = 2 `--repeat` times, and
prints per N the median wall time of the whole command (what the user waits for, cluster start-up
included) and of the experiment itself (from the store: first run started to the experiment
finished, 1 s resolution), and the ratio 2 workers / 1 worker.

Local workers share this machine's CPUs: run it on a quiet machine with at least 2 free cores,
or the two workers compete and the ratio says nothing about real hosts.

Usage: python bench/fleet_split.py [--repeat 3] [--rounds 4000] [--blocks 12] [-a glibc -a tcmalloc]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build(tmp: Path) -> Path:
    exe = tmp / "churn"
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-o", str(exe), str(ROOT / "tests/programs/churn.c")], check=True)
    return exe


def experiment_span(db: Path) -> float:
    with sqlite3.connect(db) as c:
        first = c.execute("SELECT min(started) FROM runs").fetchone()[0]
        finished = c.execute("SELECT finished FROM experiments ORDER BY id DESC LIMIT 1").fetchone()[0]
    return (datetime.fromisoformat(finished) - datetime.fromisoformat(first)).total_seconds()


def one(workers: int, exe: Path, args, tmp: Path, i: int) -> tuple[float, float]:
    db = tmp / f"w{workers}-{i}.db"
    cmd = [sys.executable, "-m", "alloclab.cli", "compare", "--db", str(db), "--fleet", f"local:{workers}",
           "--fleet-mode", "split", "--runs", str(args.blocks), "--metric", "ops=ops/s: (\\d+)"]
    for a in args.allocator:
        cmd += ["-a", a]
    cmd += ["--", str(exe), str(args.rounds), "32"]
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return time.monotonic() - t0, experiment_span(db)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=4000, help="churn's rounds per run (4000: about 0.15 s)")
    ap.add_argument("--blocks", type=int, default=12)
    ap.add_argument("-a", "--allocator", action="append", default=None)
    args = ap.parse_args()
    args.allocator = args.allocator or ["glibc", "tcmalloc"]
    with tempfile.TemporaryDirectory(prefix="alloclab-bench-") as d:
        tmp = Path(d)
        exe = build(tmp)
        results: dict[int, list[tuple[float, float]]] = {1: [], 2: []}
        for i in range(args.repeat):
            for workers in (1, 2):
                results[workers].append(one(workers, exe, args, tmp, i))
                print(f"repeat {i + 1}, {workers} worker(s): command {results[workers][-1][0]:.1f} s, "
                      f"experiment {results[workers][-1][1]:.0f} s", file=sys.stderr)
    med = {w: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs)) for w, rs in results.items()}
    out = {"blocks": args.blocks, "variants": args.allocator, "rounds": args.rounds, "repeat": args.repeat,
           "cores": os.cpu_count(), "load_end": list(os.getloadavg()),
           "one_worker": {"command_s": med[1][0], "experiment_s": med[1][1]},
           "two_workers": {"command_s": med[2][0], "experiment_s": med[2][1]},
           "ratio_command": med[2][0] / med[1][0], "ratio_experiment": med[2][1] / med[1][1] if med[1][1] else None}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
