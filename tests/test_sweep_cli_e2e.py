"""Sweeps, ablation and parameter substitution through the real CLI."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e


def test_compare_sweeps_a_tunable_and_a_placeholder(build, cli, store_of):
    prog = build("churn")
    p = cli("compare", "--runs", "3", "-a", "glibc:MALLOC_TOP_PAD_={0,64M}", "--param", "live=1,4",
            "--metric", "ops=ops/s: (\\d+)", "--", str(prog), "50", "{live}")
    assert p.returncode == 0, p.stderr
    e = store_of(cli.db).load()
    assert [w.argv[-1] for w in e.workloads] == ["1", "4"]
    assert len(e.variants) == 2 and {v.env["MALLOC_TOP_PAD_"] for v in e.variants} == {"0", str(64 << 20)}
    kinds = {("tunable" in s) or ("param" in s) for s in e.config.sweeps}
    assert kinds == {True} and any(s.get("param") == "live" for s in e.config.sweeps)
    assert "MALLOC_TOP_PAD_" in p.stdout


def test_suite_ablation_reports_contributions(cli, store_of):
    p = cli("suite", "--workload", "oversized", "--quick", "--runs", "3", "--param", "queries=10",
            "--ablate", "glibc:MALLOC_TOP_PAD_=64M,MALLOC_ARENA_MAX=2")
    assert p.returncode == 0, p.stderr
    e = store_of(cli.db).load()
    assert len(e.variants) == 4  # baseline, each alone, both
    assert "ablation" in e.config.sweep
    assert "interact" in p.stdout.lower()


def test_placeholder_without_param_is_a_clear_error(cli):
    p = cli("compare", "--param", "threads=1,2", "--", "true")
    assert p.returncode == 2 and "has no {threads}" in p.stderr
