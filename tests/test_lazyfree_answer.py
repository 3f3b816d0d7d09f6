"""A pick decided on RSS at its end whose reading LazyFree carries (pages freed with MADV_FREE, still
resident): the answer names its MiB beside the pick and gives the comparison without them, in every
format that prints picks. Pure logic on a built Analysis; the real MADV_FREE program's run is
tests/test_lazyfree_e2e.py's."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from alloclab.report.tune import answer_lines, pick_view
from alloclab.stats.analysis import Analysis, Cell, MetricRow, WorkloadResult
from alloclab.stats.estimates import CellSummary, Comparison
from alloclab.stats.tune_answer import answer
from alloclab.store.config_model import ExperimentConfig
from alloclab.store.model import VariantRecord, Verification


def cmp(pct: float, verdict: str) -> Comparison:
    return Comparison(1 + pct / 100, 1 + (pct - 1) / 100, 1 + (pct + 1) / 100, 0.001, 0.001, False, verdict, 12, 12,
                      margin=0.02, method="paired")


def summary(median: float) -> CellSummary:
    return CellSummary(12, median, median, 0.01, 0.01, median, median, median, median)


def analysis(lazy_mib: float) -> Analysis:
    """The pick gives back at its end with MADV_FREE: -40% by RSS, -99% without LazyFree."""
    records = [VariantRecord(0, "glibc", "glibc", None, env={}, settings=[]),
               VariantRecord(1, "mimalloc PAGE_RESET=1", "mimalloc:MIMALLOC_PAGE_RESET=1", "mimalloc",
                             env={"MIMALLOC_PAGE_RESET": "1"}, settings=[["MIMALLOC_PAGE_RESET", "1", "1"]])]
    rows = {"wall_s": ("s", [1.0, 1.0], cmp(0.0, "equivalent")),
            "peak_rss_mb": ("MiB", [300.0, 300.0], cmp(0.0, "equivalent")),
            "end_anon_mb": ("MiB", [280.0, 168.0], cmp(-40.0, "better")),
            "end_lazyfree_mb": ("MiB", [0.0, lazy_mib], cmp(0.0, "undecided")),
            "end_anon_nolazy_mb": ("MiB", [280.0, 168.0 - lazy_mib], cmp(-99.0, "better"))}
    out = [MetricRow(name, unit, False, "run", name == "wall_s",
                     [Cell(vi, [], [], summary(medians[vi]), None if vi == 0 else c) for vi in (0, 1)])
           for name, (unit, medians, c) in rows.items()]
    w = WorkloadResult(0, "prog", ["prog"], {}, {}, out, {0: 12, 1: 12}, {0: [], 1: []},
                       {vi: Verification(0, vi, "verified") for vi in (0, 1)})
    return Analysis(SimpleNamespace(variants=records, config=ExperimentConfig()), 0, [r.label for r in records],
                    [w], 0.05, 0.02)


def test_a_pick_whose_end_reading_is_lazyfree_says_so_with_the_comparison_without_it():
    ans = answer(analysis(166.0), [])
    assert [p.label for p in ans.picks] == ["mimalloc PAGE_RESET=1"], ans.picks
    note = ans.lazyfree[0]
    assert note.label == "mimalloc PAGE_RESET=1" and note.mib == 166.0 and note.without.verdict == "better"
    lines = [t for _, t in answer_lines(ans)]
    lazy = [t for t in lines if t.startswith("  LazyFree: ")]
    assert len(lazy) == 1 and "166.0 MiB LazyFree of 168.0 MiB" in lazy[0] and "-99.0%" in lazy[0], lines
    assert pick_view(ans.picks[0], ans)["lazyfree"] == [lazy[0].removeprefix("  LazyFree: ")]
    assert ans.to_dict()["lazyfree"][0]["without"]["metric"] == "end_anon_nolazy_mb"


def test_a_few_pages_of_lazyfree_are_not_a_line():
    ans = answer(analysis(1.0), [])
    assert ans.picks and not ans.lazyfree
    assert not any("LazyFree" in t for _, t in answer_lines(ans))
