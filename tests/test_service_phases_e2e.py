"""Warm-up, steady state and memory phases of a service run, end to end on a small server of
the tests' own (tests/programs/memserver.py: a Python HTTP server whose large objects are
mallocs of the allocator under test); the redis and PostgreSQL recipes' phases are checked in
test_service_e2e.py, the schema errors in test_experiment_file.py."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from alloclab.measure.service import commands
from alloclab.errors import AlloclabError
from alloclab.store.db import Store
from conftest import ALLOCLAB, PROGRAMS, require_allocator
from test_service_e2e import assert_torn_down, run_file, scratch, summary  # noqa: F401

pytestmark = pytest.mark.e2e

GET = ('import sys, urllib.request; '
       'print(urllib.request.urlopen("http://127.0.0.1:" + sys.argv[1] + sys.argv[2]).read().decode())')
# Prints the progress lines a client such as pgbench -P 1 prints, then fills the server.
FILL = ('import sys, urllib.request; [print("progress: " + str(i) + ".0 s, " + v + " tps") for i, v in '
        'enumerate(sys.argv[3].split(","), 1)]; '
        'print(urllib.request.urlopen("http://127.0.0.1:" + sys.argv[1] + sys.argv[2]).read().decode())')
# Requests /hit for argv[2] seconds; prints how many requests the server had seen before.
HITS = ('import sys, time, urllib.request; u = "http://127.0.0.1:" + sys.argv[1]; '
        'first = urllib.request.urlopen(u + "/hit").read().decode(); t = time.time() + float(sys.argv[2]); '
        '[urllib.request.urlopen(u + "/hit").read() for _ in iter(lambda: time.time() > t, True)]; print(first)')


def experiment(tmp_path: Path, client: str, params: str = "", service_extra: str = "") -> tuple[Path, str]:
    token = f"alloclab-test-{uuid.uuid4().hex[:12]}"
    shutil.copy(PROGRAMS / "memserver.py", tmp_path / "memserver.py")
    text = f"""
[experiment]
name = "mem"

[params]
python = "{sys.executable}"
token = "{token}"
n = 40000
{params}

[service]
command = ["{{python}}", "{{recipe_dir}}/memserver.py", "{{port}}", "{{token}}"]
ready = {{ tcp = true }}
start_timeout = 10
stop_timeout = 5
{service_extra}
{client}
"""
    path = tmp_path / "mem.toml"
    path.write_text(text)
    return path, token


PHASED = f"""
[[client]]
name = "fill"
warmup = [["{{python}}", "-c", '{GET}', "{{port}}", "/hit"], ["{{python}}", "-c", '{GET}', "{{port}}", "/hit"]]
command = ["{{python}}", "-c", '{FILL}', "{{port}}", "/fill?n={{n}}&size=1000", "1,10,10,12"]
metrics = [{{ name = "tps", progress = 'progress: [\\d.]+ s, ([\\d.]+) tps', skip = 1, primary = true }},
           {{ name = "hits_before", regex = 'hits_before=(\\d+)' }}]
[[client.phase]]
name = "half"
command = ["{{python}}", "-c", '{GET}', "{{port}}", "/free?half=1"]
idle = 0.3
[[client.phase]]
name = "flush"
command = ["{{python}}", "-c", '{GET}', "{{port}}", "/free"]
idle = 0.3
[[client.phase]]
name = "idle"
idle = "{{rest}}"
"""


def test_phases_read_memory_after_each_action_under_real_allocators(tmp_path, scratch, cli):
    require_allocator("jemalloc")
    path, token = experiment(tmp_path, PHASED, params="rest = 0.5")
    e = run_file(path, cli.db, variants=("glibc", "jemalloc"), verify=True)
    assert e.row.status == "complete"
    assert all(v.status == "verified" for v in e.verifications.values()), e.verifications
    runs = [r for r in e.runs if not r.warmup]
    assert runs and all(r.status == "ok" for r in e.runs)
    for r in e.runs:
        m, s = r.metrics, summary(r)
        # Two warm-up requests ran, unmeasured, before the load; the load saw them.
        assert m["hits_before"] == 2
        # Steady state: the first interval (1 tps) dropped, the mean of the others kept.
        assert m["tps"] == pytest.approx((10 + 10 + 12) / 3)
        assert s["intervals"]["tps"] == [1, 10, 10, 12]
        # 40,000 objects of 1000 B: the server grew by at least 35 MiB during the load.
        assert m["rss_after_load_mb"] - s["rss_ready_mb"] > 35
        assert m["rss_after_half_mb"] > s["rss_ready_mb"] + 10, "half the objects are still live"
        for phase in ("half", "flush", "idle"):
            assert 0 < m[f"pss_after_{phase}_mb"] <= m[f"rss_after_{phase}_mb"] + 0.1
            assert -0.5 < m[f"returned_after_{phase}"] <= 1.0
        assert m["returned_after_idle"] >= m["returned_after_half"] - 0.05  # freeing more never holds more
        assert m["final_rss_mb"] == pytest.approx(m["rss_after_load_mb"], abs=0.01)
        names = [p["name"] for p in s["phases"]]
        assert names == ["load", "half", "flush", "idle"]
        starts = [p["t_start"] for p in s["phases"]]
        assert starts == sorted(starts) and all(p["t_end"] >= p["t_start"] for p in s["phases"])
    assert_torn_down(token, scratch, [summary(r)["server_port"] for r in e.runs])
    # The report: the phases' metrics in the tables, and the RSS timeline marks where each began.
    p = cli("report", "--details")
    assert p.returncode == 0, p.stdout + p.stderr
    for name in ("rss_after_half_mb", "rss_after_flush_mb", "rss_after_idle_mb", "returned_after_idle"):
        assert name in p.stdout
    out = tmp_path / "r.html"
    p = cli("report", "-f", "html", "-o", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    html = out.read_text()
    assert "Dotted lines: where the load and each memory phase began" in html
    for name in ("load", "half", "flush", "idle"):   # the labels of the dotted lines, as SVG text
        assert f"rotate(-90)\">{name}</text>" in html, name


def test_warmup_seconds_run_the_client_itself_unmeasured(tmp_path, scratch):
    client = f"""
[[client]]
name = "hits"
warmup = 2
command = ["{{python}}", "-c", '{HITS}', "{{port}}", "0.2"]
metrics = [{{ name = "hits", regex = 'hits=(\\d+)' }}]
"""
    path, token = experiment(tmp_path, client)
    e = run_file(path, tmp_path / "w.db")
    r = e.runs[0]
    assert r.status == "ok"
    # The measured run's first request found the warm-up's requests already served.
    assert r.metrics["hits"] > 3
    # The run's time is the measured client's alone (0.2 s of requests and the interpreter's start,
    # about 0.35 s here), not the warm-up's 2 s: room for a CPU half as fast beside another process.
    assert r.wall_s < 1.5
    assert summary(r)["excluded_cpu_s"] > 0
    assert_torn_down(token, scratch, [summary(r)["server_port"]])


def test_a_failing_phase_fails_the_run_and_stops_the_server(tmp_path, scratch):
    client = f"""
[[client]]
name = "fill"
command = ["{{python}}", "-c", '{FILL}', "{{port}}", "/fill?n=10", "1"]
[[client.phase]]
name = "broken"
command = ["{{python}}", "-c", "import sys; print(\\"no such thing\\"); sys.exit(4)"]
"""
    path, token = experiment(tmp_path, client)
    with pytest.raises(AlloclabError) as info:
        run_file(path, tmp_path / "f.db")
    assert "phase 'broken'" in str(info.value) and "exited with status 4" in str(info.value)
    assert "no such thing" in str(info.value)
    e = Store(tmp_path / "f.db").load()
    assert e.runs[0].status == "failed"
    assert_torn_down(token, scratch, [summary(e.runs[0])["server_port"]])


def test_ctrl_c_during_a_phase_stops_the_server(tmp_path, scratch):
    client = f"""
[[client]]
name = "fill"
command = ["{{python}}", "-c", '{FILL}', "{{port}}", "/fill?n=10", "1"]
[[client.phase]]
name = "long"
idle = 60
"""
    port = commands.free_port()
    path, token = experiment(tmp_path, client, service_extra=f"port = {port}")
    db = tmp_path / "int.db"
    proc = subprocess.Popen([*ALLOCLAB, "run", "--db", str(db), str(path), "-a", "glibc", "--runs", "2",
                             "--warmup", "0", "--no-verify"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # The phase has begun once the server holds the client's 10 objects (and the client is gone).
    deadline = time.monotonic() + 60
    filled = False
    while time.monotonic() < deadline and not filled and proc.poll() is None:
        time.sleep(0.2)
        with contextlib.suppress(OSError):
            filled = urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=2).read() == b"kept=10"
    assert filled, "the load never filled the server: " + (proc.stderr.read() if proc.poll() is not None else "")
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert_torn_down(token, scratch, [port])
    assert Store(db).load().row.status == "interrupted"
