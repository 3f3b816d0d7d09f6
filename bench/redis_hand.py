#!/usr/bin/env python3
"""redis' memory phases by hand, to check what `alloclab tune recipe:redis` decides: no alloclab
code runs. Each round starts Debian's redis-server on loopback once per setting (the settings in a
shuffled order), fills it as the recipe's memory client does (redis-benchmark SET of 100k random
keys of 1000 B, 10 clients, pipeline 16), deletes every other key, FLUSHALL SYNC, MEMORY PURGE, and
reads the server's VmRSS (/proc/PID/status) 1 s after each action; then shuts it down.

A setting is LABEL or LABEL=ENV,ENV...; ENV is NAME=VALUE, and LD_PRELOAD=jemalloc|tcmalloc|mimalloc
names a Debian allocator library. The first is the baseline; it prints each reading's median and
range per setting and the median of the paired ratios to the baseline (per round).

Usage: python bench/redis_hand.py [--rounds 5] default 'mimalloc=LD_PRELOAD=mimalloc,MIMALLOC_DECOMMIT_DELAY=0'
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time

LIBS = {"jemalloc": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
        "tcmalloc": "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
        "mimalloc": "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2"}
DELETE_HALF = ("local ks = redis.call('KEYS', 'key:*') for i = 1, #ks, 2 do redis.call('DEL', ks[i]) end "
               "return #ks")
PHASES = [("delete_half", ["EVAL", DELETE_HALF, "0"]), ("flush", ["FLUSHALL", "SYNC"]), ("purge", ["MEMORY", "PURGE"])]


def parse(spec: str) -> tuple[str, dict[str, str]]:
    label, _, rest = spec.partition("=")
    env = {}
    for item in filter(None, rest.split(",")):
        k, _, v = item.partition("=")
        env[k] = LIBS.get(v, v) if k == "LD_PRELOAD" else v
    return label, env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vmrss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def cli(port: int, *args: str) -> None:
    subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args], check=True, capture_output=True,
                   timeout=300)


def one(env: dict[str, str], settle: float) -> dict[str, int]:
    port = free_port()
    with tempfile.TemporaryDirectory() as wd:
        srv = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                "--appendonly", "no", "--dir", wd, "--daemonize", "no", "--logfile", ""],
                               env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(300):
                try:
                    cli(port, "PING")
                    break
                except subprocess.CalledProcessError:
                    time.sleep(0.05)
            subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-t", "set", "-n", "100000",
                            "-r", "1000000000", "-d", "1000", "-c", "10", "-P", "16", "--csv"], check=True,
                           capture_output=True, timeout=300)
            time.sleep(settle)
            out = {"load": vmrss_kb(srv.pid)}
            for name, args in PHASES:
                cli(port, *args)
                time.sleep(settle)
                out[name] = vmrss_kb(srv.pid)
            return out
        finally:
            try:
                cli(port, "SHUTDOWN", "NOSAVE")
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
                pass
            try:
                srv.wait(timeout=15)
            except subprocess.TimeoutExpired:
                srv.kill()
                srv.wait()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("settings", nargs="+")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--settle", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    settings = [parse(s) for s in a.settings]
    rng = random.Random(a.seed)
    rows: dict[str, list[dict[str, int]]] = {lbl: [] for lbl, _ in settings}
    print(time.strftime("%H:%M:%S UTC", time.gmtime()), "start", flush=True)
    for r in range(a.rounds):
        order = settings[:]
        rng.shuffle(order)
        for lbl, env in order:
            rows[lbl].append(one(env, a.settle))
            print(f"round {r + 1} {lbl}: {rows[lbl][-1]}", flush=True)
    print(time.strftime("%H:%M:%S UTC", time.gmtime()), "end")
    base = settings[0][0]
    for lbl, _ in settings:
        for k in ["load"] + [n for n, _ in PHASES]:
            v = [x[k] for x in rows[lbl]]
            line = f"{lbl:14s} {k:12s} median {statistics.median(v):>9,} kB ({min(v):,}-{max(v):,})"
            if lbl != base:
                ratios = [x[k] / b[k] - 1 for x, b in zip(rows[lbl], rows[base])]
                line += (f"  paired vs {base}: median {100 * statistics.median(ratios):+.1f}% "
                         f"({100 * min(ratios):+.1f} to {100 * max(ratios):+.1f})")
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
