"""--profile on an experiment file in command mode: its setup runs first, then the [[command]]
itself is profiled under each variant (the ceph-rbd-client recipe's clients are profiled this way)."""

from __future__ import annotations

import pytest

from alloclab.workloads import experiment_file as xf
from test_service_e2e import require_programs, scratch  # noqa: F401 (fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_profile_a_command_recipe_after_its_setup(cli, scratch):
    require_programs(xf.resolve("recipe:qemu-img"))
    p = cli("run", "recipe:qemu-img", "-a", "glibc", "--runs", "1", "--warmup", "0", "--no-verify", "--profile",
            "--profile-runs", "1", "--param", "size=64M", "--param", "count=20000", timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    out = " ".join(p.stdout.split())
    for name in ("qemu-img: qcow2", "qemu-img: raw"):
        assert f"Where the CPU goes: {name}" in out
    assert "Allocator share of CPU: glibc" in out
    assert list(scratch.iterdir()) == []   # the setup's images were removed after profiling too
