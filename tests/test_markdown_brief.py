"""`report -f md` (and `-f markdown`) is the short answer for a patch mail: of the stored demo suite
(tests/fixtures, real runs; and the shared demo store where this checkout has one) at most 100
lines, none over 200 characters, holding the answer and one table per workload; `--details` gives
the full tables."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import run_cli
from test_golden_reports import FIXTURES, STORES

MAX_LINES, MAX_WIDTH = 100, 200
SHARED_DEMO = Path(__file__).resolve().parent.parent.parent / "shared" / "experiments" / "demo.db"
DEMOS = [FIXTURES / STORES["demo"]] + ([SHARED_DEMO] if SHARED_DEMO.is_file() else [])


def _report(db: Path, tmp_path: Path, *args: str) -> str:
    copy = tmp_path / db.name
    shutil.copyfile(db, copy)   # the store may write its WAL beside it: never into the fixture
    p = run_cli(["report", "--db", str(copy), *args], timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.mark.parametrize("fmt", ["md", "markdown"])
@pytest.mark.parametrize("db", DEMOS, ids=lambda p: p.parent.name + "/" + p.name)
def test_the_mail_is_short_and_narrow(db, fmt, tmp_path):
    text = _report(db, tmp_path, "-f", fmt)
    lines = text.splitlines()
    assert len(lines) <= MAX_LINES, f"{len(lines)} lines"
    wide = [line for line in lines if len(line) > MAX_WIDTH]
    assert not wide, f"{len(wide)} lines over {MAX_WIDTH} characters, the first: {wide[0][:80]}..."


def test_the_mail_holds_the_answer_and_a_table_per_workload(tmp_path):
    import json
    text = _report(FIXTURES / STORES["demo"], tmp_path, "-f", "md")
    d = json.loads(_report(FIXTURES / STORES["demo"], tmp_path, "-f", "json"))
    rec = d["recommendation"]
    assert "**" + rec["overall"]["sentence"].split(". ")[0] in text   # the answer across workloads
    for w, choice in zip(d["results"], rec["workloads"]):
        # each workload's table, its pick marked, every compared variant a row of it
        [table] = [block for block in text.split("\n\n") if block.startswith(f"| {w['workload']}: ")]
        rows = table.splitlines()[2:]
        assert len(rows) == len(d["variants"]) - 1
        if choice["pick"] is not None:
            assert any(r.startswith(f"| **{choice['pick']}** (use) ") for r in rows)
    assert "peak_rss_mb" not in text and "wall_s" not in text   # the full tables are --details'


def test_details_give_the_full_tables(tmp_path):
    short = _report(FIXTURES / STORES["demo"], tmp_path, "-f", "md")
    full = _report(FIXTURES / STORES["demo"], tmp_path, "-f", "md", "--details")
    assert len(full.splitlines()) > len(short.splitlines())
    assert "peak_rss_mb (MiB)" in full and "wall_s (s)" in full and "Verification:" in full
