"""`alloclab diff` as a reviewer expects pyperf's compare_to: a summary line, what did not change
folded, the statistic named with why (two experiments share no blocks: unpaired), identical inputs
said to be identical without a test, and a file path read as a file whatever it is called.

On the stored demo suite (tests/fixtures): its JSON export against a copy that differs only in its
title, and against itself."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import run_cli
from test_golden_reports import FIXTURES

pytestmark = pytest.mark.xdist_group("diff-reads")


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    d = tmp_path_factory.mktemp("diff")
    db = d / "demo.db"
    shutil.copyfile(FIXTURES / "demo-suite-trimmed.db", db)
    p = run_cli(["report", "--db", str(db), "-f", "json", "-o", str(d / "a.json")])
    assert p.returncode == 0, p.stderr
    data = json.loads((d / "a.json").read_text())
    data["experiment"]["title"] = data["experiment"].get("title", "") + " (copy)"   # other bytes, same runs
    (d / "b.json").write_text(json.dumps(data))
    return d


def test_two_demo_exports_fit_a_screen_with_a_summary_and_the_statistic_named(exports):
    p = run_cli(["diff", str(exports / "a.json"), str(exports / "b.json")], cwd=exports,
                env={**__import__("os").environ, "COLUMNS": "160"})
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.rstrip("\n").splitlines()
    assert len(lines) <= 40, f"{len(lines)} lines"
    flat = " ".join(p.stdout.split())
    assert "440 comparisons of B against A:" in flat and "undecided" in flat
    assert "unpaired: two experiments share no blocks" in flat and "Mann-Whitney" in flat
    assert "unchanged comparisons not shown" in flat


def test_the_same_experiment_twice_is_said_identical(exports):
    for argv in (["diff", "1", "1", "--db", str(exports / "demo.db")],
                 ["diff", str(exports / "a.json"), str(exports / "a.json")]):
        p = run_cli(argv, cwd=exports)
        assert p.returncode == 0, p.stderr
        assert "identical, nothing to compare" in p.stdout, p.stdout
        assert "comparisons of B against A" not in p.stdout
    p = run_cli(["diff", "1", "1", "--db", str(exports / "demo.db"), "-f", "json"], cwd=exports)
    assert json.loads(p.stdout)["identical"] is True


def test_a_path_is_read_as_a_file_whatever_its_name(exports):
    (exports / "r.csv").write_text("workload,metric\n")
    p = run_cli(["diff", str(exports / "a.json"), str(exports / "r.csv")], cwd=exports)
    assert p.returncode != 0 and "is a report (csv): it holds no runs to compare" in p.stderr, p.stderr
    assert "write an id" not in p.stderr
    p = run_cli(["diff", str(exports / "a.json"), "../nowhere/b"], cwd=exports)
    assert p.returncode != 0 and "Cannot read ../nowhere/b" in p.stderr, p.stderr
