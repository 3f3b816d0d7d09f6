"""How much does sampling slow the profiled program down? And what does a profile cost?

For each sampling setting (frequency, call graphs on/off) this profiles a real allocation-heavy
program under each variant with alloclab.profile.profile_workload, which follows every profiled
run with an unprofiled run of the same variant (interleaved, so drift hits both alike), and
prints:
  - the program's own throughput while sampled vs not (its metric; positive = slower),
  - the wall-time overhead, raw and less perf record's own start/stop (timed on `true`),
  - the allocator's share of CPU per variant (median, min-max) and samples per run,
  - the seconds one profiled run costs in total (perf record + perf script).

Usage: python bench/profile_overhead.py [--runs N] [--program wordfreq|churn] [--args ...]
        [--frequencies 99,999,4999] [--variants glibc,tcmalloc-minimal,jemalloc,mimalloc]
There are no pass/fail thresholds: this prints numbers for docs/profile.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from alloclab.measure import machine
from alloclab.workloads.metrics import MetricDef
from alloclab.measure.profile.record import profile_workload
from alloclab.measure.profile.summary import headline
from alloclab.catalog.variants import parse_variants
from alloclab.workloads.command import Workload

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = {
    "wordfreq": (["1500"], MetricDef("docs", "docs/s", True, "regex", r"docs/s: ([\d.]+)", True)),
    "churn": (["40000", "32"], MetricDef("ops", "ops/s", True, "regex", r"ops/s: (\d+)", True)),
}


def build(name: str, out_dir: Path) -> Path:
    out = out_dir / name
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-o", str(out), str(ROOT / "tests/programs" / f"{name}.c")],
                   check=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--program", choices=sorted(PROGRAMS), default="wordfreq")
    ap.add_argument("--args", nargs="*", default=None, help="program arguments (default: about 1 s under glibc)")
    ap.add_argument("--frequencies", default="99,999,4999")
    ap.add_argument("--call-graph", choices=("both", "off", "on"), default="both")
    ap.add_argument("--variants", default="glibc,tcmalloc-minimal,jemalloc,mimalloc")
    opts = ap.parse_args()

    default_args, metric = PROGRAMS[opts.program]
    with tempfile.TemporaryDirectory() as tmp:
        prog = build(opts.program, Path(tmp))
        argv = [str(prog), *(opts.args if opts.args is not None else default_args)]
        workload = Workload(name=" ".join([opts.program, *argv[1:]]), argv=argv, metrics=[metric])
        variants = parse_variants(opts.variants.split(","))
        print(f"machine: {machine.cpu_model()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; "
              f"hardware counters: {machine.perf_counters()[1]}")
        print(f"program: {workload.name}; {opts.runs} profiled + {opts.runs} unprofiled runs per variant "
              f"and setting, interleaved")
        graphs = {"both": (False, True), "off": (False,), "on": (True,)}[opts.call_graph]
        for call_graph in graphs:
            for freq in map(int, opts.frequencies.split(",")):
                t0 = time.perf_counter()
                summaries = profile_workload(workload, variants, opts.runs, freq, call_graph)
                spent = time.perf_counter() - t0
                print(f"\n-F {freq}{' --call-graph dwarf' if call_graph else ''}  "
                      f"({spent:.1f} s for {len(variants) * opts.runs} profiled + as many plain runs; "
                      f"perf record start/stop on `true`: {summaries[0].perf_fixed_s:.3f} s)")
                print(f"  allocator share: {headline(summaries)}")
                for s in summaries:
                    tp, wall, samp = s.throughput_overhead(), s.wall_overhead(), s.sampling_overhead()
                    n = sorted(r.samples for r in s.ok_runs)
                    print(f"  {s.variant:18} {metric.name} {_pct(tp)} slower | wall {_pct(wall)} raw, "
                          f"{_pct(samp)} less perf start/stop | samples/run {n[len(n) // 2] if n else 0}"
                          f" | kernel mm {_pct(s.kernel_mm[0] if s.kernel_mm else None)}")
                for note in dict.fromkeys(n for s in summaries for n in s.notes):
                    print(f"  note: {note}")
        print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")


def _pct(x: float | None) -> str:
    return "   n/a" if x is None else f"{'+' if x >= 0 else ''}{100 * x:.1f}%"


if __name__ == "__main__":
    sys.exit(main())
