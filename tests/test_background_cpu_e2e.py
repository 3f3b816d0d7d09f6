"""A file's background daemons serve its runs (the Ceph client's recipe runs a monitor and an OSD
beside every `rbd bench`): their CPU is the run's, not other programs', so a busy daemon does not
read as a busy host ("Other processes used up to 1.29 cores of 2" on every Ceph client run).

Serial: it reads the machine's CPU, which another test beside it would use."""

from __future__ import annotations

import statistics
import sys

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.serial]

FILE = f"""
[experiment]
name = "daemon beside"
variants = ["glibc"]

[[setup]]
background = true
# A daemon that spins a core for as long as the session lasts, as a loaded OSD does.
command = ["{sys.executable}", "-c", "while True: pass"]

[[command]]
name = "client"
command = ["{sys.executable}", "-c", "import time; time.sleep(0.8); print('done: 1')"]
metrics = [{{ name = "done", regex = "done: (\\\\d+)", unit = "n", higher = true, primary = true }}]
"""


def test_a_busy_background_daemon_is_not_counted_as_other_work(cli, store_of, tmp_path):
    exp = tmp_path / "daemon.toml"
    exp.write_text(FILE)
    p = cli("run", str(exp), "--runs", "3", "--warmup", "0", "--no-verify", timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    e = store_of(cli.db).load()
    other = [r.extra["other_cpu"] for r in e.runs if r.status == "ok" and r.extra.get("other_cpu") is not None]
    assert len(other) == 3, [r.extra for r in e.runs]
    # The daemon spins a whole core during each run; counted as the run's, what is left is near 0.
    assert statistics.median(other) < 0.5, other
    assert "Other processes used" not in p.stdout, p.stdout
