#!/usr/bin/env python3
"""Harness overhead: what alloclab adds to each run, and what the RSS sampler costs the program.

0. Marginal cost per run against hyperfine, side by side (issue 14's target: at most 2x):
   `hyperfine -N --runs N /bin/true` and `alloclab compare --runs N --warmup 0 --no-verify
   -a glibc -- /bin/true`, each with N = LARGE and N = SMALL, alternating, whole processes timed;
   the marginal cost is (T(LARGE) - T(SMALL)) / (LARGE - SMALL), so start-up, set-up and the
   report at the end cancel out (all but the statistics' growth with N, which is counted).
   Needs hyperfine (Debian package `hyperfine`).
1. Per-run overhead: wall time of run_once(["/bin/true"]) as seen from Python, against a
   bare posix_spawn + waitpid of the same command. (The wall time alloclab *reports* is taken by
   the launcher around fork/exec/wait4, so it excludes Python's share of this overhead.)
2. Sampler cost: a CPU-bound child (the built-in `simple` workload, single thread) measures its
   own throughput with the /proc sampler at 20 ms against sampling effectively off (one sample a
   minute), alternating runs; once free to use both cores, once with everything pinned to one
   core (our own processes' affinity only; no system setting is touched).

Usage: python bench/overhead.py [--runs N] [--marginal-runs LARGE] [--marginal-repeat K]
       python bench/overhead.py --only-marginal
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from alloclab.measure.run import run_once
from alloclab.workloads import builtin


SMALL = 20


def timed_process(argv: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of the command and everything it started: on a busy machine the CPU
    time still says what the work costs, the wall time also what waiting for a core costs."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def marginal_cost(large: int, repeat: int) -> dict:
    """Seconds per extra run of /bin/true: hyperfine's and alloclab's, alternating."""
    if shutil.which("hyperfine") is None:
        raise SystemExit("hyperfine is not installed: apt-get install -y hyperfine (it is in the Makefile's "
                         "DEB_TEST_PACKAGES, so `make setup-deb-test` installs it).")
    with tempfile.TemporaryDirectory() as d:
        def hyperfine(n: int) -> list[str]:
            return ["hyperfine", "-N", "--runs", str(n), "--style", "none", "/bin/true"]

        def alloclab(n: int) -> list[str]:
            db = Path(d) / "overhead.db"
            for suffix in ("", "-wal", "-shm"):
                Path(f"{db}{suffix}").unlink(missing_ok=True)
            return [sys.executable, "-m", "alloclab.cli", "compare", "--db", str(db), "--runs", str(n),
                    "--warmup", "0", "--no-verify", "-a", "glibc", "--", "/bin/true"]

        timed_process(alloclab(SMALL))  # builds the launcher, warms the page cache
        out: dict[str, list[float]] = {"hyperfine": [], "alloclab": []}
        cpu: dict[str, list[float]] = {"hyperfine": [], "alloclab": []}
        for _ in range(repeat):
            for name, cmd in (("hyperfine", hyperfine), ("alloclab", alloclab)):
                big, small = timed_process(cmd(large)), timed_process(cmd(SMALL))
                out[name].append((big[0] - small[0]) / (large - SMALL))
                cpu[name].append((big[1] - small[1]) / (large - SMALL))
    h, a = statistics.median(out["hyperfine"]), statistics.median(out["alloclab"])
    hc, ac = statistics.median(cpu["hyperfine"]), statistics.median(cpu["alloclab"])
    # Each repetition times both side by side: the ratio within a repetition cancels the machine's
    # slow swings (this VM's noise moves both by up to 2x over minutes).
    pair_ratios = sorted(x / y for x, y in zip(out["alloclab"], out["hyperfine"]))
    return {"large": large, "repeat": repeat, "hyperfine_ms": h * 1e3, "alloclab_ms": a * 1e3, "ratio": a / h,
            "pair_ratio": statistics.median(pair_ratios), "pair_ratio_range": [pair_ratios[0], pair_ratios[-1]],
            "hyperfine_cpu_ms": hc * 1e3, "alloclab_cpu_ms": ac * 1e3, "cpu_ratio": ac / hc,
            "hyperfine_range_ms": [x * 1e3 for x in (min(out["hyperfine"]), max(out["hyperfine"]))],
            "alloclab_range_ms": [x * 1e3 for x in (min(out["alloclab"]), max(out["alloclab"]))]}


def bare_spawn(argv: list[str]) -> float:
    t0 = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, os.environ)
    os.waitpid(pid, 0)
    return time.perf_counter() - t0


def harness(argv: list[str], tmp: Path) -> tuple[float, float]:
    t0 = time.perf_counter()
    r = run_once(argv, dict(os.environ), tmp)
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
                    r = run_once(argv, dict(os.environ), Path(d) / f"{i}-{interval}",
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
    ap.add_argument("--marginal-runs", type=int, default=1000, help="LARGE: runs of the long invocations")
    ap.add_argument("--marginal-repeat", type=int, default=3)
    ap.add_argument("--only-marginal", action="store_true")
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    m = marginal_cost(args.marginal_runs, args.marginal_repeat)
    print(f"marginal cost per run of /bin/true ({m['large']} minus {SMALL} runs, median of {m['repeat']} "
          f"alternating pairs): hyperfine -N {m['hyperfine_ms']:.2f} ms (range {m['hyperfine_range_ms'][0]:.2f}-"
          f"{m['hyperfine_range_ms'][1]:.2f}), alloclab compare {m['alloclab_ms']:.2f} ms (range "
          f"{m['alloclab_range_ms'][0]:.2f}-{m['alloclab_range_ms'][1]:.2f}) -> {m['ratio']:.2f}x hyperfine "
          f"(target: at most 2x); CPU per run, programs included: hyperfine {m['hyperfine_cpu_ms']:.2f} ms, "
          f"alloclab {m['alloclab_cpu_ms']:.2f} ms -> {m['cpu_ratio']:.2f}x; within each pair: median "
          f"{m['pair_ratio']:.2f}x (range {m['pair_ratio_range'][0]:.2f}-{m['pair_ratio_range'][1]:.2f})")
    if args.only_marginal:
        print(f"load average at end: {os.getloadavg()[0]:.2f}")
        return
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
