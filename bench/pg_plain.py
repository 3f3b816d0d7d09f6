#!/usr/bin/env python3
"""PostgreSQL made plainly against the postgres-partitions recipe, one of the recipe's choices at a time.

Issue 33: the recipe's server trimmed glibc's heap about half as often as a plainly made one. This
script makes both data directories and measures any mix of data set, server settings and run
protocol, glibc against MALLOC_TOP_PAD_=67108864, each run on a fresh server.

    make   --kind plain  --dir D   initdb with defaults; `pgbench -i -s 10 --partitions=1000`;
                                   ALTER TABLE ... ADD COLUMN aid_copy INT; UPDATE ... SET aid_copy = aid;
                                   CREATE INDEX ON pgbench_accounts(aid_copy); VACUUM FREEZE; VACUUM ANALYZE
           --kind recipe --dir D   the recipe's setup steps (initdb -E UTF8 --locale=C, pgbench -i -q, a
                                   GENERATED ALWAYS AS (aid) STORED column and its index, CREATE EXTENSION
                                   pg_prewarm, VACUUM ANALYZE, CHECKPOINT)
           --pg-prewarm            also CREATE EXTENSION pg_prewarm (for the recipe's run protocol on a copy)
    measure --data NAME=DIR ... --config NAME=DATA/SETTINGS/RUN ...

SETTINGS is `plain` (shared_buffers=512MB, max_locks_per_transaction=1024, fsync, jit and
autovacuum off, all else default) or `recipe` (the recipe's [service] settings), followed by any
`+key=value` (set or override) and `-key` (back to PostgreSQL's default): `plain+max_files_per_process=10000`,
`recipe-max_files_per_process`. RUN is `plain` (unix socket, no prewarm) or `recipe` (TCP to
127.0.0.1 and pg_prewarm first), with `+prewarm`, `+tcp`, `-prewarm`, `-tcp` likewise.

Per repetition, the configurations in rotated order; per configuration and client count, the
variants adjacent (a pair) in rotated order; per run a fresh server, the run protocol's prewarm,
`--warmup` s of pgbench at the run's client count, then `pgbench -n -c N -j N -T duration -P 1`.
Read per run: tps (the mean of the per-second figures after the first 2, as the recipe), the
client backends' minor faults between 2 s and 8 s over the transactions of those seconds
(faults/tx, as the issue's hand run), the whole server tree's faults over the whole run
(postmaster minflt + cminflt, after the backends are reaped) over pgbench's transactions, and with
--trace the backends' brk/mmap/munmap calls in the same 2-8 s window (perf record; a brk that moves
the break down is one of glibc's trims, and how far, the bytes it gave back) and glibc's
dynamic thresholds after it (gdb on libc6-dbg: mp_.mmap_threshold, mp_.trim_threshold; pgbench
then runs 1 s longer, and that second is in no figure).

    timeline --data DIR [--settings S] [--run R] [--gdb-at SEC ...] [--walk]
                                   one client, second by second: its backend's faults per
                                   transaction, and glibc's heap read by gdb (with --walk, the
                                   in-use chunks reaching above 20 MB by memory context: bench/pg_heapwalk.py)

    sudo python3 bench/pg_plain.py make --kind plain --dir /var/tmp/pgab/plain
    sudo python3 bench/pg_plain.py make --kind recipe --dir /var/tmp/pgab/recipe
    sudo python3 bench/pg_plain.py measure --data plain=/var/tmp/pgab/plain --data recipe=/var/tmp/pgab/recipe \\
        --config plain=plain/plain/plain --config recipe=recipe/recipe/recipe \\
        --config files10k=plain/plain+max_files_per_process=10000/plain --reps 3 --trace -o /tmp/pgab.csv
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from pg_hand import PG_BIN, as_postgres, client_backends, faults  # noqa: E402

PLAIN = {"shared_buffers": "512MB", "max_locks_per_transaction": "1024", "fsync": "off", "jit": "off",
         "autovacuum": "off"}
RECIPE = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off", "shared_buffers": "512MB",
          "jit": "off", "autovacuum": "off", "checkpoint_timeout": "1d", "max_wal_size": "4GB",
          "max_files_per_process": "10000", "huge_pages": "off"}
RUNS = {"plain": set(), "recipe": {"prewarm", "tcp"}}
VARIANTS = {"glibc": {}, "pad": {"MALLOC_TOP_PAD_": str(64 << 20)},
            "tcmalloc": {"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4"}}
JOIN_SQL = {
    # the recipe's query (the issue: the query is not what differs)
    "recipe": "\\set aid random(1, 100000 * :scale)\n"
              "SELECT a.abalance, b.bbalance FROM pgbench_accounts a JOIN pgbench_branches b ON b.bid = a.bid "
              "WHERE a.aid_copy = :aid;\n",
    "seed": "\\set aid random(1, 100000 * :scale)\n"
            "SELECT * FROM pgbench_accounts pa JOIN pgbench_branches pb ON (pa.bid = pb.bid) WHERE pa.aid_copy = :aid;\n",
}
PREWARM_SQL = ("SELECT count(pg_prewarm(c.oid)) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
               "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i');")
WINDOW = (2, 8)  # seconds of the measured pgbench whose backend faults are counted
SKIP = 2         # per-second tps figures dropped at the start (the recipe's skip)
GDB_FIELDS = ["mp_.mmap_threshold", "mp_.trim_threshold", "mp_.no_dyn_threshold", "mp_.max_n_mmaps",
              "main_arena.system_mem"]


def apply(base: dict, spec: str, what: str) -> tuple:
    """`plain+key=value-key` -> the base's entries with those changes."""
    m = re.match(r"([a-z]+)(.*)$", spec)
    if not m or m.group(1) not in base:
        raise SystemExit(f"{what} {spec!r}: start with one of {', '.join(base)}")
    out = base[m.group(1)]
    out = dict(out) if isinstance(out, dict) else set(out)
    for sign, key, value in re.findall(r"([+-])([a-z_]+)(?:=([^+]*?))?(?=[+-][a-z_]|$)", m.group(2)):
        if isinstance(out, set):
            (out.add if sign == "+" else out.discard)(key)
        elif sign == "+":
            if not value:
                raise SystemExit(f"{what} {spec!r}: +{key} needs =VALUE")
            out[key] = value
        else:
            out.pop(key, None)
    return out


def run_as_pg(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(as_postgres() + argv, **kw)


class Server:
    """postgres on `data` with `settings` under `env`, listening on 127.0.0.1 and a socket in `sock`."""

    def __init__(self, data: Path, port: int, settings: dict, env: dict, sock: Path, log: Path | None = None):
        self.data, self.port, self.settings, self.env, self.sock = Path(data), port, settings, env, sock
        self.log = log

    def __enter__(self) -> "Server":
        argv = as_postgres() + ["env"] + [f"{k}={v}" for k, v in self.env.items()] + [
            f"{PG_BIN}/postgres", "-D", str(self.data), "-p", str(self.port), "-c", "listen_addresses=127.0.0.1",
            "-k", str(self.sock)] + [x for k, v in self.settings.items() for x in ("-c", f"{k}={v}")]
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL
        self.proc = subprocess.Popen(argv, stdout=out, stderr=out)
        try:
            deadline = time.monotonic() + 120
            while subprocess.run([f"{PG_BIN}/pg_isready", "-q", "-h", "127.0.0.1", "-p", str(self.port)]).returncode:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise SystemExit(f"server did not start (see {self.log})")
                time.sleep(0.1)
        except BaseException:
            self.__exit__()
            raise
        self.pid = int(Path(self.data, "postmaster.pid").read_text().split()[0])
        return self

    def __exit__(self, *exc) -> None:
        self.proc.send_signal(signal.SIGINT)  # fast shutdown; env and setpriv exec: this is the postmaster
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def conn(self, tcp: bool) -> list[str]:
        return ["-h", "127.0.0.1" if tcp else str(self.sock), "-p", str(self.port), "-U", "postgres"]

    def psql(self, *sql: str, tcp: bool = True) -> str:
        argv = ["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"] + self.conn(tcp)
        for s in sql:
            argv += ["-c", s]
        r = run_as_pg(argv + ["postgres"], capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(f"psql failed: {r.stderr}")
        return r.stdout


def make(args) -> None:
    data = Path(args.dir)
    if data.exists():
        raise SystemExit(f"{data} exists")
    data.parent.mkdir(parents=True, exist_ok=True)
    shutil.chown(data.parent, "postgres", "postgres")
    t0 = time.monotonic()
    if args.kind == "plain":
        run_as_pg([f"{PG_BIN}/initdb", "-D", str(data)], check=True, capture_output=True)
        settings = PLAIN
    else:
        run_as_pg([f"{PG_BIN}/initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "--no-sync",
                   "-E", "UTF8", "--locale=C"], check=True, capture_output=True)
        settings = RECIPE
    with Server(data, args.port, settings, {}, data.parent, data.parent / f"{data.name}.make.log") as s:
        if args.kind == "plain":
            run_as_pg(["pgbench", "-i", "-s", "10", "--partitions=1000"] + s.conn(False) + ["postgres"],
                      check=True, capture_output=True)
            s.psql("ALTER TABLE pgbench_accounts ADD COLUMN aid_copy INT",
                   "UPDATE pgbench_accounts SET aid_copy = aid",
                   "CREATE INDEX ON pgbench_accounts(aid_copy)", "VACUUM FREEZE", "VACUUM ANALYZE", tcp=False)
        else:
            run_as_pg(["pgbench", "-i", "-q", "-s", "10", "--partitions=1000"] + s.conn(True) + ["postgres"],
                      check=True, capture_output=True)
            s.psql("ALTER TABLE pgbench_accounts ADD COLUMN aid_copy int GENERATED ALWAYS AS (aid) STORED",
                   "CREATE INDEX ON pgbench_accounts (aid_copy)", "CREATE EXTENSION pg_prewarm",
                   "VACUUM ANALYZE", "CHECKPOINT")
        if args.pg_prewarm and args.kind == "plain":
            s.psql("CREATE EXTENSION pg_prewarm")
        print(s.psql("SHOW server_encoding", "SHOW lc_collate",
                     "SELECT pg_size_pretty(pg_database_size('postgres'))").split())
    print(f"made {args.kind} data in {data} in {time.monotonic() - t0:.0f} s")


def backends(postmaster: int) -> dict[int, int]:
    """pid -> minflt of the postmaster's children that serve user postgres on db postgres."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            st = Path(f"/proc/{d}/stat").read_text()
            if int(st[st.rindex(")") + 2:].split()[1]) != postmaster:
                continue
            if Path(f"/proc/{d}/cmdline").read_bytes().startswith(b"postgres: postgres postgres "):
                out[int(d)] = faults(int(d))[0]
        except (OSError, ValueError, IndexError):
            pass
    return out


def settle(postmaster: int, timeout: float = 15.0) -> None:
    """Wait until every client backend has exited and been reaped (its faults in the postmaster's cminflt).
    A backend here may be on the unix socket, so it is told by its user and database, not its address."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and client_backends(postmaster, b"postgres postgres"):
        time.sleep(0.02)


def perf_syscalls(pids: list[int], seconds: float, out: Path) -> tuple[subprocess.Popen, Path]:
    """perf record of the backends' brk, mmap and munmap calls for `seconds` (read by perf_counts)."""
    events = ["syscalls:sys_enter_brk", "syscalls:sys_enter_mmap", "syscalls:sys_enter_munmap"]
    return subprocess.Popen(["perf", "record", "-q", "-o", str(out), "-p", ",".join(map(str, pids))] +
                            [x for e in events for x in ("-e", e)] + ["--", "sleep", str(seconds)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), out


def perf_counts(rec: tuple[subprocess.Popen, Path] | None) -> dict:
    """brk, mmap and munmap calls, and the trims among the brk calls (the break moved down: glibc's
    systrim giving the top of the heap back) with the bytes they gave back."""
    if rec is None:
        return {}
    proc, path = rec
    proc.wait()
    text = subprocess.run(["perf", "script", "-i", str(path), "-F", "pid,event,trace"], capture_output=True,
                          text=True).stdout
    path.unlink(missing_ok=True)
    out = {"brk": 0, "mmap": 0, "munmap": 0, "trims": 0, "trimmed": 0}
    last: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"\s*(\d+)\s+syscalls:sys_enter_(brk|mmap|munmap):\s*(.*)$", line)
        if not m:
            continue
        pid, call, rest = m.groups()
        out[call] += 1
        if call == "brk":
            to = int(re.search(r"brk: (0x[0-9a-f]+)", rest).group(1), 16)
            if to:  # brk(0) asks where the break is
                if pid in last and to < last[pid]:
                    out["trims"] += 1
                    out["trimmed"] += last[pid] - to
                last[pid] = to
    return out


def gdb_state(pid: int) -> dict:
    argv = ["gdb", "-p", str(pid), "-batch", "-nx", "-q"] + [x for f in GDB_FIELDS for x in ("-ex", f"p {f}")]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    vals = re.findall(r"^\$\d+ = (\d+)", r.stdout, re.M)
    return dict(zip(GDB_FIELDS, map(int, vals))) if len(vals) == len(GDB_FIELDS) else {}


def one_run(data: Path, settings: dict, run: set, env: dict, clients: int, args, script: Path) -> dict:
    sock = Path(args.sock)
    with Server(data, args.port, settings, env, sock, Path(args.log) if args.log else None) as s:
        tcp = "tcp" in run
        if "prewarm" in run:
            s.psql(PREWARM_SQL, tcp=tcp)
        bench = ["pgbench", "-n"] + s.conn(tcp) + ["-c", str(clients), "-j", str(clients), "-s", "10",
                                                     "-f", str(script)]
        if args.warmup:
            run_as_pg(bench + ["-T", str(args.warmup), "postgres"], check=True, capture_output=True)
        settle(s.pid)
        before = sum(faults(s.pid))
        extra = 1 if args.trace else 0
        t0 = time.monotonic()
        p = subprocess.Popen(as_postgres() + bench + ["-T", str(args.duration + extra), "-P", "1", "postgres"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # drain stderr (the progress lines) while we read /proc
        err: list[str] = []
        drain = threading.Thread(target=lambda: err.extend(p.stderr), daemon=True)
        drain.start()
        time.sleep(max(0.0, t0 + WINDOW[0] - time.monotonic()))
        b0 = backends(s.pid)
        perf = perf_syscalls(list(b0), WINDOW[1] - WINDOW[0], sock / "brk.perf") if args.trace and b0 else None
        time.sleep(max(0.0, t0 + WINDOW[1] - time.monotonic()))
        b1 = backends(s.pid)
        sys_counts = perf_counts(perf)
        state = {}
        if args.trace:
            time.sleep(max(0.0, t0 + args.duration + 0.2 - time.monotonic()))
            states = [gdb_state(pid) for pid in b1]
            for f in GDB_FIELDS:
                vals = [st[f] for st in states if f in st]
                state[f.split(".")[-1]] = "/".join(map(str, vals))
        out = p.stdout.read()
        p.wait()
        drain.join()
        if p.returncode:
            raise SystemExit(f"pgbench failed: {''.join(err)[-2000:]}")
        settle(s.pid)
        after = sum(faults(s.pid))
    prog = {float(m.group(1)): float(m.group(2))
            for m in re.finditer(r"progress: ([\d.]+) s, ([\d.]+) tps", "".join(err))}
    steady = [v for t, v in prog.items() if SKIP < t <= args.duration + 0.01]
    win_tx = sum(v for t, v in prog.items() if WINDOW[0] < t <= WINDOW[1] + 0.01)
    win_faults = sum(b1[pid] - b0[pid] for pid in b1 if pid in b0)
    n = int(re.search(r"number of transactions actually processed: (\d+)", out).group(1))
    row = {"tps": statistics.mean(steady), "tx_window": win_tx, "faults_window": win_faults,
           "fpt": win_faults / max(win_tx, 1), "transactions": n, "faults_all": after - before,
           "fpt_all": (after - before) / max(n, 1), "backends": len(b0)}
    for k in ("brk", "mmap", "munmap", "trims"):
        if k in sys_counts:
            row[f"{k}_per_tx"] = sys_counts[k] / max(win_tx, 1)
    if "trimmed" in sys_counts:
        row["trimmed_mb_per_tx"] = sys_counts["trimmed"] / max(win_tx, 1) / 2**20
    return row | state


def measure(args) -> None:
    datas = dict(d.split("=", 1) for d in args.data)
    configs = []
    for c in args.config:
        name, spec = c.split("=", 1)
        dname, sspec, rspec = spec.split("/")
        if dname not in datas:
            raise SystemExit(f"--config {c}: no --data {dname}=DIR")
        configs.append((name, Path(datas[dname]), apply({"plain": PLAIN, "recipe": RECIPE}, sspec, "settings"),
                        apply(RUNS, rspec, "run"), spec))
    for name, _, settings, run, spec in configs:
        print(f"# {name}: {spec}: settings {settings}; run {sorted(run)}", flush=True)
    variants = args.variants.split(",")
    clients = [int(c) for c in args.clients.split(",")]
    sock = Path(args.sock)
    sock.mkdir(parents=True, exist_ok=True)
    shutil.chown(sock, "postgres", "postgres")
    script = sock / "join.sql"
    script.write_text(JOIN_SQL[args.query])
    script.chmod(0o644)
    fields = ["rep", "config", "variant", "clients", "started", "tps", "fpt", "fpt_all", "tx_window",
              "faults_window", "transactions", "faults_all", "backends", "brk_per_tx", "trims_per_tx",
              "trimmed_mb_per_tx", "mmap_per_tx", "munmap_per_tx"] + [f.split(".")[-1] for f in GDB_FIELDS]
    rows = []
    with open(args.out, "w", newline="") as fh:
        w = csv.DictWriter(fh, fields, extrasaction="ignore")
        w.writeheader()
        for rep in range(args.reps):
            k = rep % len(configs)
            for name, data, settings, run, _ in configs[k:] + configs[:k]:
                for c in clients:
                    order = variants[rep % len(variants):] + variants[:rep % len(variants)]
                    for v in order:
                        started = time.strftime("%H:%M:%S")
                        r = one_run(data, settings, run, VARIANTS[v], c, args, script)
                        row = {"rep": rep, "config": name, "variant": v, "clients": c, "started": started, **r}
                        w.writerow(row)
                        fh.flush()
                        rows.append(row)
                        print({k: (round(x, 2) if isinstance(x, float) else x) for k, x in row.items()}, flush=True)
    summarize(rows, [c[0] for c in configs], clients)


def timeline(args) -> None:
    """One client's backend, second by second: its minor faults against pgbench's transactions (the
    switch of issue 33), with gdb's reading of glibc's heap at the seconds asked for."""
    settings = apply({"plain": PLAIN, "recipe": RECIPE}, args.settings, "settings")
    run = apply(RUNS, args.run, "run")
    sock = Path(args.sock)
    sock.mkdir(parents=True, exist_ok=True)
    shutil.chown(sock, "postgres", "postgres")
    script = sock / "join.sql"
    script.write_text(JOIN_SQL["recipe"])
    script.chmod(0o644)
    fields = ["mp_.trim_threshold", "main_arena.system_mem", "main_arena.top->mchunk_size"]
    walk = Path(__file__).with_name("pg_heapwalk.py")
    with Server(Path(args.data), args.port, settings, {}, sock, Path(args.log) if args.log else None) as s:
        tcp = "tcp" in run
        if "prewarm" in run:
            s.psql(PREWARM_SQL, tcp=tcp)
        bench = ["pgbench", "-n"] + s.conn(tcp) + ["-c", "1", "-j", "1", "-s", "10", "-f", str(script)]
        if args.warmup:
            run_as_pg(bench + ["-T", str(args.warmup), "postgres"], check=True, capture_output=True)
        settle(s.pid)
        t0 = time.monotonic()
        p = subprocess.Popen(as_postgres() + bench + ["-T", str(args.duration), "-P", "1", "postgres"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        samples, notes, gdb_at = [], [], sorted(args.gdb_at)
        while p.poll() is None:
            time.sleep(max(0.0, 1 - (time.monotonic() - t0) % 1) + 0.001)
            b = backends(s.pid)
            if not b:
                continue
            now = time.monotonic() - t0
            samples.append((round(now), sum(b.values())))
            if gdb_at and now >= gdb_at[0]:
                gdb_at.pop(0)
                argv = ["gdb", "-p", str(next(iter(b))), "-batch", "-nx", "-q"]
                argv += [x for f in fields for x in ("-ex", f"p {f}")] + (["-x", str(walk)] if args.walk else [])
                out = subprocess.run(argv, capture_output=True, text=True, timeout=120).stdout
                vals = re.findall(r"^\$\d+ = (\d+)", out, re.M)
                notes.append(f"at {now:.1f} s: " + ", ".join(f"{f} {int(v):,}" for f, v in zip(fields, vals)))
                notes += [line for line in out.splitlines() if line.startswith(("heap", "  "))]
        err = p.stderr.read()
    prog = {round(float(a)): float(b) for a, b in re.findall(r"progress: ([\d.]+) s, ([\d.]+) tps", err)}
    for (t1, f1), (t2, f2) in zip(samples, samples[1:]):
        if t2 in prog:
            print(f"{t2:3d} s  tps {prog[t2]:5.1f}  faults {f2 - f1:7,d}  per transaction {(f2 - f1) / max(prog[t2], 0.1):7,.0f}")
    print("\n".join(notes))


def summarize(rows: list[dict], configs: list[str], clients: list[int]) -> None:
    others = [v for v in dict.fromkeys(r["variant"] for r in rows) if v != "glibc"]
    print("config | glibc faults/tx " + " | ".join(f"{c}c" for c in clients) + "".join(
        f" | {v}/glibc tps " + " | ".join(f"{c}c" for c in clients) for v in others) + " | reps")
    for name in configs:
        fpt, ratio, reps = [], [], set()
        for c in clients:
            g = {r["rep"]: r for r in rows if r["config"] == name and r["clients"] == c and r["variant"] == "glibc"}
            f = sorted(r["fpt"] for r in g.values())
            fpt.append(f"{statistics.median(f):,.0f} ({f[0]:,.0f}-{f[-1]:,.0f})" if f else "-")
            reps |= set(g)
        for v in others:
            for c in clients:
                g = {r["rep"]: r for r in rows if r["config"] == name and r["clients"] == c and r["variant"] == "glibc"}
                p = {r["rep"]: r for r in rows if r["config"] == name and r["clients"] == c and r["variant"] == v}
                q = sorted(p[k]["tps"] / g[k]["tps"] for k in g if k in p)
                ratio.append(f"x{statistics.median(q):.3f} ({q[0]:.2f}-{q[-1]:.2f})" if q else "-")
        print(f"{name} | " + " | ".join(fpt) + " | " + " | ".join(ratio) + f" | {len(reps)}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("--kind", choices=["plain", "recipe"], required=True)
    m.add_argument("--dir", required=True)
    m.add_argument("--pg-prewarm", action="store_true")
    m.add_argument("--port", type=int, default=55470)
    r = sub.add_parser("measure")
    r.add_argument("--data", action="append", required=True, help="NAME=DATADIR (repeatable)")
    r.add_argument("--config", action="append", required=True, help="NAME=DATA/SETTINGS/RUN (repeatable)")
    r.add_argument("--variants", default="glibc,pad")
    r.add_argument("--clients", default="1,2")
    r.add_argument("--reps", type=int, default=3)
    r.add_argument("--duration", type=int, default=10)
    r.add_argument("--warmup", type=int, default=3)
    r.add_argument("--query", choices=list(JOIN_SQL), default="recipe")
    r.add_argument("--trace", action="store_true", help="brk/mmap/munmap calls and trims per tx (perf record) and glibc's thresholds (gdb)")
    r.add_argument("--sock", default="/var/tmp/pgab/sock", help="the unix socket's directory (and join.sql)")
    r.add_argument("--log", default="", help="append the servers' output to this file")
    r.add_argument("--port", type=int, default=55471)
    r.add_argument("-o", "--out", default="pg_plain.csv")
    t = sub.add_parser("timeline", help="one backend's faults and tps second by second")
    t.add_argument("--data", required=True, help="the data directory")
    t.add_argument("--settings", default="plain", help="as in measure's SETTINGS")
    t.add_argument("--run", default="plain", help="as in measure's RUN")
    t.add_argument("--duration", type=int, default=22)
    t.add_argument("--warmup", type=int, default=3)
    t.add_argument("--gdb-at", type=float, action="append", default=[],
                   help="read glibc's trim threshold, heap size and top chunk at this second (repeatable)")
    t.add_argument("--walk", action="store_true", help="and walk the heap's chunks (bench/pg_heapwalk.py)")
    t.add_argument("--sock", default="/var/tmp/pgab/sock")
    t.add_argument("--log", default="")
    t.add_argument("--port", type=int, default=55472)
    args = p.parse_args()
    {"make": make, "measure": measure, "timeline": timeline}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
