#!/usr/bin/env python3
"""A careful hand measurement of `qemu-img bench` under each allocator, without alloclab's runner.

What docs/service.md checks the qemu-img recipe against: plain subprocesses, the allocator by
LD_PRELOAD (glibc: nothing preloaded), the recipe's own images and read load (4 KiB reads at queue
depth 32, a stride of 10007 blocks, on a written 1 GiB qcow2 and raw image), the variants run in
pairs whose order alternates, and qemu-img's own "Run completed in" time. Optionally one
`perf record -e cpu-clock` run per variant and format, to say how much of qemu-img's CPU the
allocator's code takes (samples in the allocator's shared object, or in glibc's malloc family).

    python3 bench/qemu_hand.py --reps 8 --variants glibc,jemalloc --perf
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

LIB = "/lib/x86_64-linux-gnu"
VARIANTS = {
    "glibc": None,
    "jemalloc": f"{LIB}/libjemalloc.so.2",
    "tcmalloc": f"{LIB}/libtcmalloc.so.4",
    "mimalloc": f"{LIB}/libmimalloc.so.2",
}
# glibc's malloc family, as perf names its symbols in libc.so.6.
# (Not every __libc_* symbol: __libc_pread and __libc_write are qemu's I/O, which a first version
# of this script counted as the allocator's.)
GLIBC_MALLOC = re.compile(r"^(_int_malloc|_int_free|_int_realloc|_int_memalign|malloc|free|cfree|calloc|realloc|"
                          r"__libc_(malloc|free|calloc|realloc|memalign)|malloc_consolidate|tcache_\w+|"
                          r"unlink_chunk\S*|sysmalloc|systrim|_mid_memalign|aligned_alloc|posix_memalign|"
                          r"arena_get2\S*)(@\S+)?$")
# t quantiles, two-sided 95%, by degrees of freedom (scipy is not needed for a hand check).
T975 = {1: 12.71, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
        10: 2.228, 11: 2.201, 12: 2.179, 14: 2.145, 15: 2.131, 19: 2.093}


def bench_argv(fmt: str, image: Path, count: int) -> list[str]:
    return ["qemu-img", "bench", "-c", str(count), "-d", "32", "-s", "4k", "-S", str(10007 * 4096), "-f", fmt,
            str(image)]


def env_of(variant: str) -> dict[str, str]:
    import os
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if VARIANTS[variant]:
        env["LD_PRELOAD"] = VARIANTS[variant]
    return env


def one_run(fmt: str, image: Path, count: int, variant: str) -> float:
    out = subprocess.run(bench_argv(fmt, image, count), env=env_of(variant), capture_output=True, text=True,
                         check=True).stdout
    secs = float(re.search(r"Run completed in ([\d.]+) seconds", out).group(1))
    return count / secs


def allocator_share(fmt: str, image: Path, count: int, variant: str, workdir: Path) -> float:
    """The share of qemu-img's cpu-clock samples in the allocator's code."""
    data = workdir / f"perf-{fmt}-{variant}.data"
    subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", "2000", "-o", str(data), "--",
                    *bench_argv(fmt, image, count)], env=env_of(variant), capture_output=True, check=True)
    report = subprocess.run(["perf", "report", "-i", str(data), "--stdio", "--sort", "dso,sym", "-q"],
                            capture_output=True, text=True, check=True).stdout
    share = 0.0
    for line in report.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[.\]\s+(\S+)", line)
        if not m:
            continue
        pct, dso, sym = float(m.group(1)), m.group(2), m.group(3)
        lib = VARIANTS[variant]
        if (lib and dso.startswith(Path(lib).name)) or (dso.startswith("libc.so") and GLIBC_MALLOC.match(sym)):
            share += pct
    return share


def ratio_interval(ratios: list[float]) -> tuple[float, float, float]:
    logs = [math.log(r) for r in ratios]
    m = statistics.mean(logs)
    df = len(logs) - 1
    t = T975.get(df, T975[max(k for k in T975 if k <= df)])
    h = t * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(m), math.exp(m - h), math.exp(m + h)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=8, help="pairs per candidate and format")
    ap.add_argument("--count", type=int, default=300000, help="read requests per run (the recipe's)")
    ap.add_argument("--variants", default="glibc,jemalloc", help="the first is the baseline")
    ap.add_argument("--formats", default="qcow2,raw")
    ap.add_argument("--perf", action="store_true", help="one perf-recorded run per variant and format")
    args = ap.parse_args()
    variants = args.variants.split(",")
    base, cands = variants[0], variants[1:]
    with tempfile.TemporaryDirectory(prefix="qemu-hand-") as tmp:
        work = Path(tmp)
        images = {}
        for fmt in args.formats.split(","):
            images[fmt] = work / f"disk.{fmt}"
            subprocess.run(["qemu-img", "create", "-q", "-f", fmt, str(images[fmt]), "1G"], check=True)
            subprocess.run(["qemu-img", "bench", "-q", "-w", "-c", "16384", "-d", "32", "-s", "64k", "-f", fmt,
                            str(images[fmt])], check=True, capture_output=True)
        print(f"qemu-img bench, {args.count} reads of 4 KiB at depth 32, {args.reps} alternating pairs "
              f"per candidate ({time.strftime('%Y-%m-%d %H:%M')})")
        for fmt, image in images.items():
            one_run(fmt, image, args.count // 10, base)   # page cache warm, binaries loaded
            for cand in cands if args.reps else ():
                b, c = [], []
                for i in range(args.reps):
                    order = (base, cand) if i % 2 == 0 else (cand, base)
                    got = {v: one_run(fmt, image, args.count, v) for v in order}
                    b.append(got[base])
                    c.append(got[cand])
                r, lo, hi = ratio_interval([y / x for x, y in zip(b, c)])
                print(f"{fmt:5} {base:9} ops/s median {statistics.median(b):9,.0f} ({min(b):,.0f}-{max(b):,.0f})  "
                      f"{cand:9} {statistics.median(c):9,.0f} ({min(c):,.0f}-{max(c):,.0f})  "
                      f"x{r:.3f} [{lo:.3f}, {hi:.3f}] ({(r - 1) * 100:+.1f}% [{(lo - 1) * 100:+.1f}, "
                      f"{(hi - 1) * 100:+.1f}])")
            if args.perf:
                shares = {v: allocator_share(fmt, image, args.count, v, work) for v in variants}
                print(f"{fmt:5} allocator's share of qemu-img's cpu-clock samples: "
                      + ", ".join(f"{v} {s:.2f}%" for v, s in shares.items()))


if __name__ == "__main__":
    main()
