"""The Ceph recipes end to end, small: a real private cluster (ceph-mon, ceph-osd with BlueStore
on a file), real librbd clients (fio's rbd engine, rbd bench, qemu-img), real allocators; and on
success, on a failing step and on Ctrl-C, no Ceph process, port or file is left behind."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from alloclab.workloads import experiment_file as xf
from alloclab.measure.service import commands
from alloclab.store.db import Store
from conftest import ALLOCLAB, require_allocator
from test_service_e2e import processes_with, require_programs, scratch, summary  # noqa: F401 (fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

RBD_SMALL = ["--param", "image_mb=32", "--param", "seconds=1", "--param", "ios=2048", "--param", "io_total=8M"]
OSD_SMALL = ["--param", "image_mb=32", "--param", "seconds=1"]


def ceph_left(scratch: Path) -> list[str]:
    """Ceph daemons and clients of this test's cluster (their argv names its directory)."""
    deadline = time.monotonic() + 5
    while processes_with(str(scratch)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [" ".join(psutil.Process(p).cmdline()) for p in processes_with(str(scratch))]


def mon_port(scratch: Path) -> int | None:
    for conf in scratch.glob("*/ceph.conf"):
        m = re.search(r"mon host = v2:127\.0\.0\.1:(\d+)", conf.read_text())
        if m:
            return int(m.group(1))
    return None


def test_recipe_ceph_rbd_client(cli, scratch):
    require_programs(xf.resolve("recipe:ceph-rbd-client"))
    require_allocator("tcmalloc")
    p = cli("run", "recipe:ceph-rbd-client", "-a", "glibc", "-a", "tcmalloc", "--runs", "1", "--warmup", "0",
            *RBD_SMALL, timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    e = Store(cli.db).load()
    names = [w.name for w in e.workloads]
    assert names == [f"ceph-rbd-client: {n}" for n in ("fio randread", "fio randwrite", "rbd bench", "qemu-img bench")]
    ver = {(e.workloads[wi].name.split(": ")[1], e.variants[vi].label): v for (wi, vi), v in e.verifications.items()}
    assert all(v.status == "verified" for v in ver.values()), ver
    # What the files say of the client and of librbd/librados: Debian's build links no allocator.
    for client in ("fio randread", "rbd bench"):
        notes = " ".join(ver[(client, "glibc")].notes)
        assert "librbd.so.1" in notes and "librados.so.2" in notes and "link no allocator" in notes, notes
    for r in e.runs:
        m = r.metrics
        assert r.status == "ok", r
        assert m["iops"] > 100
        # CPU per I/O is the client's own CPU (the launcher's rusage) over the I/Os it reported.
        ios = {"fio randread": r"issued rwts: total=(\d+),", "fio randwrite": r"issued rwts: total=\d+,(\d+),",
               "rbd bench": r"ops:\s*(\d+)", "qemu-img bench": r"Sending (\d+) read requests"}
        name = e.workloads[r.workload_idx].name.split(": ")[1]
        count = int(re.findall(ios[name], r.stdout)[-1])
        assert m["cpu_us_per_io"] == pytest.approx(m["cpu_s"] * 1e6 / count, rel=0.01)
        assert 10 < m["peak_rss_mb"] < 1024
    assert ceph_left(scratch) == []
    assert list(scratch.iterdir()) == []


def test_recipe_ceph_osd(cli, scratch):
    require_programs(xf.resolve("recipe:ceph-osd"))
    require_allocator("jemalloc")
    # One variant keeps it short: the OSD under a preloaded jemalloc, verified, is the point.
    # The writes alone (--client): the reads are the same fio under the same restarted OSD.
    p = cli("run", "recipe:ceph-osd", "--client", "4K randwrite", "-a", "jemalloc", "--runs", "1", "--warmup", "0",
            "--idle", "0", *OSD_SMALL, timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    e = Store(cli.db).load()
    assert [w.name for w in e.workloads] == ["ceph-osd: 4K randwrite"]
    assert all(v.status == "verified" for v in e.verifications.values()), e.verifications
    serials = set()
    for r in e.runs:
        m, s = r.metrics, summary(r)
        assert r.status == "ok", r
        assert m["iops"] > 50
        assert 0 < m["clat_p50_us"] <= m["clat_p99_us"] <= m["clat_p99_9_us"]
        # The OSD's CPU while fio ran is part of its whole life's CPU (start-up and stop included).
        assert 0 < s["load_cpu_s"] <= m["cpu_s"]
        assert m["osd_cpu_us_per_io"] > 0
        assert 50 < m["peak_pss_mb"] <= m["peak_rss_mb"] + 1
        assert {q["name"] for q in json.loads(r.processes)} == {"ceph-osd"}  # the variant's tree: the OSD
        serials.add(s["server_serial"])
    assert len(serials) == len(e.runs)  # a fresh OSD under the variant for every run
    assert ceph_left(scratch) == []
    assert list(scratch.iterdir()) == []


def test_a_failing_setup_step_stops_the_cluster(cli, scratch):
    require_programs(xf.resolve("recipe:ceph-rbd-client"))
    p = cli("run", "recipe:ceph-rbd-client", "-a", "glibc", "--runs", "1", *RBD_SMALL, "--param", "image_mb=0",
            timeout=180)
    assert p.returncode == 2, p.stdout + p.stderr
    err = " ".join(p.stderr.split())
    assert "the image size must be at least 1 MiB" in err and "setup step" in err
    assert ceph_left(scratch) == []
    assert list(scratch.iterdir()) == []


def test_ctrl_c_mid_run_stops_the_osd_the_monitor_and_fio(tmp_path, scratch):
    require_programs(xf.resolve("recipe:ceph-osd"))
    db = tmp_path / "int.db"
    proc = subprocess.Popen([*ALLOCLAB, "run", "--db", str(db), "recipe:ceph-osd", "-a", "glibc", "--runs", "3",
                             "--warmup", "0", "--no-verify", *OSD_SMALL, "--param", "seconds=30"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    port = None
    deadline = time.monotonic() + 120
    running = []
    while time.monotonic() < deadline:
        time.sleep(0.3)
        port = port or mon_port(scratch)
        running = []
        for pid in processes_with(str(scratch)):
            try:
                running.append(" ".join(psutil.Process(pid).cmdline()))
            except psutil.Error:
                pass   # a short-lived set-up command ended between the two looks
        if any(" fio " in c for c in running) and \
                any(c.startswith("ceph-osd ") for c in running) and any(c.startswith("ceph-mon ") for c in running):
            break
    else:
        proc.kill()
        pytest.fail(f"fio never ran against the OSD: {running}")
    assert port is not None and commands.port_in_use(port)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert ceph_left(scratch) == []
    assert not commands.port_in_use(port), f"the monitor's port {port} is still taken"
    assert list(scratch.iterdir()) == []
    assert Store(db).load().row.status == "interrupted"
