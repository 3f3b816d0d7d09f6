"""`alloclab inspect` on real servers, read while they serve:
  - Debian's redis-server, which links jemalloc, through its own channel (MEMORY MALLOC-STATS): the
    jemalloc split adds up to smaps_rollup within 5%, and redis answers a client throughout;
  - redis-server through alloclab's forwarding preload (glibc's malloc), after a fill and FLUSHALL,
    and a PostgreSQL backend after a query over many partitions: the walk's parts add up to the
    process's anonymous RSS (smaps_rollup) within max(5%, 2 MiB);
  - each of those two under alloclab's fingerprint interposer: the inspection agrees, part by part
    within 10% of the anonymous RSS, with the books the interposer wrote in the process then."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from conftest import need_program
from inspect_helpers import inspection

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PG_BIN = Path("/usr/lib/postgresql/15/bin")
MiB = 1 << 20


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _anon(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("Anonymous:"))


def _adds_up(snap: dict, anon: int, share: float, floor: int) -> None:
    parts = snap["split"]["parts"]
    total = sum(parts.values())
    # The figures, for `pytest -s` (docs/results/ records them).
    print(f"\n{snap['exe']}: parts {total:,} against smaps_rollup {anon:,} ({100 * (total - anon) / anon:+.2f}%), "
          f"{snap['pauses']} stops, longest {snap['pause_max_ms']} ms, read in {snap['read_s']} s; {parts}")
    assert abs(total - anon) <= max(share * anon, floor), (total, anon, parts, snap["split"]["unexplained"])


class Pinger(threading.Thread):
    """A client that keeps asking redis for PING while the inspection runs."""

    def __init__(self, port: int):
        super().__init__(daemon=True)
        self.port, self.stop, self.served, self.errors, self.worst = port, threading.Event(), 0, [], 0.0

    def run(self) -> None:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
                f = s.makefile("rb")
                while not self.stop.is_set():
                    t = time.perf_counter()
                    s.sendall(b"*1\r\n$4\r\nPING\r\n")
                    if f.readline() != b"+PONG\r\n":
                        self.errors.append("bad reply")
                        return
                    self.worst = max(self.worst, time.perf_counter() - t)
                    self.served += 1
        except OSError as exc:
            self.errors.append(repr(exc))


class Redis:
    def __init__(self, workdir: Path, env: dict | None = None):
        need_program("redis-benchmark", "redis-tools")
        self.port = _port()
        self.proc = subprocess.Popen([need_program("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1",
                                      "--save", "", "--appendonly", "no", "--dir", str(workdir)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=workdir)
        deadline = time.monotonic() + 30
        while self.cli("PING") != "PONG":
            assert time.monotonic() < deadline and self.proc.poll() is None, "redis-server did not start"
            time.sleep(0.05)

    def cli(self, *args: str) -> str:
        r = subprocess.run(["redis-cli", "-p", str(self.port), *args], capture_output=True, text=True, timeout=60)
        return r.stdout.strip()

    def fill(self, keys: int = 20000) -> None:
        subprocess.run(["redis-benchmark", "-p", str(self.port), "-t", "set", "-n", str(keys), "-r", "1000000000",
                        "-d", "1000", "-c", "10", "-P", "16", "-q"], check=True, capture_output=True, timeout=120)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def workdir():
    path = Path(tempfile.mkdtemp(prefix="alloclab-inspect-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_debian_redis_through_its_own_channel_adds_up_and_keeps_serving(cli, workdir):
    from alloclab.measure.forward import linked_allocator
    linked = linked_allocator(Path(need_program("redis-server")))
    if linked is None or linked.allocator.name != "jemalloc":
        pytest.skip("this redis-server does not link jemalloc")
    redis = Redis(workdir)
    try:
        redis.fill()
        # Every other key deleted: jemalloc keeps their pages, dirty or free inside its runs.
        redis.cli("EVAL", "local ks = redis.call('KEYS', 'key:*') for i = 1, #ks, 2 do redis.call('DEL', ks[i]) "
                          "end return #ks", "0")
        pinger = Pinger(redis.port)
        pinger.start()
        time.sleep(0.2)
        before = pinger.served
        got = inspection(cli("inspect", str(redis.proc.pid), "-f", "json"))
        during = pinger.served - before
        pinger.stop.set()
        pinger.join()
        assert not pinger.errors and during > 0, (pinger.errors, during)
        assert redis.cli("PING") == "PONG"
    finally:
        redis.close()
    snap = got[0]["snapshot"]
    assert snap["allocator"] == "jemalloc" and "MEMORY MALLOC-STATS" in snap["source"], snap["source"]
    assert not snap["stopped"] and snap["pauses"] == 0
    parts = snap["split"]["parts"]
    assert parts["live"] > 5 * MiB and {"free_inside", "caches", "decaying", "metadata"} <= set(parts), parts
    # jemalloc's background thread returns pages as it likes: the split is checked against the rollup
    # alloclab read with it. What jemalloc's books account for covers its mappings (the unexplained
    # is what its mappings hold beyond every part).
    _adds_up(snap, snap["rollup"]["Anonymous"], 0.05, 0)
    assert abs(snap["split"]["unexplained"]) <= 0.05 * snap["split"]["anon"], snap["split"]
    assert got[0]["answer"]["race"] == "alloclab tune recipe:redis"


def _forwarded_env(extra: dict | None = None) -> dict:
    from alloclab.measure.forward import forwarder
    return {**os.environ, "LD_PRELOAD": str(forwarder("forward.c")), **(extra or {})}


def test_redis_under_glibc_after_a_fill_and_flushall_adds_up(cli, workdir):
    redis = Redis(workdir, _forwarded_env())
    try:
        redis.fill()
        assert redis.cli("FLUSHALL", "SYNC") == "OK"
        time.sleep(0.3)
        got = inspection(cli("inspect", str(redis.proc.pid), "-f", "json"))
        anon = _anon(redis.proc.pid)
        assert redis.cli("PING") == "PONG"
    finally:
        redis.close()
    snap = got[0]["snapshot"]
    assert snap["allocator"] == "glibc" and "forwarding preload" in snap["allocator_how"], snap["allocator_how"]
    assert snap["source"].startswith("glibc's heaps") and snap["stopped"] and snap["pauses"] > 0
    _adds_up(snap, anon, 0.05, 2 * MiB)
    # 20,000 values of 1000 B are gone: glibc keeps their chunks, free inside its heap or at its top.
    parts = snap["split"]["parts"]
    assert parts["free_inside"] + parts["free_top"] > 8 * MiB, parts


def _fp_books_near(fp_dir: Path, pid: int, at_ns: int):
    """The interposer's books in process `pid` (its file in fp_dir), the row read nearest `at_ns` on
    the monotonic clock, split as the fingerprint splits it."""
    from alloclab.measure.fingerprint_books import ProcessBooks, split
    from alloclab.measure.fingerprint_work import ProcessFile
    files = sorted(fp_dir.glob(f"fp-{pid}-*.json"), key=lambda p: p.stat().st_mtime)
    assert files, list(fp_dir.iterdir())
    pf = ProcessFile.from_dict(json.loads(files[-1].read_text()))
    books = ProcessBooks.of(pf.books)
    assert books is not None and books.rows
    row = min(books.rows, key=lambda r: abs(pf.start_ns + r[0] * 1_000_000 - at_ns))
    figures = dict(zip(books.names, row[1:]))
    return split(books.interface, "then", None, figures), abs(pf.start_ns + row[0] * 1_000_000 - at_ns)


def _agrees(ours: dict, theirs, share: float = 0.10) -> None:
    """Part by part within `share` of the anonymous RSS. The fastbins' chunks are caches here and free
    inside in the fingerprint's split: those two are compared together."""
    a, b = dict(ours["parts"]), dict(theirs.parts)
    for d in (a, b):
        d["free_inside+caches"] = d.pop("free_inside", 0) + d.pop("caches", 0)
    anon = max(ours["anon"], theirs.anon)
    print(f"\nagainst the interposer's books: anon {ours['anon']:,} vs {theirs.anon:,}; "
          + "; ".join(f"{k} {a.get(k, 0):,} vs {b.get(k, 0):,} ({100 * (a.get(k, 0) - b.get(k, 0)) / anon:+.2f}% of anon)"
                      for k in sorted(set(a) | set(b))))
    assert abs(ours["anon"] - theirs.anon) <= share * anon, (ours["anon"], theirs.anon)
    for k in sorted(set(a) | set(b)):
        assert abs(a.get(k, 0) - b.get(k, 0)) <= share * anon, (k, a, b)


def test_redis_inspected_while_the_fingerprint_runs_it_agrees_with_its_books(cli, workdir):
    from alloclab.measure.fingerprint import preload_env
    fp_dir = workdir / "fp"
    fp_dir.mkdir()
    env = {**os.environ, **preload_env({"LD_PRELOAD": str(_forwarded_env()["LD_PRELOAD"])}, fp_dir)}
    redis = Redis(workdir, env)
    try:
        redis.fill()
        redis.cli("FLUSHALL", "SYNC")
        time.sleep(1.0)   # quiet: the interposer reads its books meanwhile, and again after the inspection
        t0 = time.monotonic_ns()
        got = inspection(cli("inspect", str(redis.proc.pid), "-f", "json"))
        t1 = time.monotonic_ns()
        time.sleep(1.0)
    finally:
        redis.close()
    theirs, off_ns = _fp_books_near(fp_dir, redis.proc.pid, (t0 + t1) // 2)
    assert off_ns < 3e9, off_ns
    _agrees(got[0]["snapshot"]["split"], theirs)


class Postgres:
    """A PostgreSQL 15 server of its own (as the postgres user), with pgbench's tables in PARTS partitions."""

    def __init__(self, workdir: Path, env: dict | None = None, parts: int = 200):
        if not (PG_BIN / "postgres").exists():
            from conftest import missing_prerequisite
            missing_prerequisite("PostgreSQL 15 is not installed (apt-get install -y postgresql)")
        if os.geteuid() != 0:
            pytest.skip("starts PostgreSQL as its own user: needs root")
        shutil.chown(workdir, "postgres")
        self.port, self.data = _port(), workdir / "data"
        run = ["runuser", "-u", "postgres", "--"]
        subprocess.run([*run, str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
                        "--no-sync", "-E", "UTF8", "--locale=C"], check=True, capture_output=True, timeout=120)
        self.proc = subprocess.Popen([*run, str(PG_BIN / "postgres"), "-D", str(self.data), "-p", str(self.port),
                                      "-c", "listen_addresses=127.0.0.1", "-k", str(workdir), "-c", "fsync=off",
                                      "-c", "shared_buffers=32MB", "-c", "jit=off", "-c", "autovacuum=off"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + 60
        while subprocess.run([str(PG_BIN / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)]).returncode:
            assert time.monotonic() < deadline and self.proc.poll() is None, "PostgreSQL did not start"
            time.sleep(0.1)
        subprocess.run(["pgbench", "-i", "-q", "-s", "1", f"--partitions={parts}", "-h", "127.0.0.1", "-p",
                        str(self.port), "-U", "postgres", "postgres"], check=True, capture_output=True, timeout=300)
        self.session = subprocess.Popen(["psql", "-X", "-q", "-A", "-t", "-h", "127.0.0.1", "-p", str(self.port), "-U",
                                         "postgres", "postgres"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, bufsize=1)

    def query(self, sql: str) -> str:
        self.session.stdin.write(sql + "\n")
        self.session.stdin.flush()
        return self.session.stdout.readline().strip()

    def close(self) -> None:
        if self.session.poll() is None:
            self.session.stdin.close()
            self.session.wait(timeout=30)
        if self.proc.poll() is None:
            # Its fast shutdown, sent to the postmaster itself: runuser, its parent, does not pass
            # SIGINT on (the test waited 60 s for it, then killed runuser and left the server).
            try:
                postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
                os.kill(postmaster, signal.SIGINT)
            except (OSError, ValueError, IndexError):
                self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                subprocess.run(["pkill", "-KILL", "-f", f"-D {self.data}"], check=False)
                self.proc.kill()
                self.proc.wait()


def test_a_postgres_backend_after_a_query_over_many_partitions(cli, workdir):
    from alloclab.measure.fingerprint import preload_env
    need_program("pgbench", "postgresql-client-15")
    need_program("psql", "postgresql-client-15")
    fp_dir = workdir / "fp"
    fp_dir.mkdir()
    shutil.chown(fp_dir, "postgres")
    env = {**os.environ, **preload_env({}, fp_dir, readable_in=workdir)}
    pg = Postgres(workdir, env)
    try:
        backend = int(pg.query("SELECT pg_backend_pid();"))
        # No pruning on abalance: the plan and the scan visit all 200 partitions.
        assert pg.query("SELECT count(*) FROM pgbench_accounts WHERE abalance = 1;") == "0"
        time.sleep(1.0)
        t0 = time.monotonic_ns()
        got = inspection(cli("inspect", str(backend), "-f", "json"))
        t1 = time.monotonic_ns()
        anon = _anon(backend)
        assert pg.query("SELECT 1;") == "1"   # the backend serves its session after it
        time.sleep(1.0)
        theirs, off_ns = _fp_books_near(fp_dir, backend, (t0 + t1) // 2)
    finally:
        pg.close()
    snap = got[0]["snapshot"]
    assert snap["allocator"] == "glibc" and snap["stopped"] and snap["pauses"] > 0
    assert got[0]["answer"]["race"] == "alloclab tune recipe:postgres-partitions"
    _adds_up(snap, anon, 0.05, 2 * MiB)
    assert snap["split"]["parts"]["live"] > 1 * MiB
    assert off_ns < 3e9, off_ns
    _agrees(snap["split"], theirs)
