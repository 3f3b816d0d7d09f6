#!/usr/bin/env python3
"""glibc.malloc.hugetlb=1 tried by hand on tests/programs/bigheap.c (a heap faulted in once, page by
page): the default and the tunable ROUNDS times in rotated order, each run's wall time, minor page
faults and peak RSS from wait4, and the AnonHugePages the program read of itself at its end. The
transparent huge pages mode is printed first: the tunable asks with madvise, so it acts only under
"madvise". Prints a Markdown table: each run's figures, their medians and ranges.

Usage: python bench/hugetlb_hand.py [--rounds 5] [--mib 512]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one(argv: list[str], env: dict[str, str]) -> tuple[float, int, float, float]:
    t = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, env={"PATH": os.environ["PATH"], **env})
    out = p.stdout.read().decode()
    _, status, usage = os.wait4(p.pid, 0)
    if status != 0:
        raise SystemExit(f"{argv} exited with {status}")
    huge = int(out.split("anon_huge_kb:")[1].split()[0]) / 1024
    return time.monotonic() - t, usage.ru_minflt, usage.ru_maxrss / 1024, huge


def spread(xs, fmt: str) -> str:
    return f"{format(statistics.median(xs), fmt)} [{format(min(xs), fmt)}, {format(max(xs), fmt)}]"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mib", default="512")
    args = ap.parse_args()
    print("THP:", Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip())
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "bigheap"
        subprocess.run(["cc", "-O2", "-o", str(exe), str(ROOT / "tests" / "programs" / "bigheap.c")], check=True)
        arms = [("(default)", {}), ("glibc.malloc.hugetlb=1", {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"})]
        runs = {name: [] for name, _ in arms}
        for k in range(args.rounds):
            for name, env in arms[k % len(arms):] + arms[:k % len(arms)]:
                runs[name].append(one([str(exe), args.mib], env))
    base = statistics.median(r[0] for r in runs["(default)"])
    print("| arm | wall s per run | median [range] | vs default | minor faults, median [range] | peak RSS MiB | AnonHugePages MiB |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, _ in arms:
        wall, flt, peak, huge = ([r[i] for r in runs[name]] for i in range(4))
        print(f"| {name} | {', '.join(f'{x:.2f}' for x in wall)} | {spread(wall, '.2f')} | "
              f"{(statistics.median(wall) / base - 1) * 100:+.1f}% | {spread(flt, ',.0f')} | {spread(peak, '.0f')} | "
              f"{spread(huge, '.0f')} |")


if __name__ == "__main__":
    main()
