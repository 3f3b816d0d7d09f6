#!/usr/bin/env python3
"""What the allocator's books cost a fingerprint run (issue: at most 10%).

The books (launcher/books.c: smaps, glibc's malloc_info walking every free chunk with the arena
locked, mincore, the other allocators' statistics) are read by the interposer's helper thread at
its samples, at most BOOKS_SHARE of the run (fingerprint.c). This times whole fingerprint runs
(measure/fingerprint.py's run_cell, as tune's diagnosis makes them) with the books and with
ALLOCLAB_FP_NO_BOOKS set (everything else the same: the interposer, perf's recorder, the series),
in interleaved pairs, on two programs: the built-in `oversized` and bench/freechunks.c, whose
heap holds a million free chunks while it works. It reports the run's wall time (the program
alone, as the launcher times it) and the program's own work time where it prints one.

Usage: python bench/books_cost.py [--pairs N] [--allocator glibc|jemalloc|tcmalloc|mimalloc]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import tempfile
from pathlib import Path

from alloclab.catalog import allocators as cat
from alloclab.measure import fingerprint as fp
from alloclab.measure.executors import CommandExecutor
from alloclab.workloads import builtin

HERE = Path(__file__).resolve().parent


def programs(tmp: Path) -> dict[str, list[str]]:
    exe = tmp / "freechunks"
    subprocess.run(["cc", "-O2", "-o", str(exe), str(HERE / "freechunks.c")], check=True)
    return {"oversized": builtin.workload("oversized").argv, "freechunks": [str(exe)]}


def one(argv: list[str], allocator: str, books: bool, work: Path) -> tuple[float, float | None, float]:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ALLOCLAB_FP_NO_BOOKS")}
    if not books:
        env["ALLOCLAB_FP_NO_BOOKS"] = "1"
    lib = cat.locate(cat.load_catalog().allocators[allocator]) if allocator != "glibc" else None
    out = fp.run_cell(CommandExecutor(argv), env, {"LD_PRELOAD": str(lib)} if lib else {}, work, timeout_s=120,
                      mapped_marker=None)
    if "error" in out:
        raise SystemExit(f"{argv}: {out['error']}")
    stdout = (work / "run" / "stdout").read_text()
    m = re.search(r"work_s: ([\d.]+)", stdout)
    spent = (out.get("books") or {}).get("spent_s", 0.0)
    return out["wall_s"], float(m.group(1)) if m else None, spent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--allocator", default="glibc")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for name, argv in programs(tmp).items():
            walls = {True: [], False: []}
            works = {True: [], False: []}
            spent = []
            for i in range(args.pairs):
                for books in ((True, False) if i % 2 == 0 else (False, True)):
                    w, k, s = one(argv, args.allocator, books, tmp / f"{name}-{i}-{books}")
                    walls[books].append(w)
                    if k is not None:
                        works[books].append(k)
                    if books:
                        spent.append(s)
            med = {b: statistics.median(v) for b, v in walls.items()}
            print(f"{name} ({args.allocator}, {args.pairs} pairs): wall with books {med[True]:.3f} s "
                  f"[{min(walls[True]):.3f}-{max(walls[True]):.3f}], without {med[False]:.3f} s "
                  f"[{min(walls[False]):.3f}-{max(walls[False]):.3f}]: ratio {med[True] / med[False]:.3f}; "
                  f"books read for {statistics.median(spent) * 1000:.1f} ms a run (median)")
            if works[True]:
                wm = {b: statistics.median(v) for b, v in works.items()}
                print(f"  its own work time: with {wm[True]:.3f} s, without {wm[False]:.3f} s: "
                      f"ratio {wm[True] / wm[False]:.3f}")


if __name__ == "__main__":
    main()
