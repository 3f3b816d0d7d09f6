#!/usr/bin/env python3
"""Harness overhead: what alloclab adds to each run, and what the RSS sampler costs the program.

1. Per-run overhead: wall time of measure.run_once(["/bin/true"]) as seen from Python, against a
   bare posix_spawn + waitpid of the same command. (The wall time alloclab *reports* is taken by
   the launcher around fork/exec/wait4, so it excludes Python's share of this overhead.)
2. Sampler cost: a CPU-bound child (the built-in `simple` workload, single thread) measures its
   own throughput with the /proc sampler at 20 ms against sampling effectively off (one sample a
   minute), alternating runs; once free to use both cores, once with everything pinned to one
   core (our own processes' affinity only; no system setting is touched).

Usage: python bench/overhead.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from alloclab import measure
from alloclab.workloads import builtin


def bare_spawn(argv: list[str]) -> float:
    t0 = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, os.environ)
    os.waitpid(pid, 0)
    return time.perf_counter() - t0


def harness(argv: list[str], tmp: Path) -> tuple[float, float]:
    t0 = time.perf_counter()
    r = measure.run_once(argv, dict(os.environ), tmp)
    return time.perf_counter() - t0, r.wall_s


def per_run_overhead(n: int) -> dict:
    argv = ["/bin/true"]
    with tempfile.TemporaryDirectory() as d:
        for _ in range(5):  # warm caches and the launcher build
            bare_spawn(argv), harness(argv, Path(d))
        bare, outer, reported = [], [], []
        for i in range(n):
            bare.append(bare_spawn(argv))
            o, w = harness(argv, Path(d) / str(i))
            outer.append(o)
            reported.append(w)
    med = statistics.median
    return {"runs": n, "bare_ms": med(bare) * 1e3, "harness_ms": med(outer) * 1e3,
            "overhead_ms": (med(outer) - med(bare)) * 1e3, "reported_wall_ms": med(reported) * 1e3,
            "harness_range_ms": (min(outer) * 1e3, max(outer) * 1e3)}


def sampler_cost(n: int, pin: bool) -> dict:
    exe = builtin.binary(builtin.get("simple"))
    argv = [str(exe), "--iters=400000"]
    before = os.sched_getaffinity(0)
    if pin:
        os.sched_setaffinity(0, {min(before)})
    try:
        on, off = [], []
        with tempfile.TemporaryDirectory() as d:
            for i in range(n):
                for interval, sink in ((0.02, on), (60.0, off)):
                    r = measure.run_once(argv, dict(os.environ), Path(d) / f"{i}-{interval}",
                                         sample_interval_s=interval)
                    sink.append(json.loads(r.stdout.strip().splitlines()[-1])["pairs_per_s"])
    finally:
        os.sched_setaffinity(0, before)
    m_on, m_off = statistics.median(on), statistics.median(off)
    return {"runs": n, "pinned_to_one_core": pin, "sampling_pairs_per_s": m_on, "not_sampling_pairs_per_s": m_off,
            "cost_percent": (1 - m_on / m_off) * 100,
            "range_on": (min(on), max(on)), "range_off": (min(off), max(off))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--sampler-runs", type=int, default=15)
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    o = per_run_overhead(args.runs)
    print(f"per-run overhead ({o['runs']} runs of /bin/true): bare posix_spawn+waitpid {o['bare_ms']:.2f} ms, "
          f"alloclab run_once {o['harness_ms']:.2f} ms (range {o['harness_range_ms'][0]:.2f}-"
          f"{o['harness_range_ms'][1]:.2f}) -> overhead {o['overhead_ms']:.2f} ms per run; "
          f"wall reported by the launcher {o['reported_wall_ms']:.2f} ms")
    for pin in (False, True):
        s = sampler_cost(args.sampler_runs, pin)
        print(f"RSS sampler cost ({s['runs']} alternating runs of `simple`, "
              f"{'pinned to one core' if pin else 'both cores free'}): "
              f"{s['not_sampling_pairs_per_s']:,.0f} pairs/s unsampled vs {s['sampling_pairs_per_s']:,.0f} "
              f"sampled every 20 ms -> {s['cost_percent']:+.2f}% throughput cost")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
