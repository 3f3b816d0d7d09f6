#!/usr/bin/env python3
"""A bundled allocator's own setting tried by hand: tests/programs/rust-mimalloc (the mimalloc crate
as global allocator, mimalloc built into the program; or rust-jemalloc, tikv-jemallocator's) run
under each arm ROUNDS times in rotated
order (round k starts at the k-th arm, so no arm always runs first or after the same one). Each run
gives the program's own VmRSS at rest (read by the program after its threads freed their windows and
it slept), and wait4's wall time and peak RSS (ru_maxrss). Arms: the program as built, the setting
tune races (MIMALLOC_PURGE_DELAY=0; _RJEM_MALLOC_CONF=dirty_decay_ms:0,muzzy_decay_ms:0), the name
the copy does not read (MIMALLOC_DECOMMIT_DELAY=0, 2.0's; the unprefixed MALLOC_CONF), and a
preloaded allocator (which the built-in copy never sees).
Prints a Markdown table: per arm each run's figures, their median and range.

Usage: python bench/bundled_hand.py [--program rust-mimalloc|rust-jemalloc] [--rounds 5] [--args 8 600 48 1500]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))


DECAY = "dirty_decay_ms:0,muzzy_decay_ms:0"
ARMS = {"rust-mimalloc": [("MIMALLOC_PURGE_DELAY", "0"), ("MIMALLOC_DECOMMIT_DELAY", "0")],
        "rust-jemalloc": [("_RJEM_MALLOC_CONF", DECAY), ("MALLOC_CONF", DECAY)]}


def one(argv: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """(VmRSS at rest in MiB, wall s, peak RSS in MiB) of one run."""
    t = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, env={"PATH": os.environ["PATH"], **env})
    out = p.stdout.read().decode()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.monotonic() - t
    if status != 0:
        raise SystemExit(f"{argv} under {env} exited with {status}")
    rest = int(out.split("rss_idle_kb:")[1].split()[0]) / 1024
    return rest, wall, usage.ru_maxrss / 1024


def spread(xs: list[float], fmt: str) -> str:
    return f"{format(statistics.median(xs), fmt)} [{format(min(xs), fmt)}, {format(max(xs), fmt)}]"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--args", nargs="*", default=["8", "600", "48", "1500"])
    ap.add_argument("--program", default="rust-mimalloc", choices=sorted(ARMS))
    args = ap.parse_args()
    from native_programs import rust_program
    from alloclab.catalog import allocators as cat
    from alloclab.catalog.elf import elf_facts

    prog = rust_program(args.program)
    form = cat.bundled_form(elf_facts(prog), cat.load_catalog())
    print(f"program: {prog} ({' '.join(args.args)}); bundled copy: {form.name if form else None}, "
          f"{cat.bundled_version(form, prog) if form else ''}")
    arms = [("(as built)", {})] + [(f"{k}={v}", {k: v}) for k, v in ARMS[args.program]]
    jemalloc = cat.locate(cat.load_catalog().allocators["jemalloc"])
    if jemalloc is not None:
        arms.append(("LD_PRELOAD=libjemalloc.so.2", {"LD_PRELOAD": str(jemalloc)}))
    runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name, _ in arms}
    for k in range(args.rounds):
        for name, env in arms[k % len(arms):] + arms[:k % len(arms)]:
            runs[name].append(one([str(prog), *args.args], env))
    base = statistics.median(r[0] for r in runs["(as built)"])
    print("| arm | VmRSS at rest per run (MiB) | median [range] | vs as built | wall s, median [range] | peak RSS MiB, median [range] |")
    print("|---|---|---:|---:|---:|---:|")
    for name, _ in arms:
        rest, wall, peak = ([r[i] for r in runs[name]] for i in range(3))
        print(f"| {name} | {', '.join(f'{x:.1f}' for x in rest)} | {spread(rest, '.1f')} | "
              f"{(statistics.median(rest) / base - 1) * 100:+.1f}% | {spread(wall, '.2f')} | {spread(peak, '.0f')} |")


if __name__ == "__main__":
    main()
