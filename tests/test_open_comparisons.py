"""An open comparison whose interval spans more than a factor of 10 ("? -14.0% [-98.4, +4529.6]") bounds
nothing a reader can act on and reads like a finding: it says its estimate, the runs it rests on, why it
is open and what would close it; the JSON keeps the interval as numbers. A screen's line (a few runs
that only choose the finalists) gives its estimates and its runs, never an interval.

On a stored tune race of PostgreSQL's recipe (tests/fixtures/postgres-tune-trimmed.db: the store of
../shared/experiments/postgres-tune-2026-12-01.db, runs' output blanked): experiment 2 is its screen,
3 the race, in which candidates dropped below the leader rest on 4 runs against the baseline's 12."""

from __future__ import annotations

import json
import math
import re
import shutil

import pytest

from alloclab.report import Options, export
from alloclab.stats import estimates
from alloclab.stats.results import build_results
from alloclab.store.db import Store

from test_golden_reports import FIXTURES

pytestmark = pytest.mark.xdist_group("open-comparisons")

INTERVAL = re.compile(r"\[([+-]\d+\.\d), ([+-]\d+\.\d)\]")


@pytest.fixture(scope="module")
def race(tmp_path_factory):
    db = tmp_path_factory.mktemp("race") / "race.db"
    shutil.copyfile(FIXTURES / "postgres-tune-trimmed.db", db)
    return db, build_results(Store(db).load(3))


def _wide(c) -> bool:
    """Open, with an estimate, and an interval that is missing, not positive or wider than x10."""
    return (c.verdict == "undecided" and math.isfinite(c.ratio)
            and not (c.ci_low > 0 and c.ci_high / c.ci_low <= 10))


def _open_wide(r):
    a = r.analysis
    return [(w, row, vi, c) for w in a.workloads for row in w.rows for vi in range(len(a.labels))
            if vi != a.baseline_idx and (c := row.comparison(vi)) is not None and _wide(c)]


def test_the_race_has_open_comparisons_too_wide_to_print(race):
    _, r = race
    assert _open_wide(r)   # else this file tests nothing


def test_a_wide_open_comparison_gives_its_estimate_runs_and_what_would_close_it(race):
    _, r = race
    for *_, c in _open_wide(r):
        text = estimates.format_comparison(c)
        assert "[" not in text, text
        assert text.startswith(f"? {(c.ratio - 1) * 100:+.1f}% on {c.n_candidate} run"), text
        assert "too few or too noisy for an interval" in text
        if c.stopped:
            assert "stopped " in text
        if c.more_runs:
            assert f"~{c.more_runs} more run" in text


def test_no_printed_interval_of_an_open_comparison_spans_more_than_ten_times(race, tmp_path):
    from conftest import run_cli
    db, _ = race
    for exp, fmt in (("3", "terminal"), ("3", "md"), ("2", "terminal")):
        out = tmp_path / f"r{exp}.{'txt' if fmt == 'terminal' else fmt}"
        p = run_cli(["report", exp, "--db", str(db), "-f", fmt, "-o", str(out)])
        assert p.returncode == 0, p.stdout + p.stderr
        for line in out.read_text().splitlines():
            for lo, hi in INTERVAL.findall(line):
                low, high = 1 + float(lo) / 100, 1 + float(hi) / 100
                assert low > 0 and high / low <= 10 or "better" in line or "worse" in line, line


def test_the_json_keeps_the_wide_interval_as_numbers(race):
    _, r = race
    doc = json.loads(export(r, "json", Options()))
    cells = [cell["comparison"] for w in doc["results"] for row in w["metrics"] for cell in row["cells"]
             if cell.get("comparison")]
    wide = {(c.ci_low, c.ci_high) for *_, c in _open_wide(r)}
    kept = {(c["ci_low"], c["ci_high"]) for c in cells}
    assert wide <= kept, wide - kept


def test_a_screened_candidate_is_given_by_its_estimates_and_runs():
    from alloclab.report.tune import _screened_line
    line = _screened_line({"label": "tcmalloc", "rule": "", "runs": 1, "estimates": [
        {"workload": "w", "axis": "speed", "metric": "ops", "ratio": 1.5, "low": 0.0, "high": 4.9e8}]})
    assert line == "tcmalloc: screened at speed: +50.0% (estimates of 1 screen run each)", line


def test_two_runs_project_no_count_of_the_runs_a_verdict_needs():
    # A 15-minute PostgreSQL race stopped at 2 runs each printed "a verdict would need ~208516 more
    # runs": a spread read from two runs projects nothing.
    c = estimates.Comparison(0.96, 0.01, 90.0, 1.0, 1.0, True, "undecided", 2, 2, margin=0.02, method="paired",
                             more_runs=208516, stopped="budget")
    text = estimates.format_comparison(c)
    assert "208516" not in text and "2 runs each cannot tell how many a verdict needs" in text, text
    # The control: from 6 runs each, the projection is given.
    c6 = estimates.Comparison(0.96, 0.01, 90.0, 1.0, 1.0, True, "undecided", 6, 6, margin=0.02, method="paired",
                              more_runs=200, stopped="budget")
    assert "a verdict would need ~200 more runs" in estimates.format_comparison(c6)
