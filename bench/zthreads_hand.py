#!/usr/bin/env python3
"""tests/programs/zthreads.py by hand, without alloclab: REPS rotated rounds of every variant, the
wall time from wait4 and what the program holds at rest (its own RssAnon, read as its threads have
ended), so that tune's answer on it can be checked in the same sitting.

Prints per variant the median and range of both, and the median of the per-round ratios against
the default (paired within a round, as tune's blocks are).

Usage: python bench/zthreads_hand.py [--reps 5] [--args "8 100 3"] [--python /usr/bin/python3]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

PROGRAM = Path(__file__).resolve().parent.parent / "tests" / "programs" / "zthreads.py"
LIB = "/usr/lib/x86_64-linux-gnu"
VARIANTS = {
    "glibc": {},
    "tcmalloc": {"LD_PRELOAD": f"{LIB}/libtcmalloc.so.4"},
    "tcmalloc-minimal": {"LD_PRELOAD": f"{LIB}/libtcmalloc_minimal.so.4"},
    "jemalloc": {"LD_PRELOAD": f"{LIB}/libjemalloc.so.2"},
    "mimalloc": {"LD_PRELOAD": f"{LIB}/libmimalloc.so.2"},
    "ARENA_MAX=2": {"MALLOC_ARENA_MAX": "2"},
    "MMAP_THRESHOLD=128K": {"MALLOC_MMAP_THRESHOLD_": "131072"},
    "TOP_PAD=64M": {"MALLOC_TOP_PAD_": "67108864"},
    "jemalloc decay 0": {"LD_PRELOAD": f"{LIB}/libjemalloc.so.2", "MALLOC_CONF": "dirty_decay_ms:0,muzzy_decay_ms:0"},
}


def one(python: str, args: list[str], env_add: dict) -> tuple[float, int, float, int]:
    env = dict(os.environ) | env_add
    t = time.monotonic()
    proc = subprocess.Popen([python, str(PROGRAM), *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{env_add} failed ({proc.returncode}): {err[-400:]}")
    return (wall, int(re.search(r"rest_anon_kb (\d+)", err).group(1)), usage.ru_utime + usage.ru_stime,
            usage.ru_minflt)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--args", default="8 100 3")
    p.add_argument("--python", default="/usr/bin/python3")
    p.add_argument("--variants", default=",".join(VARIANTS))
    a = p.parse_args()
    names = a.variants.split(",")
    res: dict[str, list[tuple[float, int, float, int]]] = {n: [] for n in names}
    for r in range(a.reps):
        order = names[r % len(names):] + names[:r % len(names)]   # rotated: each variant in each position
        for n in order:
            res[n].append(one(a.python, a.args.split(), VARIANTS[n]))
    base = res["glibc"]
    print(f"{a.reps} rotated rounds of {PROGRAM.name} {a.args} ({a.python}); load average {os.getloadavg()[0]:.2f}")
    for n in names:
        walls, rests = [r[0] for r in res[n]], [r[1] for r in res[n]]
        tr = statistics.median(r[0] / b[0] for r, b in zip(res[n], base))
        mr = statistics.median(r[1] / b[1] for r, b in zip(res[n], base))
        cr = statistics.median(r[2] / b[2] for r, b in zip(res[n], base))
        faults = statistics.median(r[3] for r in res[n])
        print(f"  {n:22s} wall {statistics.median(walls):.3f} s ({min(walls):.3f}-{max(walls):.3f}) x{tr:.3f} | at rest "
              f"{statistics.median(rests) / 1024:.1f} MiB ({min(rests) / 1024:.1f}-{max(rests) / 1024:.1f}) {100 * (mr - 1):+.1f}% | cpu x{cr:.3f}, {faults:.0f} minor faults")
    return 0


if __name__ == "__main__":
    sys.exit(main())
