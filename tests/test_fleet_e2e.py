"""Fleet runs end to end on real Dask workers (local:N and a real `dask scheduler` over tcp://),
real allocators and a real program: two hosts in one experiment, a worker killed mid-run, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

from conftest import ALLOCLAB, require_allocator, running, still_left

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
OPS = "ops=ops/s: (\\d+):higher"


def _hosts(e) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in e.runs:
        out.setdefault(r.extra["host"], []).append(r)
    return out


def _sessions(root: int) -> list[psutil.Process]:
    try:
        kids = psutil.Process(root).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    out = []
    for p in kids:
        try:
            if "alloclab.fleet.session" in " ".join(p.cmdline()):
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def _wait_for_sessions(proc, n: int, timeout: float = 90) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _sessions(proc.pid)
        if len(found) >= n:
            return found
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    raise AssertionError(f"{n} fleet sessions did not start within {timeout} s")


def _wait_for_runs(sessions: list[psutil.Process], n: int, timeout: float = 90) -> None:
    """Until every session's own SQLite file (its last argument) holds n runs."""
    import sqlite3
    dbs = [s.cmdline()[-1] for s in sessions]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        counts = []
        for db in dbs:
            try:
                with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
                    counts.append(c.execute("SELECT count(*) FROM runs").fetchone()[0])
            except sqlite3.Error:
                counts.append(0)
        if min(counts) >= n:
            return
        time.sleep(0.2)
    raise AssertionError(f"the sessions did not store {n} runs each within {timeout} s")


def test_compare_on_two_local_workers_stores_both_hosts_and_reports_each(build, cli, store_of):
    require_allocator("tcmalloc")
    prog = build("churn")
    p = cli("compare", "--fleet", "local:2", "-a", "glibc", "-a", "tcmalloc", "--runs", "6", "--metric", OPS,
            "--", str(prog), "300", "16", check=True)
    assert "local workers share this machine's CPUs" in p.stderr and "not for timing" in p.stderr
    store = store_of(cli.db)
    assert [r["id"] for r in store.experiments()] == [1]
    e = store.load(1)
    hosts = _hosts(e)
    assert len(hosts) == 2 and all("/w" in h for h in hosts)   # one machine: hostname/worker labels
    for runs in hosts.values():
        for vi in (0, 1):
            measured = [r for r in runs if r.variant_idx == vi and not r.warmup]
            assert len(measured) == 6 and all(r.status == "ok" and r.metrics["ops"] > 0 for r in measured)
    assert set(e.machine.hosts) == set(hosts) and e.row.status == "complete"
    a, b = ({r.block for r in runs} for runs in hosts.values())
    assert not a & b            # a block is one host's: the analysis pairs the runs of a block
    assert all(v.status == "verified" for v in e.verifications.values())
    for h in hosts:
        assert f"host {h}:" in p.stdout
    assert "Across hosts" in p.stdout and "tcmalloc (ops)" in p.stdout
    # The history, the stored report and a diff of one host against the other show the hosts.
    listing = cli("experiments", check=True).stdout
    assert "2 hosts" in listing
    rep = cli("report", check=True).stdout
    assert all(f"host {h}:" in rep for h in hosts)
    md = cli("report", "-f", "md", "--details", check=True).stdout   # the metadata block: the full report's
    assert "fleet:      per-host on local:2" in md and all(f"{h} (6 runs per variant)" in md for h in hosts)
    h1, h2 = sorted(hosts)
    d = cli("diff", f"1@{h1}", f"1@{h2}", check=True).stdout
    # The host named as what changed; the comparisons (the same program: unchanged ones folded) summed up.
    assert f"host: {h1} -> {h2}" in d and "of B against A:" in d, d


def test_split_mode_spreads_whole_blocks_over_identical_hosts(build, cli, store_of):
    prog = build("churn")
    cli("compare", "--fleet", "local:2", "--fleet-mode", "split", "-a", "glibc", "-a", "glibc@again", "--runs", "4",
        "--metric", OPS, "--", str(prog), "200", "8", check=True)
    e = store_of(cli.db).load()
    hosts = _hosts(e)
    assert len(hosts) == 2
    measured = [r for r in e.runs if not r.warmup]
    assert len(measured) == 8   # 4 runs x 2 variants, shared out
    blocks = {h: {r.block for r in runs} for h, runs in hosts.items()}
    a, b = blocks.values()
    assert not a & b            # a block is whole on one host
    for runs in hosts.values():   # and every block runs every variant once
        by_block: dict[int, list[int]] = {}
        for r in runs:
            by_block.setdefault(r.block, []).append(r.variant_idx)
        assert all(sorted(v) == [0, 1] for v in by_block.values())
    assert e.config.fleet["mode"] == "split"


def test_an_error_on_every_host_is_one_clear_error(build, cli):
    prog = build("churn")
    p = cli("compare", "--fleet", "local:2", "-a", "glibc", "--runs", "1", "--metric", "iops=IOPS: (\\d+)",
            "--", str(prog), "10", "1")
    assert p.returncode == 2
    line = p.stderr.strip().splitlines()[-1]
    assert line.startswith("error: Every task of the fleet failed: on ") and line.count("matched nothing") == 1, line
    assert "/w0, " in line and "Fix the pattern" in line


def test_a_killed_worker_has_its_task_retried_and_the_other_host_loses_nothing(build, tmp_path, store_of):
    prog = build("churn")
    db = tmp_path / "kill.db"
    proc = subprocess.Popen([*ALLOCLAB, "compare", "--db", str(db), "--fleet", "local:2", "-a", "glibc",
                             "-a", "glibc@again", "--runs", "6", "--metric", OPS, "--", str(prog), "10", "1", "", "0.1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        sessions = _wait_for_sessions(proc, 2)
        _wait_for_runs(sessions, 3)
        victim = sessions[0]
        worker = victim.parent()
        assert "alloclab.fleet.session" not in " ".join(worker.cmdline())
        worker.kill()                                    # the Dask worker process, mid-session
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert "died during" in err, err
    assert not running([victim.pid])                      # the orphaned session stopped itself
    e = store_of(db).load()
    fleet = e.config.fleet
    retried = [t for t in fleet["tasks"].values() if t["attempt"] == 2]
    failed = fleet["failed"]
    assert retried or failed, fleet
    per_host = {h: len([r for r in runs if r.status == "ok"]) for h, runs in _hosts(e).items()}
    full = 2 * (1 + 6)
    # The host whose worker lived keeps all its runs; the other ran again, or is named as failed.
    assert sorted(per_host.values()) == [full, full] or (len(failed) == 1 and full in per_host.values()), (per_host, fleet)
    if failed:
        assert any(h in next(iter(failed.values())) for h in fleet["hosts"])


def test_ctrl_c_stops_every_worker_session_and_keeps_the_runs_that_came_back(build, tmp_path, store_of):
    prog = build("churn")
    db = tmp_path / "int.db"
    proc = subprocess.Popen([*ALLOCLAB, "compare", "--db", str(db), "--fleet", "local:2", "-a", "glibc",
                             "-a", "glibc@again", "--runs", "20", "--metric", OPS, "--", str(prog), "10", "1", "", "0.1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait_for_runs(_wait_for_sessions(proc, 2), 3)
        everything = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        os.killpg(proc.pid, signal.SIGINT)               # what a terminal's Ctrl-C does
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "Interrupted" in err and "alloclab report --db" in err
    assert not still_left(lambda: running(everything))   # no worker, session or program left running
    e = store_of(db).load()
    assert e.row.status == "interrupted"
    per_host = {h: len(runs) for h, runs in _hosts(e).items()}
    assert len(per_host) == 2 and all(n >= 3 for n in per_host.values()), (per_host, err)
    assert len(e.runs) < 2 * 2 * 21


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_tcp_scheduler_preflight_leaves_out_a_worker_without_the_resource(build, cli, store_of, tmp_path):
    """A real `dask scheduler` and `dask worker`s as docs/fleet.md starts them, on loopback."""
    prog = build("churn")
    port = _free_port()
    dask = [sys.executable, "-m", "dask"]
    procs = [subprocess.Popen([*dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)]
    address = f"tcp://127.0.0.1:{port}"
    try:
        for name, extra in (("good", ["--resources", "alloclab=1"]), ("shared", [])):
            procs.append(subprocess.Popen([*dask, "worker", address, "--host", "127.0.0.1", "--nthreads", "1",
                                           "--name", name, "--no-dashboard", *extra], stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL, start_new_session=True))
        from distributed import Client
        with Client(address, timeout=60) as c:   # both workers in, so the check sees them both
            c.wait_for_workers(2, timeout=60)
        strict = cli("compare", "--fleet", address, "--fleet-require-all", "-a", "glibc", "--runs", "2",
                     "--", str(prog), "100", "4")
        assert strict.returncode == 2
        assert "--fleet-require-all" in strict.stderr and "shared" in strict.stderr and "alloclab=1" in strict.stderr
        p = cli("compare", "--fleet", address, "-a", "glibc", "-a", "glibc@again", "--runs", "2", "--metric", OPS,
                "--", str(prog), "100", "4", check=True)
        assert "worker shared left out" in p.stderr
        e = store_of(cli.db).load()
        assert len(_hosts(e)) == 1 and len([r for r in e.runs if not r.warmup]) == 4
        assert "shared" in json.dumps(e.config.fleet["left_out"])
    finally:
        for p in reversed(procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
