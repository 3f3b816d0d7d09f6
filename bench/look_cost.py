#!/usr/bin/env python3
"""What one look of the sequential rule costs the runner, on a 300-run experiment.

A look asks the statistics which primary comparisons are still open (stats.looks.Judge). Until
issue 23 the runner first re-read the whole experiment from SQLite for it (Store.load: every run
with its stdout and stderr); now it hands the Judge the experiment it keeps in memory as it
writes each run. This builds the experiment with the fake executor (no processes: 2 variants x
150 measured runs, each printing --output-bytes of output, as a benchmark's report) and times,
per look, the read that was and the judge's analysis that remains.

Usage: python bench/look_cost.py [--runs 150] [--output-bytes 2000] [--repeat 20]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from alloclab.catalog.variants import parse_variants
from alloclab.measure import machine
from alloclab.measure.fake import FakeExecutor
from alloclab.measure.runner import Runner, Settings
from alloclab.stats.looks import Judge
from alloclab.store.db import Store
from alloclab.workloads.command import Workload


def timed(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=150, help="measured runs per variant (2 variants)")
    ap.add_argument("--output-bytes", type=int, default=2000, help="stdout of each run")
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    machine.perf_counters = lambda: (False, "fake executor")   # nothing to count: no perf stat
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "look.db")
        ex = FakeExecutor(lambda env, n: 0.101 if env else 0.1, noise=0.05, stdout="x" * args.output_bytes)
        exp = Runner(store, [Workload("fake", ["fake"], executor=ex)],
                         parse_variants(["glibc", "glibc:MALLOC_ARENA_MAX=1"]),
                         Settings(runs=args.runs, warmup=0, verify=False), judge=Judge())
        t = time.perf_counter()
        exp_id = exp.run()
        build_s = time.perf_counter() - t
        judge = Judge()
        load_ms, stored = timed(lambda: store.load(exp_id), args.repeat)
        judge_ms, answer = timed(lambda: judge.open_comparisons(stored, {0}, 0.02), args.repeat)
        recorder = getattr(exp, "recorder", None)   # absent before issue 23
        live = recorder.experiment if recorder is not None else None
        print(f"{len(stored.runs)} runs ({args.output_bytes} bytes of output each), built in {build_s:.2f} s; "
              f"median of {args.repeat}:")
        print(f"  Store.load (the SQL read a look did before)  {load_ms:8.2f} ms")
        print(f"  Judge.open_comparisons on it                 {judge_ms:8.2f} ms")
        print(f"  a look, before: read + judge                 {load_ms + judge_ms:8.2f} ms")
        if live is not None:
            live_ms, live_answer = timed(lambda: judge.open_comparisons(live, {0}, 0.02), args.repeat)
            assert live_answer == answer, (live_answer, answer)
            print(f"  a look, now: judge on the in-memory record  {live_ms:8.2f} ms (same answer, no SQL)")


if __name__ == "__main__":
    main()
