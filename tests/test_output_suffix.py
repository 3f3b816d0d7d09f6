"""`-o FILE` writes the format its suffix names unless -f is given, on every command that writes a
file: `report -o x.json` is JSON, `-o x.md` Markdown, `-o x.html` a page. Run through the real CLI
on the stored demo experiment (tests/fixtures)."""

from __future__ import annotations

import csv
import json
import shutil

import pytest

from conftest import run_cli
from test_golden_reports import FIXTURES, STORES

pytestmark = pytest.mark.xdist_group("output-suffix")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    d = tmp_path_factory.mktemp("suffix")
    shutil.copyfile(FIXTURES / STORES["demo"], d / "demo.db")
    shutil.copyfile(FIXTURES / STORES["redis"], d / "redis.db")   # small: what a diff of two needs
    return d


def alloclab(d, *argv, db="demo.db"):
    p = run_cli(list(argv[:1]) + ["--db", str(d / db)] + list(argv[1:]), cwd=d, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return p


def test_report_takes_the_format_from_the_suffix(demo):
    for name in ("x.json", "x.md", "x.html", "x.csv", "x.txt"):
        p = alloclab(demo, "report", "-o", name)
        assert f"Report written to {name}" in p.stderr and p.stdout == ""
    data = json.loads((demo / "x.json").read_text())
    assert data["schema"] == 3 and len(data["results"]) == 7
    assert (demo / "x.md").read_text().startswith("## alloclab: suite: simple, oversized")
    page = (demo / "x.html").read_text()
    assert page.startswith("<!doctype html>") and '<section class="rec" id="recommendation">' in page
    rows = list(csv.DictReader((demo / "x.csv").open()))
    assert rows and {"experiment", "workload", "variant", "status"} <= set(rows[0])
    text = (demo / "x.txt").read_text()
    assert "Answer (each comparison against glibc" in text and "Every variant verified" in text


def test_a_format_given_wins_over_the_suffix(demo):
    alloclab(demo, "report", "-f", "md", "-o", "y.json")
    assert (demo / "y.json").read_text().startswith("## alloclab: ")


def test_diff_takes_the_format_from_the_suffix_and_names_what_it_cannot_write(demo):
    alloclab(demo, "diff", "1", "1", "-o", "d.json", db="redis.db")
    assert json.loads((demo / "d.json").read_text())["a"] == 1
    alloclab(demo, "diff", "1", "1", "-o", "d.md", db="redis.db")
    assert (demo / "d.md").read_text().startswith("#")
    p = run_cli(["diff", "--db", str(demo / "redis.db"), "1", "1", "-o", "d.html"], cwd=demo, timeout=120)
    assert p.returncode != 0 and "The file name d.html asks for html" in p.stderr
    assert "it writes terminal, md, json" in p.stderr and not (demo / "d.html").exists()
