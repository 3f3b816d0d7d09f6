#!/usr/bin/env python3
"""A careful hand measurement of PostgreSQL under each allocator, without alloclab's runner.

What docs/service.md compares the postgres-partitions recipe against: plain subprocesses, the
allocator by LD_PRELOAD or a glibc environment variable, pgbench's own tps, and the page faults
of the whole server tree from the postmaster's /proc/PID/stat (the postmaster reaps every
backend, so its `cminflt` counts theirs once they exit).

Protocol per repetition, the variants' order rotated: start the server (the recipe's settings),
optional pg_prewarm, `warmup` s of unmeasured pgbench, then `duration` s at 1 client and
`duration` s at 2 clients against the same server, then stop it. Data directories are made by
the caller (pgbench -i -s 10 --partitions=1000 plus an indexed copy of aid; see --help).

    sudo python3 bench/pg_hand.py --data gen=/tmp/pgx/gen --reps 5 -o /tmp/hand.csv
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

PG_BIN = "/usr/lib/postgresql/15/bin"
SERVER_SETTINGS = ["fsync=off", "synchronous_commit=off", "full_page_writes=off", "shared_buffers=512MB",
                   "jit=off", "autovacuum=off", "checkpoint_timeout=1d", "max_wal_size=4GB",
                   "max_files_per_process=10000", "huge_pages=off",
                   # The recipe's default state (its [params] track_counts): no statistics entry pins a heap.
                   "track_counts=off"]
VARIANTS = {
    "glibc": {},
    "toppad": {"MALLOC_TOP_PAD_": str(64 << 20)},
    "tcmalloc": {"LD_PRELOAD": "/lib/x86_64-linux-gnu/libtcmalloc.so.4"},
    "jemalloc": {"LD_PRELOAD": "/lib/x86_64-linux-gnu/libjemalloc.so.2"},
}
JOIN_SQL = """\\set aid random(1, 100000 * :scale)
SELECT a.abalance, b.bbalance FROM pgbench_accounts a JOIN pgbench_branches b ON b.bid = a.bid WHERE a.aid_copy = :aid;
"""
PREWARM_SQL = """SELECT count(pg_prewarm(c.oid)) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i');"""


def as_postgres() -> list[str]:
    # setpriv execs (runuser would stay as the server's parent and take its signals)
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"] if os.geteuid() == 0 else []


def faults(pid: int) -> tuple[int, int]:
    """(minflt, cminflt) of one process: fields 10 and 11 after the command name."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[7]), int(fields[8])


class Sampler:
    """What alloclab's sampler reads while a client runs: /proc/PID/stat of the server's processes
    every 50 ms ("stat"), /proc/PID/smaps_rollup every 0.5 s ("pss"), or both (to test whether reading
    them changes anything)."""

    def __init__(self, root: int, mode: str = "both"):
        import threading
        self.root, self.mode, self.stop = root, mode, threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def tree(self) -> list[int]:
        pids = [self.root]
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    st = Path(f"/proc/{d}/stat").read_text()
                    if int(st[st.rindex(")") + 2:].split()[1]) == self.root:
                        pids.append(int(d))
                except (OSError, ValueError):
                    pass
        return pids

    def loop(self) -> None:
        n = 0
        while not self.stop.wait(0.05):
            for pid in self.tree():
                try:
                    if self.mode in ("stat", "both"):
                        Path(f"/proc/{pid}/stat").read_text()
                    if self.mode in ("pss", "both") and n % 10 == 0:
                        Path(f"/proc/{pid}/smaps_rollup").read_text()
                except OSError:
                    pass
            n += 1

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def pgbench(port: int, clients: int, seconds: int, script: Path) -> dict:
    argv = as_postgres() + ["pgbench", "-n", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                            "-c", str(clients), "-j", str(clients), "-T", str(seconds), "-s", "10",
                            "-f", str(script), "postgres"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    tps = float(re.search(r"tps = ([\d.]+) \(without initial connection time\)", out).group(1))
    n = int(re.search(r"number of transactions actually processed: (\d+)", out).group(1))
    return {"tps": tps, "transactions": n}


class Server:
    """The recipe's server on `data` under a variant's environment, as a context manager that yields
    the port once pg_isready answers, and stops it (fast shutdown) on every path."""

    def __init__(self, data: Path, port: int, env: dict):
        self.data, self.port, self.env = Path(data), port, env

    def __enter__(self) -> int:
        argv = as_postgres() + ["env"] + [f"{k}={v}" for k, v in self.env.items()] + [
            f"{PG_BIN}/postgres", "-D", str(self.data), "-p", str(self.port), "-c", "listen_addresses=127.0.0.1",
            "-k", str(self.data.parent)] + [x for s in SERVER_SETTINGS for x in ("-c", s)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while subprocess.run([f"{PG_BIN}/pg_isready", "-q", "-h", "127.0.0.1", "-p", str(self.port)]).returncode:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise SystemExit("server did not start")
                time.sleep(0.1)
        except BaseException:
            self.__exit__()
            raise
        return self.port

    def __exit__(self, *exc) -> None:
        self.proc.send_signal(signal.SIGINT)  # fast shutdown; env and setpriv exec, so this is the postmaster
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def client_backends(postmaster: int, marker: bytes = b"127.0.0.1(") -> list[int]:
    """The postmaster's children that serve a client connection ("postgres: USER DB 127.0.0.1(PORT) ..."),
    and those that exited but are not reaped yet."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            st = Path(f"/proc/{d}/stat").read_text()
            state, ppid = st[st.rindex(")") + 2:].split()[:2]
            if int(ppid) != postmaster:
                continue
            # an exited child not yet reaped still owes its faults to cminflt, and so does one still
            # exiting: its memory is being torn down, so its cmdline reads empty before it is a zombie
            # (missed until 2026-11-25, issue 33: then the whole run's faults read low at random)
            cmd = Path(f"/proc/{d}/cmdline").read_bytes()
            if state in "ZX" or not cmd or marker in cmd:
                out.append(int(d))
        except (OSError, ValueError):
            pass
    return out


def settle(postmaster: int, timeout: float = 10.0) -> None:
    """Wait until every client backend has exited and been reaped: a backend still exiting when the
    postmaster's faults are read adds its faults to the next reading (cminflt grows when it is reaped)."""
    deadline = time.monotonic() + timeout
    while client_backends(postmaster) and time.monotonic() < deadline:
        time.sleep(0.02)


def psql(port: int, sql: str) -> None:
    subprocess.run(as_postgres() + ["psql", "-X", "-q", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                                    "-c", sql, "postgres"], check=True, capture_output=True)


def prewarm(port: int) -> None:
    psql(port, PREWARM_SQL)


def one_repetition(data: Path, port: int, env: dict, args, script: Path, clients_list: list[int],
                   sample: str = "none") -> list[dict]:
    with Server(data, port, env):
        postmaster = int(Path(data, "postmaster.pid").read_text().split()[0])
        if args.prewarm:
            prewarm(port)
        if args.warmup:
            pgbench(port, clients_list[0] if args.per_client_server else 1, args.warmup, script)
        if args.checkpoint:
            psql(port, "CHECKPOINT")
        rows = []
        for clients in clients_list:
            # Read both ways, in the same run: right away (as this script did before 2026-11-25) and once
            # the warm-up's backends are gone. A backend still exiting when the postmaster is read adds
            # its faults to the postmaster's cminflt later, inside the measured window.
            early = faults(postmaster)
            settle(postmaster)
            before = faults(postmaster)
            if sample != "none":
                with Sampler(postmaster, sample):
                    r = pgbench(port, clients, args.duration, script)
            else:
                r = pgbench(port, clients, args.duration, script)
            time.sleep(0.2)
            after_early = faults(postmaster)
            settle(postmaster)
            after = faults(postmaster)
            r["faults"] = sum(after) - sum(before)
            r["faults_unsettled"] = sum(after_early) - sum(early)
            r["clients"] = clients
            rows.append(r)
        return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", action="append", required=True, help="NAME=DATADIR (repeatable)")
    p.add_argument("--variants", default="glibc,toppad,tcmalloc")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--duration", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--clients", default="1,2")
    p.add_argument("--prewarm", action="store_true", help="pg_prewarm every table and index first")
    p.add_argument("--checkpoint", action="store_true", help="a CHECKPOINT after the warm-up")
    p.add_argument("--per-client-server", action="store_true",
                   help="a fresh server (and warm-up at that client count) per client count, as the recipe does")
    p.add_argument("--sample", nargs="?", const="both", default="none",
                   help="read the server's /proc files while the client runs, as alloclab's sampler does: both "
                   "(the default of a bare --sample), stat, pss or none; a comma-separated list runs every "
                   "variant under each, in turn, within each repetition")
    p.add_argument("--pad", default="", help="comma-separated sizes of an extra environment variable (bytes), "
                   "cycled over the servers: alloclab pads every run's environment")
    p.add_argument("--port", type=int, default=55450)
    p.add_argument("-o", "--out", default="pg_hand.csv")
    args = p.parse_args()
    args.clients = [int(c) for c in args.clients.split(",")]
    datas = dict(d.split("=", 1) for d in args.data)
    variants = args.variants.split(",")
    script = Path("/tmp/pg_hand_join.sql")
    script.write_text(JOIN_SQL)
    script.chmod(0o644)
    rows = []
    n_servers = 0
    with open(args.out, "w", newline="") as fh:
        w = csv.DictWriter(fh, ["rep", "data", "variant", "clients", "tps", "transactions", "faults", "faults_unsettled", "sample",
                                "started", "pad"])
        w.writeheader()
        for rep in range(args.reps):
            order = variants[rep % len(variants):] + variants[:rep % len(variants)]
            for name, data in datas.items():
                modes = args.sample.split(",")
                modes = modes[rep % len(modes):] + modes[:rep % len(modes)]
                for v, sample in [(v, m) for v in order for m in modes]:
                    groups = [[c] for c in args.clients] if args.per_client_server else [args.clients]
                    for clients_list in groups:
                        started = time.strftime("%H:%M:%S")
                        pads = [int(x) for x in args.pad.split(",") if x] or [0]
                        pad = pads[n_servers % len(pads)]
                        n_servers += 1
                        env = VARIANTS[v] | ({"ALLOCLAB_PAD": "x" * pad} if pad else {})
                        for r in one_repetition(Path(data), args.port, env, args, script, clients_list, sample):
                            row = {"rep": rep, "data": name, "variant": v, "sample": sample, "started": started,
                                   "pad": pad, **r}
                            w.writerow(row)
                            fh.flush()
                            rows.append(row)
                            print(row, flush=True)
    summarize(rows, variants, args.sample.split(","))


def summarize(rows: list[dict], variants: list[str], modes: list[str]) -> None:
    for data in sorted({r["data"] for r in rows}):
        for c in sorted({r["clients"] for r in rows}):
            base = None
            for v, mode in [(v, m) for m in modes for v in variants]:
                sel = [r for r in rows if r["data"] == data and r["clients"] == c and r["variant"] == v
                       and r["sample"] == mode]
                tps = [r["tps"] for r in sel]
                fpt = statistics.median(r["faults"] / max(1, r["transactions"]) for r in sel)
                fpt_early = statistics.median(r["faults_unsettled"] / max(1, r["transactions"]) for r in sel)
                med = statistics.median(tps)
                base = base or med
                print(f"{data:8} c{c} {v:9} sampling {mode:4} tps {med:6.2f} ({min(tps):.2f}-{max(tps):.2f}) x{med / base:.3f} "
                      f"faults/tx {fpt:8.0f} (read unsettled: {fpt_early:.0f})  n={len(sel)}")


if __name__ == "__main__":
    sys.exit(main())
