#!/usr/bin/env python3
"""The Proxmox seed's question by hand, without alloclab's runner: `rbd bench` (4 KiB random reads,
16 threads, a fixed 80 MiB) against a private one-OSD cluster, under glibc and under tcmalloc by
LD_PRELOAD, in rotated pairs; the client's CPU from wait4 (user + system) per I/O, and rbd bench's
own ops/sec. What `alloclab tune recipe:ceph-rbd-client --client "rbd bench"` is checked against.

The cluster is the recipe's (its cephlab.py: every address 127.0.0.1, everything under one
directory, never /etc/ceph), built here, used, and torn down on every path.

Usage: python bench/rbd_hand.py [--pairs 6] [--dir /tmp/rbd-hand]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

LAB = Path(__file__).resolve().parent.parent / "src" / "alloclab" / "workloads" / "recipes" / "ceph" / "cephlab.py"
VARIANTS = {"glibc": {}, "tcmalloc": {"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4"}}
BENCH = ["bench", "--io-type", "read", "--io-size", "4096", "--io-threads", "16", "--io-pattern", "rand",
         "--io-total", "80M", "rbd/img"]


def lab(d: Path, *args: str, timeout: float = 600) -> None:
    subprocess.run(["/usr/bin/python3", str(LAB), str(d), *args], check=True, timeout=timeout,
                   stdin=subprocess.DEVNULL)


def bench(d: Path, env: dict) -> tuple[float, float]:
    """(ops/sec as rbd bench prints it, CPU microseconds per I/O of the client)."""
    conf = str(d / "ceph.conf")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(["rbd", "--conf", conf, *BENCH], capture_output=True, text=True, check=True,
                       env={**os.environ, "CEPH_CONF": conf, **env}, stdin=subprocess.DEVNULL, timeout=300)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    m = re.search(r"elapsed:\s*\S+\s+ops:\s*(\d+)\s+ops/sec:\s*([\d.]+)", p.stdout)
    if not m:
        sys.exit(f"rbd bench printed no summary:\n{p.stdout[-2000:]}")
    return float(m.group(2)), cpu / int(m.group(1)) * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/rbd-hand"))
    args = ap.parse_args()
    d = args.dir
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    daemons: list[subprocess.Popen] = []
    try:
        lab(d, "init", "--osds", "1", "--osd-memory-target", str(1 << 30), timeout=120)
        conf = str(d / "ceph.conf")
        daemons.append(subprocess.Popen(["ceph-mon", "-f", "--conf", conf, "-i", "a"], stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        lab(d, "osd-mkfs", "0", timeout=300)
        daemons.append(subprocess.Popen(["ceph-osd", "-f", "--conf", conf, "-i", "0"], stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        lab(d, "pool", "rbd", "img", "256")
        bench(d, {})   # one unmeasured run: the OSD's caches
        rows: dict[str, list[tuple[float, float]]] = {v: [] for v in VARIANTS}
        for i in range(args.pairs):
            order = list(VARIANTS) if i % 2 == 0 else list(reversed(VARIANTS))
            for v in order:
                iops, cpu = bench(d, VARIANTS[v])
                rows[v].append((iops, cpu))
                print(f"{time.strftime('%H:%M:%S')} pair {i} {v:9s} iops {iops:8.0f}  cpu/io {cpu:6.1f} us", flush=True)
        print()
        for v, rs in rows.items():
            iops, cpu = [r[0] for r in rs], [r[1] for r in rs]
            print(f"{v:9s} iops median {statistics.median(iops):8.0f} ({min(iops):.0f}-{max(iops):.0f})   "
                  f"cpu/io median {statistics.median(cpu):6.1f} us ({min(cpu):.1f}-{max(cpu):.1f})")
        pairs = list(zip(rows["glibc"], rows["tcmalloc"]))
        ri = sorted(t[0] / g[0] for g, t in pairs)
        rc = sorted(t[1] / g[1] for g, t in pairs)
        print(f"tcmalloc / glibc, paired: iops median x{statistics.median(ri):.3f} ({ri[0]:.3f}-{ri[-1]:.3f}), "
              f"cpu per I/O median x{statistics.median(rc):.3f} ({rc[0]:.3f}-{rc[-1]:.3f})")
        return 0
    finally:
        for p in reversed(daemons):
            p.send_signal(signal.SIGTERM)
        for p in reversed(daemons):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
