#!/usr/bin/env python3
"""PostgreSQL's allocations and brk calls per transaction, counted without alloclab's interposer.

The independent check of the allocation fingerprint (docs/fingerprint.md): a uprobe on glibc's
`malloc` that records the requested size (`perf probe -x libc.so.6 'malloc bytes=%di:u64'`), and
the `syscalls:sys_enter_brk` tracepoint, both recorded system-wide by `perf record -a` while pgbench
runs a fixed number of transactions. Only events of processes named `postgres` count. Each count is
taken for `short` and for `long` transactions per client on the same server, and the difference,
divided by the transactions between them, is the steady-state figure per transaction (a new
backend's first transactions load the catalog entries of 1000 partitions into its caches).

Needs root (perf -a, uprobes) and a data directory made by the recipe's setup, e.g. from
`alloclab run recipe:postgres-partitions -a glibc --runs 1 --warmup 0 --no-verify --keep`:

    sudo python3 bench/pg_malloc_count.py --data /tmp/alloclab-postgres-partitions-XXXX/data
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import pg_hand  # noqa: E402  (the server's settings and start-up, shared with the hand run)

LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
EVENT = re.compile(r"^\s*(\S+)\s+\d+\s.*?(probe_libc:malloc|syscalls:sys_enter_brk):.*?(?:bytes=(\d+))?\s*$")


def record(port: int, clients: int, transactions: int, script: Path, out: Path) -> tuple[int, int, collections.Counter]:
    """(postgres mallocs, postgres brk calls, mallocs by power-of-two size class) over one pgbench run."""
    pgbench = pg_hand.as_postgres() + ["pgbench", "-n", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                                       "-c", str(clients), "-j", str(clients), "-t", str(transactions), "-s", "10",
                                       "-f", str(script), "postgres"]
    subprocess.run(["perf", "record", "-q", "-a", "-e", "probe_libc:malloc", "-e", "syscalls:sys_enter_brk",
                    "-o", str(out), "--", *pgbench], check=True, capture_output=True)
    text = subprocess.run(["perf", "script", "-i", str(out), "-F", "comm,pid,event,trace"],
                          capture_output=True, text=True, check=True).stdout
    mallocs = brks = 0
    sizes: collections.Counter = collections.Counter()
    for line in text.splitlines():
        m = EVENT.match(line)
        if not m or m.group(1) != "postgres":
            continue
        if m.group(2) == "probe_libc:malloc":
            mallocs += 1
            if m.group(3) is not None:
                sizes[max(int(m.group(3)), 1).bit_length() - 1] += 1
        else:
            brks += 1
    return mallocs, brks, sizes


def label(c: int) -> str:
    def unit(n: int) -> str:
        return f"{n >> 10}K" if n >= 1024 else str(n)
    return f"{unit(1 << c)}-{unit((2 << c) - 1) if c < 10 else unit(2 << c)}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="the recipe's data directory")
    p.add_argument("--variants", default="glibc,toppad")
    p.add_argument("--clients", default="1,2")
    p.add_argument("--short", type=int, default=5, help="transactions per client, first count")
    p.add_argument("--long", type=int, default=25, help="transactions per client, second count")
    p.add_argument("--port", type=int, default=55460)
    args = p.parse_args()
    subprocess.run(["perf", "probe", "-q", "-d", "probe_libc:malloc"], capture_output=True)
    subprocess.run(["perf", "probe", "-q", "-x", LIBC, "malloc bytes=%di:u64"], check=True)
    data = Path(args.data)
    script = data.parent / "join.sql"
    script.write_text(pg_hand.JOIN_SQL)
    try:
        with tempfile.TemporaryDirectory(prefix="pg-malloc-") as tmp:
            for variant in args.variants.split(","):
                for clients in map(int, args.clients.split(",")):
                    per = {}
                    for n in (args.short, args.long):
                        # A fresh server per count, prewarmed as the recipe does, so both counts start alike.
                        with pg_hand.Server(data, args.port, pg_hand.VARIANTS[variant]) as port:
                            pg_hand.prewarm(port)
                            per[n] = record(port, clients, n, script, Path(tmp, f"{variant}-{clients}-{n}.data"))
                    tx = (args.long - args.short) * clients
                    (m1, b1, s1), (m2, b2, s2) = per[args.short], per[args.long]
                    diff = {c: (s2[c] - s1[c]) / tx for c in s2}
                    top = sorted(diff.items(), key=lambda kv: -kv[1])[:4]
                    print(f"{variant:8} {clients} client(s): {(m2 - m1) / tx:,.0f} mallocs and {(b2 - b1) / tx:,.1f} brk "
                          f"per transaction (steady state; {m2:,} mallocs and {b2:,} brk in {args.long * clients} "
                          f"transactions from a new connection); by size: "
                          + ", ".join(f"{label(c)} B {v:,.0f}" for c, v in top)
                          + f"; the whole {args.long * clients} from a new connection by size: "
                          + ", ".join(f"{label(c)} B {v:,}" for c, v in s2.most_common(4)))
    finally:
        subprocess.run(["perf", "probe", "-q", "-d", "probe_libc:malloc"], capture_output=True)


if __name__ == "__main__":
    main()
