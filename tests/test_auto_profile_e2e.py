"""Until decided, a comparison still open when the experiment stops gets one profiled run per
variant of its workload, made before the recipe's set-up is torn down, and the answer is set
beside the allocator's share of the CPU (measure/auto_profile.py)."""

from __future__ import annotations

import pytest

from alloclab.stats.analysis import analyze
from alloclab.stats.decide import DECIDED
from alloclab.workloads import experiment_file as xf
from test_service_e2e import require_programs, scratch  # noqa: F401 (fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_an_open_comparison_is_profiled_inside_the_recipes_setup(cli, scratch, store_of):
    require_programs(xf.resolve("recipe:qemu-img"))
    # glibc against itself at --max-runs 2: an A/A comparison on two blocks (df 1) stays open, unless
    # its two runs agree within about 0.1%, which qemu-img's timings never do. (tcmalloc against glibc
    # was decided on qcow2 at two blocks in one CI run: a real, large effect.)
    p = cli("run", "recipe:qemu-img", "-a", "glibc", "-a", "glibc@again", "--max-runs", "2", "--warmup", "0",
            "--no-verify", "--param", "size=64M", "--param", "count=20000", timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    exp = store_of(cli.db).load(None)
    a = analyze(exp, only_primary=True)
    open_ = [i for i, w in enumerate(a.workloads)
             if any(c.comparison and c.comparison.verdict not in DECIDED for c in w.primary().cells)]
    assert open_, "both A/A comparisons were decided on two blocks: the premise of this test is gone"
    names = ", ".join(a.workloads[i].name for i in open_)
    assert f"one profiled run per variant of {names}," in " ".join(p.stderr.split())
    out = " ".join(p.stdout.split())
    assert "undecided; the allocator's functions and the kernel's memory management took at most" in out
    # One run per variant of each open workload (and no other), profiled in the set-up the timed runs used.
    assert sorted(exp.profiles) == [(w, v) for w in open_ for v in (0, 1)]
    assert all(len(p["runs"]) == 1 and p["runs"][0]["status"] == "ok" for p in exp.profiles.values())
    assert list(scratch.iterdir()) == []   # and the set-up's images were removed after it


def test_fixed_runs_make_no_profile(cli, store_of):
    p = cli("compare", "-a", "glibc", "-a", "glibc@again", "--runs", "2", "--warmup", "0", "--no-verify",
            "--", "/bin/true")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "profiled run" not in p.stderr
    assert store_of(cli.db).load(None).profiles == {}
