#!/usr/bin/env python3
"""tests/programs/smallburst.c by hand, without alloclab: REPS rotated rounds of the default and of
glibc's per-thread cache raised (glibc.malloc.tcache_count), wall and CPU time from wait4, so that
tune's glibc-tcache-small verdict can be checked in the same sitting.

Usage: python bench/tcache_hand.py [--reps 7] [--args "200000 64"] [--counts 64,256]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "tests" / "programs" / "smallburst.c"


def one(prog: str, args: list[str], env_add: dict) -> tuple[float, float]:
    t = time.monotonic()
    proc = subprocess.Popen([prog, *args], env=dict(os.environ) | env_add, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{env_add} failed")
    return time.monotonic() - t, usage.ru_utime + usage.ru_stime


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--args", default="200000 64")
    p.add_argument("--counts", default="64,256")
    a = p.parse_args()
    variants = {"default": {}} | {f"tcache_count={n}": {"GLIBC_TUNABLES": f"glibc.malloc.tcache_count={n}"}
                                  for n in a.counts.split(",")}
    with tempfile.TemporaryDirectory() as tmp:
        prog = str(Path(tmp) / "smallburst")
        subprocess.run(["cc", "-O2", "-o", prog, str(SOURCE)], check=True)
        names = list(variants)
        res: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
        for r in range(a.reps):
            for n in names[r % len(names):] + names[:r % len(names)]:
                res[n].append(one(prog, a.args.split(), variants[n]))
    print(f"{a.reps} rotated rounds of smallburst {a.args}; load average {os.getloadavg()[0]:.2f}")
    base = res["default"]
    for n in names:
        walls = [w for w, _ in res[n]]
        ratios = [w / b[0] for (w, _), b in zip(res[n], base)]
        cpu = statistics.median(c / b[1] for (_, c), b in zip(res[n], base))
        print(f"  {n:20s} wall {statistics.median(walls):.3f} s ({min(walls):.3f}-{max(walls):.3f}) "
              f"{100 * (statistics.median(ratios) - 1):+.1f}% ({100 * (min(ratios) - 1):+.1f} to "
              f"{100 * (max(ratios) - 1):+.1f}), cpu x{cpu:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
