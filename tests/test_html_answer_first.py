"""The HTML report of the stored experiments (tests/fixtures, real runs) opens with its answer: the
recommendation right under the picture, before the answer table, the metadata and the workloads'
tables; and its banner of serious warnings names only the kinds of warning the page shows (the
stored redis run had drift alone, and once read "failed runs, load, drift"). Where it lies in a
browser's first screen: tests/test_report_html_chromium.py."""

from __future__ import annotations

import re
import shutil

import pytest

from alloclab.report import Options, export
from alloclab.report.html import SERIOUS_KINDS
from alloclab.stats.results import build_results
from alloclab.store.db import Store
from test_golden_reports import FIXTURES, STORES


@pytest.fixture(scope="module", params=sorted(STORES))
def page(request, tmp_path_factory) -> str:
    db = tmp_path_factory.mktemp("html") / STORES[request.param]
    shutil.copyfile(FIXTURES / STORES[request.param], db)
    return export(build_results(Store(db).load(None)), "html", Options())


def test_the_recommendation_comes_right_under_the_picture(page):
    at = {name: page.find(mark) for name, mark in (("picture", 'id="picture"'), ("rec", 'id="recommendation"'),
                                                   ("answer", 'id="answer"'), ("meta", 'id="metadata"'),
                                                   ("tables", 'class="results"'))}
    assert at["rec"] > 0 and all(at[k] > at["rec"] for k in ("answer", "meta", "tables")), at
    assert at["picture"] < at["rec"]
    # nothing but the picture between the banners and the recommendation
    between = page[page.index("</section>", at["picture"]):at["rec"]]
    assert "<table" not in between and "<h2" not in between


def test_the_banner_names_only_the_warnings_that_occurred(page):
    shown = set(re.findall(r"<strong>([a-z-]+)</strong> <span class=\"advice\">", page))
    kinds = [SERIOUS_KINDS[c] for c in SERIOUS_KINDS if c in shown]   # (no stored run failed)
    banner = re.search(r'<section class="banner bad">\d+ serious warnings? \(([^)]*)\): read', page)
    if not kinds:
        assert banner is None
        return
    assert banner is not None, "serious warnings shown, no banner"
    assert sorted(banner.group(1).split(", ")) == sorted(set(kinds))
