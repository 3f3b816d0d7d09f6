"""Golden reports: three stored experiments from real runs (the built-in demo, the PostgreSQL and
the redis recipe, run on the 2-core development VM on 2026-11-23), rendered in every format and
compared with checked-in outputs, so that a change to the statistics or the renderers that moves
any verdict, figure or sentence shows up as a diff a reviewer reads.

The fixtures are the stores of ../shared/experiments with the runs' stdout, stderr and RSS series
blanked (the reports do not read them back) to keep them small. Charts are left out of the HTML
comparison (their SVG follows matplotlib's version, not ours), and so is the time of rendering.

After a deliberate change, regenerate and review the diff:
    UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_golden_reports.py
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from alloclab.report import FORMATS, Options, export
from alloclab.stats.results import build_results
from alloclab.store.db import Store

# Its tests share a module fixture: one worker runs them all (make test: --dist loadgroup).
pytestmark = pytest.mark.xdist_group("golden")

FIXTURES = Path(__file__).parent / "fixtures"
GOLDEN = Path(__file__).parent / "golden"
STORES = {"demo": "demo-suite-trimmed.db", "postgres": "postgres-recipe-trimmed.db", "redis": "redis-recipe-trimmed.db"}
SUFFIX = {"terminal": "txt", "md": "md", "html": "html", "json": "json", "csv": "csv"}


def _stable(fmt: str, text: str) -> str:
    if fmt == "html":
        text = re.sub(r"<svg\b.*?</svg>", "<svg/>", text, flags=re.S)
        text = re.sub(r'data:image/[a-z+]+;base64,[A-Za-z0-9+/=]+', "data:image", text)
    # the moment of rendering, in any format that states it
    return re.sub(r"(generated|rendered)([^0-9\n]{0,40}(?:\d+\.\d+\.\d+[^0-9\n]{0,10})?)\d{4}-\d\d-\d\d[T ][0-9:.+Z-]+",
                  r"\1\2<now>", text, flags=re.I)


@pytest.fixture(scope="module", params=sorted(STORES))
def analysis(request, tmp_path_factory):
    db = tmp_path_factory.mktemp("golden") / STORES[request.param]
    shutil.copyfile(FIXTURES / STORES[request.param], db)   # the store may write its WAL beside it
    return request.param, build_results(Store(db).load(None))


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_a_stored_experiment_renders_as_checked_in(analysis, fmt, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    name, a = analysis
    text = _stable(fmt, export(a, fmt, Options()))
    golden = GOLDEN / f"{name}.{SUFFIX[fmt]}"
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.mkdir(exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"no golden output {golden.name}: run with UPDATE_GOLDEN=1 and review it"
    assert text == golden.read_text(), f"{golden.name} differs: review with UPDATE_GOLDEN=1 and git diff"


def test_the_full_tables_render_as_checked_in(analysis, monkeypatch):
    # The terminal format is the short answer; --details gives the tables, kept here as they render.
    monkeypatch.setenv("COLUMNS", "160")
    name, a = analysis
    text = _stable("terminal", export(a, "terminal", Options(details=True)))
    golden = GOLDEN / f"{name}.details.txt"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(text)
    assert golden.exists(), f"no golden output {golden.name}: run with UPDATE_GOLDEN=1 and review it"
    assert text == golden.read_text(), f"{golden.name} differs: review with UPDATE_GOLDEN=1 and git diff"


def test_the_comparison_can_fail(analysis):
    # A golden test is only worth something if a changed verdict shows: one moved figure must.
    name, a = analysis
    text = _stable("md", export(a, "md", Options()))
    assert text.replace("%", "‰", 1) != (GOLDEN / f"{name}.md").read_text()
