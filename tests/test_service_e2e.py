"""Service mode end to end: real servers under real allocators, real clients, every teardown path.

The generic machinery is driven with Python's own http.server (a real server, started and
stopped like any other); the shipped recipes run PostgreSQL, Redis and qemu-img themselves,
with small parameters."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil
import pytest

from alloclab.workloads import experiment_file as xf
from alloclab.measure.service import commands, executors
from alloclab.errors import AlloclabError
from alloclab.measure.runner import Runner, Settings
from alloclab.store.db import Store
from alloclab.catalog.variants import parse_variants
from conftest import ALLOCLAB, missing_prerequisite, require_allocator

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# Python code run by the toy experiments; single-quoted in TOML, so no single quotes and no braces.
SERVER = ('import sys, time, http.server; print("booting", flush=True); time.sleep(float(sys.argv[2])); '
          'http.server.test(HandlerClass=http.server.SimpleHTTPRequestHandler, port=int(sys.argv[1]), '
          'bind="127.0.0.1")')
CLIENT = ('import os, sys, time, urllib.request; time.sleep(float(sys.argv[2])); t = time.process_time(); '
          'body = urllib.request.urlopen("http://127.0.0.1:" + sys.argv[1] + "/").read(); print("bytes=" + str(len(body))); '
          'maps = open("/proc/self/maps").read(); '
          'print("preloaded=" + str(int("jemalloc" in maps or "LD_PRELOAD" in os.environ or "LD_DEBUG" in os.environ))); '
          '[0 for _ in iter(lambda: time.process_time() - t > float(sys.argv[4]), True)]; sys.exit(int(sys.argv[3]))')


def toy(tmp_path: Path, extra_service: str = "", params: str = "", clients: str | None = None,
        setup: str = "", metric: str = r"bytes=(\\d+)") -> tuple[Path, str]:
    token = f"alloclab-test-{uuid.uuid4().hex[:12]}"
    client = clients if clients is not None else f"""
[[client]]
name = "get"
command = ["{{python}}", "-c", '{CLIENT}', "{{port}}", "{{client_delay}}", "{{client_exit}}", "{{burn}}", "{{token}}"]
metrics = [{{ name = "bytes", regex = "{metric}" }}, {{ name = "preloaded", regex = "preloaded=(\\\\d)", higher = false }}]
"""
    text = f"""
[experiment]
name = "toy"

[params]
python = "{sys.executable}"
token = "{token}"
start_delay = 0.0
client_delay = 0.0
client_exit = 0
burn = 0.0
{params}
{setup}
[service]
command = ["{{python}}", "-u", "-c", '{SERVER}', "{{port}}", "{{start_delay}}", "{{token}}"]
ready = {{ tcp = true }}
start_timeout = 10
stop_timeout = 5
{extra_service}
{client}
"""
    path = tmp_path / "toy.toml"
    path.write_text(text)
    return path, token


@pytest.fixture
def scratch(monkeypatch):
    """A TMPDIR that run_as users can reach; the test checks alloclab left nothing in it."""
    path = Path(tempfile.mkdtemp(prefix="alloclab-svc-test-", dir="/tmp"))
    path.chmod(0o755)
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    monkeypatch.setenv("TMPDIR", str(path))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def run_file(path: Path, db: Path, variants=("glibc",), runs: int = 1, warmup: int = 0, verify: bool = False,
             timeout: float | None = None, params: dict | None = None):
    """The runner in-process on an experiment file, as `alloclab run` drives it."""
    ef = xf.load(path)
    workloads, session = executors.workloads(ef, ef.with_params(params or {}))
    store = Store(db)
    settings = Settings(runs=runs, warmup=warmup, timeout_s=timeout, verify=verify, kind="run", title=ef.name)
    try:
        Runner(store, workloads, parse_variants(list(variants)), settings).run()
    finally:
        session.cleanup()
    return store.load()


def summary(run: dict) -> dict:
    for line in reversed(run.stdout.splitlines()):
        if line.startswith('{"alloclab"'):
            return json.loads(line)["alloclab"]
    return {}


def processes_with(token: str) -> list[int]:
    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if token in " ".join(p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE:
            out.append(p.pid)
    return out


def assert_torn_down(token: str, scratch: Path, ports=()):
    deadline = time.monotonic() + 5
    while processes_with(token) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(token) == []
    for port in ports:
        assert not commands.port_in_use(port), f"port {port} still taken"
    assert list(scratch.iterdir()) == []


def require_programs(ef: xf.ExperimentFile) -> None:
    missing = ef.missing()
    if missing:
        missing_prerequisite(f"{', '.join(r.program for r in missing)} not installed "
                    f"(apt-get install -y {' '.join(sorted({r.package for r in missing}))})")


# --- the generic machinery on a real (small) server ---------------------------------------------

def test_the_variant_reaches_the_server_tree_and_never_the_client(tmp_path, scratch):
    require_allocator("jemalloc")
    path, token = toy(tmp_path, params="", extra_service="idle = 0.3")
    e = run_file(path, tmp_path / "a.db", variants=("glibc", "jemalloc"), verify=True, params={"burn": "1.5"})
    assert e.row.status == "complete"
    assert {v.label: e.verifications[(0, i)].status for i, v in enumerate(e.variants)} == \
        {"glibc": "verified", "jemalloc": "verified"}
    runs = e.runs
    assert len(runs) == 4 and all(r.status == "ok" for r in runs)
    for r in runs:
        m, s = r.metrics, summary(r)
        assert m["bytes"] > 0
        assert m["preloaded"] == 0, "the client ran under the variant or with LD_DEBUG"
        # The client burned 1.5 s of CPU; the server's figure is the server's alone (its start,
        # the bindings traced in the verified runs: 0.2-0.3 s here, room for a CPU half as fast).
        assert r.wall_s >= 1.5 and m["cpu_s"] < 1.0, m
        assert 0 < m["peak_pss_mb"] <= m["peak_rss_mb"] and m["final_rss_mb"] > 0
        assert s["cpu_source"] == "wait4+orphans" and m["cpu_s"] >= s["cpu_sampled_s"] - 0.05
        procs = json.loads(r.processes)
        assert len(procs) == 1 and procs[0]["name"].startswith("python")
        if e.variants[r.variant_idx].label == "jemalloc":
            assert procs[0]["mapped"] is True
    assert_torn_down(token, scratch, [summary(r)["server_port"] for r in runs])


def test_block_lifetime_shares_one_server_per_variant_within_a_block(tmp_path, scratch):
    require_allocator("jemalloc")
    clients = f"""
[[client]]
name = "a"
command = ["{{python}}", "-c", '{CLIENT}', "{{port}}", "0", "0", "0", "{{token}}"]
metrics = [{{ name = "bytes", regex = "bytes=(\\\\d+)" }}]
[[client]]
name = "b"
command = ["{{python}}", "-c", '{CLIENT}', "{{port}}", "0", "0", "0", "{{token}}"]
metrics = [{{ name = "bytes", regex = "bytes=(\\\\d+)" }}]
"""
    setup = '[[setup]]\ncommand = ["mkdir", "data"]\n'
    path, token = toy(tmp_path, clients=clients, setup=setup,
                      extra_service='lifetime = "block"\ndata_dir = "data"\nready = { log = "Serving HTTP on" }')
    path.write_text(path.read_text().replace("ready = { tcp = true }\n", ""))
    e = run_file(path, tmp_path / "b.db", variants=("glibc", "jemalloc"), runs=2)
    assert e.row.status == "complete" and all(r.status == "ok" for r in e.runs)
    serial = {}
    for r in e.runs:
        s = summary(r)
        assert s["cpu_source"] == "proc-window"
        serial.setdefault((r.block, r.variant_idx), set()).add(s["server_serial"])
    # One server per (block, variant), shared by both clients; a new one in the next block.
    assert all(len(v) == 1 for v in serial.values())
    assert serial[(0, 0)] != serial[(1, 0)] and serial[(0, 1)] != serial[(1, 1)]
    assert len({next(iter(v)) for v in serial.values()}) == 4
    assert_torn_down(token, scratch, [summary(r)["server_port"] for r in e.runs])


def test_reset_data_restores_the_pristine_copy_before_every_server(tmp_path, scratch):
    (tmp_path / "seed.txt").write_text("pristine\n")
    probe = 'import sys, urllib.request; urllib.request.urlopen("http://127.0.0.1:" + sys.argv[1] + "/")'
    counter = ('import sys; print(open(sys.argv[2]).read().strip()); print("lines=" + str(len(open(sys.argv[1]).readlines()))); '
               'open(sys.argv[1], "a").write("dirty" + chr(10))')
    setup = """
[files]
"note.txt" = "from files {token}"
[[setup]]
command = ["mkdir", "data"]
[[setup]]
command = ["cp", "{recipe_dir}/seed.txt", "data/marker"]
"""
    clients = f"""
[[client]]
name = "count"
command = ["{{python}}", "-c", '{counter}', "{{data_dir}}/marker", "{{workdir}}/note.txt"]
metrics = [{{ name = "lines", regex = "lines=(\\\\d+)" }}]
"""
    path, token = toy(tmp_path, clients=clients, setup=setup,
                      extra_service=f'data_dir = "data"\nreset_data = true\nready = {{ command = ["{{python}}", "-c", \'{probe}\', "{{port}}"] }}')
    path.write_text(path.read_text().replace("ready = { tcp = true }\n", ""))
    e = run_file(path, tmp_path / "c.db", runs=3)
    assert [r.status for r in e.runs] == ["ok"] * 3
    assert [r.metrics["lines"] for r in e.runs] == [1, 1, 1]  # without the reset: 1, 2, 3
    assert all(f"from files {token}" in r.stdout for r in e.runs)
    assert_torn_down(token, scratch)


def test_a_child_that_drops_the_preload_fails_verification(tmp_path, scratch):
    require_allocator("jemalloc")
    escaping = SERVER.replace('print("booting", flush=True); ',
                              'import subprocess; subprocess.Popen(["env", "-u", "LD_PRELOAD", sys.executable, "-c", '
                              '"import time; time.sleep(300)", sys.argv[3]]); ')
    path, token = toy(tmp_path)
    path.write_text(path.read_text().replace(SERVER, escaping))
    # A process counts as escaped once seen twice without the library (right after exec the loader
    # has not mapped it yet): the client waits so that the server is sampled often enough.
    e = run_file(path, tmp_path / "d.db", variants=("glibc", "jemalloc"), params={"client_delay": "0.5"})
    ver = {e.variants[vi].label: v for (wi, vi), v in e.verifications.items()}
    assert ver["glibc"].status != "ineffective"
    assert ver["jemalloc"].status == "ineffective"
    assert any("process python" in r and "escaped the preload" in r for r in ver["jemalloc"].reasons)
    assert_torn_down(token, scratch)


# --- bad input and failures: clear errors, and nothing left behind ---------------------------------

def test_a_service_that_never_becomes_ready_shows_its_log_tail(tmp_path, scratch):
    path, token = toy(tmp_path)
    path.write_text(path.read_text().replace("start_timeout = 10", "start_timeout = 1"))
    with pytest.raises(AlloclabError) as info:
        run_file(path, tmp_path / "e.db", params={"start_delay": "60"})
    msg = str(info.value)
    assert "did not become ready within 1 s" in msg and "TCP port 127.0.0.1:" in msg
    assert "booting" in msg  # the service's own output
    e = Store(tmp_path / "e.db").load()
    assert e.row.status == "failed" and e.runs[0].status == "failed"
    assert_torn_down(token, scratch, [summary(e.runs[0]).get("server_port", 0) or 1])


def test_a_port_already_taken_is_a_clear_error(tmp_path, scratch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        path, token = toy(tmp_path, extra_service=f"port = {port}")
        with pytest.raises(AlloclabError, match=f"Port {port} on 127.0.0.1 is already in use by python.*remove `port`"):
            run_file(path, tmp_path / "f.db")
    assert_torn_down(token, scratch)


@pytest.mark.parametrize("case", ["client fails", "metric missing", "client timeout"])
def test_client_failures_stop_the_server(tmp_path, scratch, case):
    path, token = toy(tmp_path, metric=r"nothing=(\\d+)" if case == "metric missing" else r"bytes=(\\d+)")
    params = {"client_exit": "3"} if case == "client fails" else {"client_delay": "30"} if case == "client timeout" else {}
    with pytest.raises(AlloclabError) as info:
        run_file(path, tmp_path / "g.db", params=params, timeout=1.0 if case == "client timeout" else None)
    msg = str(info.value)
    expected = {"client fails": "the client exited with status 3",
                "metric missing": "Metric 'bytes' (regex: nothing=(\\d+)) matched nothing",
                "client timeout": "the client timed out after 1 s"}[case]
    assert expected in msg
    if case == "metric missing":
        assert "bytes=" in msg  # the client's output tail
    e = Store(tmp_path / "g.db").load()
    assert_torn_down(token, scratch, [summary(r)["server_port"] for r in e.runs])


def test_ctrl_c_mid_run_stops_server_and_client_and_removes_the_workdir(tmp_path, scratch):
    path, token = toy(tmp_path)
    db = tmp_path / "int.db"
    proc = subprocess.Popen([*ALLOCLAB, "run", "--db", str(db), str(path), "-a", "glibc", "--runs", "3",
                             "--warmup", "0", "--no-verify", "--param", "client_delay=30"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    port = None
    while time.monotonic() < deadline and port is None:
        time.sleep(0.2)
        pids = processes_with(token)
        clients = [p for p in pids if "urllib" in " ".join(psutil.Process(p).cmdline())]
        servers = [p for p in pids if p not in clients]
        if clients and servers:
            listening = [c.laddr.port for c in psutil.net_connections("tcp")
                         if c.pid in servers and c.status == psutil.CONN_LISTEN]
            port = listening[0] if listening else None
    assert port is not None, "the server and client never both ran"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Interrupted" in err
    assert_torn_down(token, scratch, [port])
    e = Store(db).load()
    assert e.row.status == "interrupted"


def test_cli_errors_name_the_file_line_and_the_install_line(tmp_path, cli):
    bad = tmp_path / "bad.toml"
    bad.write_text('[experiment]\nname = "bad"\n\n[[command]]\ncommand = ["true"]\ntimeot = 3\n')
    p = cli("run", str(bad))
    assert p.returncode == 2 and f"{bad}:6: unknown key 'timeot' in [command[0]]" in p.stderr.replace("\n", "")
    need = tmp_path / "need.toml"
    need.write_text('[experiment]\nrequires = [{ program = "no-such-srv", package = "no-such-pkg" }]\n'
                    '[[command]]\ncommand = ["no-such-srv"]\n')
    p = cli("run", str(need))
    assert p.returncode == 2 and "apt-get install -y no-such-pkg" in p.stderr
    # A client the file does not have is refused before any set-up, with the names it has.
    two = tmp_path / "two.toml"
    two.write_text('[experiment]\nname = "two"\n[[command]]\nname = "a"\ncommand = ["true"]\n'
                   '[[command]]\nname = "b"\ncommand = ["true"]\n')
    p = cli("run", str(two), "--client", "c", "--runs", "1")
    err = " ".join(p.stderr.split())
    assert p.returncode == 2 and "--client 'c': 'two' has no command of that name. Its commands are: 'a', 'b'" in err, err
    p = cli("recipes")
    assert p.returncode == 0
    for name, package in (("postgres-partitions", "postgresql-15"), ("redis", "redis-server"), ("qemu-img", "qemu-utils")):
        assert f"recipe:{name}" in p.stdout and package in p.stdout


# --- the shipped recipes, small ---------------------------------------------------------------------

def test_recipe_postgres_partitions(cli, store_of, scratch):
    ef = xf.resolve("recipe:postgres-partitions")
    require_programs(ef)
    require_allocator("jemalloc")
    # duration 5: pgbench -P 1 prints 4 progress lines, 3 of them after the 1 the recipe skips. The
    # recipe's first client alone (--client), whose server and warm-up are the second's.
    p = cli("run", "recipe:postgres-partitions", "--client", "1 client", "-a", "glibc", "-a", "jemalloc", "--runs",
            "1", "--idle", "0", "--param", "scale=1", "--param", "partitions=20", "--param", "duration=5", "--param", "warmup_s=1",
            "--param", "settle=0.3",
            timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    e = store_of(cli.db).load()
    assert [w.name for w in e.workloads] == ["postgres-partitions: 1 client"]
    assert all(v.status == "verified" for v in e.verifications.values()), e.verifications
    for r in e.runs:
        m, s = r.metrics, summary(r)
        assert r.status == "ok" and m["tps"] > 0 and m["tps_whole_run"] > 0
        # tps is the steady state: the mean of the per-second figures after the first.
        assert len(s["intervals"]["tps"]) >= 3
        assert m["tps"] == pytest.approx(sum(s["intervals"]["tps"][1:]) / len(s["intervals"]["tps"][1:]), rel=1e-4)
        # The warm-up (prewarm, pgbench, CHECKPOINT) ran and its server CPU was taken out.
        assert s["excluded_cpu_s"] > 0
        assert m["rss_after_disconnect_mb"] > 0 and m["pss_after_disconnect_mb"] > 0
        procs = json.loads(r.processes)
        # postmaster, its auxiliary processes and the client's backends: all postgres, all checked
        assert len(procs) >= 5 and {q["name"] for q in procs} <= {"postgres"}
        if e.variants[r.variant_idx].label == "jemalloc":
            # The warm-up's psql backends may exit before their maps are read (mapped unknown);
            # none ran without the library, and the long-lived ones were all seen with it.
            assert all(q["mapped"] is not False for q in procs)
            assert sum(q["mapped"] is True for q in procs) >= 5
        assert m["cpu_s"] >= s["cpu_sampled_s"] - 0.05 and m["cpu_s"] > 0
        assert 0 < m["peak_pss_mb"] < m["peak_rss_mb"]  # shared buffers counted once in PSS
    assert "tps" in p.stdout and "1 client" in p.stdout
    assert not [q for q in psutil.process_iter(["exe"]) if (q.info["exe"] or "").startswith("/usr/lib/postgresql")
                and str(scratch) in " ".join(q.cmdline())]
    assert list(scratch.iterdir()) == []


def test_recipe_redis_reports_the_packaged_jemalloc(cli, store_of, scratch):
    ef = xf.resolve("recipe:redis")
    require_programs(ef)
    require_allocator("jemalloc")
    p = cli("run", "recipe:redis", "-a", "glibc-linked", "-a", "jemalloc", "--runs", "1", "--idle", "0",
            "--param", "requests=1000", "--param", "clients=10", "--param", "keys=20000", "--param", "rest=0.5", "--param", "settle=0.3",
            "--details")
    assert p.returncode == 0, p.stdout + p.stderr
    e = store_of(cli.db).load()
    ver = {e.variants[vi].label: v for (wi, vi), v in e.verifications.items()}
    # Debian's redis-server is linked against libjemalloc.so.2: with nothing preloaded
    # (glibc-linked) it runs jemalloc, and the answer says so first. ("glibc" gets alloclab's
    # forwarding preload instead: test_forward_e2e.py.)
    assert ver["glibc-linked"].status == "ineffective"
    assert any("libjemalloc" in r for r in ver["glibc-linked"].reasons)
    assert " ".join(p.stdout.split()).startswith("glibc-linked is not in use on redis: benchmark, redis: memory: ")
    assert ver["jemalloc"].status == "verified"
    assert all(r.status == "ok" for r in e.runs)
    for r in e.runs:
        if e.workloads[r.workload_idx].name != "redis: benchmark":
            continue  # the memory client: test_service_phases_e2e.py
        for metric in ("set_rps", "get_rps", "lpush_rps", "lrange_100_rps", "lrange_600_rps"):
            assert r.metrics[metric] > 0
    assert "INEFFECTIVE" in p.stdout
    # The memory client: per variant, RSS after the load, after each phase, and what was given back.
    for name in ("rss_after_load_mb", "rss_after_flush_mb", "rss_after_idle_mb", "returned_after_purge"):
        assert name in p.stdout
    memory = [r for r in e.runs if e.workloads[r.workload_idx].name == "redis: memory" and not r.warmup]
    assert len(memory) == 2
    for r in memory:
        m, s = r.metrics, summary(r)
        # 20,000 values of 1000 B went in through the protocol.
        assert m["rss_after_load_mb"] - s["rss_ready_mb"] > 15
        assert m["rss_after_flush_mb"] <= m["rss_after_delete_half_mb"] + 1
        for phase in ("delete_half", "flush", "purge", "idle"):
            assert m[f"rss_after_{phase}_mb"] > 0 and -0.5 < m[f"returned_after_{phase}"] <= 1.0
        # Both variants run jemalloc here (Debian links it into redis-server); after FLUSHALL and
        # MEMORY PURGE it gives most of the data set back.
        assert m["returned_after_purge"] > 0.5, m
        assert [ph["name"] for ph in s["phases"]] == ["load", "delete_half", "flush", "purge", "idle"]
    assert list(scratch.iterdir()) == []


def test_recipe_qemu_img_is_a_command_recipe(cli, store_of, scratch):
    ef = xf.resolve("recipe:qemu-img")
    require_programs(ef)
    require_allocator("jemalloc")
    p = cli("run", "recipe:qemu-img", "-a", "glibc", "-a", "jemalloc", "--runs", "1",
            "--param", "size=64M", "--param", "count=20000")
    assert p.returncode == 0, p.stdout + p.stderr
    e = store_of(cli.db).load()
    assert [w.name for w in e.workloads] == ["qemu-img: qcow2", "qemu-img: raw"]
    assert all(v.status == "verified" for v in e.verifications.values())
    for r in e.runs:
        m = r.metrics
        assert r.status == "ok"
        assert m["ops_per_s"] == pytest.approx(20000 / m["run_s"], rel=1e-3)
    assert list(scratch.iterdir()) == []
