#!/usr/bin/env python3
"""The sweeps docs/sweeps.md reports, measured on this machine through the same functions that
`alloclab compare/suite` use (expansion, run_experiment, analyze, the sweep tables).

1. MALLOC_TOP_PAD_ on the `oversized` workload (PostgreSQL's 27 kB chunks): 0 (no pad) and
   128K (glibc's default pad) ..1G*4. Where does the pad stop paying for sbrk/trim?
2. TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES on the `threadcache` workload (32 threads on few cores):
   1M..1G*4 under tcmalloc. How large must the thread cache be?
3. Thread scaling of `larson` (threads=1..8*2, always the quick size: 8 threads at the default
   size take ~6 s a run) under glibc and tcmalloc-minimal.
4. The ablation of MALLOC_TOP_PAD_=64M + MALLOC_TRIM_THRESHOLD_=64M on `oversized`.

Usage: python bench/sweeps.py [--runs N] [--quick] [--only toppad,threadcache,scaling,ablation] [--db PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import time
from pathlib import Path

from rich.console import Console

from alloclab.catalog.variants import parse_variants
from alloclab.cli import app as cli_app
from alloclab.plan import param_sweep, sweep
from alloclab.stats.results import build_results
from alloclab.cli.sweep import render_sweeps
from alloclab.measure.machine import snapshot
from alloclab.measure.runner import Settings
from alloclab.store.db import Store
from alloclab.workloads import builtin

console = Console(width=170)


def measure(store: Store, title: str, workloads, specs: list[str], sweeps: list[dict], runs: int) -> None:
    settings = Settings(runs=runs, warmup=1, timeout_s=300, title=title)
    if "extra_config" in {f.name for f in dataclasses.fields(Settings)}:
        settings.extra_config = sweep.sweep_config(sweeps)
    started, load = time.monotonic(), os.getloadavg()[0]
    exp_id = cli_app.run_experiment(store, workloads, parse_variants(specs), settings)
    took = time.monotonic() - started
    # Other programs compete for the cores; the load says how much, next to the numbers.
    console.rule(f"{title}: {runs} runs x {len(specs)} variants x {len(workloads)} workloads, "
                 f"{took:.0f} s, load {load:.1f} -> {os.getloadavg()[0]:.1f} (experiment {exp_id} in {store.path})")
    render_sweeps(build_results(store.load(exp_id), sweeps=True), console)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="the workloads' small sizes")
    ap.add_argument("--only", default="toppad,threadcache,scaling,ablation")
    ap.add_argument("--db", type=Path, default=Path(tempfile.gettempdir()) / "alloclab-sweeps.db")
    args = ap.parse_args()
    only = set(args.only.split(","))
    store = Store(args.db)
    m = snapshot()
    console.print(f"{m['cpu_model']}, {m['usable_cores']} usable cores, kernel {m['kernel']}, glibc {m['glibc']}, "
                  f"THP {m['thp']}; sizes: {'quick' if args.quick else 'default'}")

    if "toppad" in only:
        specs, sweeps = sweep.expand_variant_specs(["glibc:MALLOC_TOP_PAD_={0,128K..1G*4}"])
        measure(store, "MALLOC_TOP_PAD_ sweep, oversized",
                [builtin.workload("oversized", {}, quick=args.quick)], specs, sweeps, args.runs)
    if "threadcache" in only:
        specs, sweeps = sweep.expand_variant_specs(["tcmalloc:TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES=1M..1G*4"])
        measure(store, "TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES sweep, threadcache",
                [builtin.workload("threadcache", {}, quick=args.quick)], specs, sweeps, args.runs)
    if "scaling" in only:
        params = param_sweep.expand_params(["threads=1..8*2"])
        workloads = param_sweep.builtin_workloads(["larson"], params, quick=True)
        measure(store, "thread scaling, larson", workloads, ["glibc", "tcmalloc-minimal"],
                param_sweep.param_sweeps(workloads, params.swept), args.runs)
    if "ablation" in only:
        specs, structure = sweep.ablation_specs("glibc:MALLOC_TOP_PAD_=64M,MALLOC_TRIM_THRESHOLD_=64M")
        measure(store, "ablation, oversized", [builtin.workload("oversized", {}, quick=args.quick)],
                specs, [structure], args.runs)


if __name__ == "__main__":
    main()
