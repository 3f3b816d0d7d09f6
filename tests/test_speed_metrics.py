"""Several primary metrics in one command (the Ceph client's IOPS and CPU per I/O): the experiment
file takes them, and speed is judged on each (stats/best.py's axis, the race's better-on-both).

The Analysis is built from the seed's figures (tcmalloc: CPU per I/O -7.5%, IOPS +4% still open);
the recipe's real run is tests/test_ceph_e2e.py's."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from alloclab.stats import best
from alloclab.stats.analysis import Analysis, Cell, MetricRow, WorkloadResult
from alloclab.stats.estimates import CellSummary, Comparison
from alloclab.store.config_model import ExperimentConfig
from alloclab.store.model import VariantRecord, Verification
from alloclab.tune.race import may_be_better_on_both
from alloclab.workloads import experiment_file as xf

RECIPE = Path(__file__).resolve().parents[1] / "src" / "alloclab" / "workloads" / "recipes" / "ceph-rbd-client.toml"


def cmp(pct: float, low: float, high: float, verdict: str, hib: bool) -> Comparison:
    return Comparison(1 + pct / 100, 1 + low / 100, 1 + high / 100, 0.001, 0.001, hib, verdict, 12, 12,
                      margin=0.02, method="paired")


def analysis(cpu_primary: bool, iops: Comparison) -> Analysis:
    records = [VariantRecord(0, "glibc", "glibc", None, env={}, settings=[]),
               VariantRecord(1, "tcmalloc", "tcmalloc", "tcmalloc", env={}, settings=[])]
    figures = {"iops": iops,
               "cpu_us_per_io": cmp(-7.5, -11.0, -4.0, "better", False),
               "peak_rss_mb": cmp(3.0, -6.0, 12.0, "undecided", False)}
    metrics = {"iops": ("IO/s", True, True), "cpu_us_per_io": ("us", False, cpu_primary),
               "peak_rss_mb": ("MiB", False, False)}
    summary = CellSummary(12, 1.0, 1.0, 0.01, 0.01, 0.99, 1.01, 0.99, 1.01)
    rows = [MetricRow(name, unit, hib, "regex" if name != "peak_rss_mb" else "run", primary,
                      [Cell(vi, [], [], summary, None if vi == 0 else figures[name]) for vi in (0, 1)])
            for name, (unit, hib, primary) in metrics.items()]
    w = WorkloadResult(0, "rbd bench", ["rbd", "bench"], {}, {}, rows, {0: 12, 1: 12}, {0: [], 1: []},
                       {vi: Verification(0, vi, "verified") for vi in (0, 1)})
    return Analysis(SimpleNamespace(variants=records, config=ExperimentConfig()), 0, ["glibc", "tcmalloc"], [w],
                    0.05, 0.02)


def test_the_ceph_recipe_judges_iops_and_cpu_per_io():
    loads = xf.load(RECIPE).loads
    assert loads, "the recipe has commands"
    for load in loads:
        assert {m.name for m in load.metrics if m.primary} == {"iops", "cpu_us_per_io"}, load.name


EVEN = cmp(0.5, -1.0, 1.5, "equivalent", True)
OPEN = cmp(4.0, -1.0, 9.0, "undecided", True)


def test_speed_is_judged_on_every_primary_metric():
    a = analysis(True, EVEN)
    assert best.speed_metrics(a.workloads[0]) == ["iops", "cpu_us_per_io"]
    assert best.axis(best.speed_comparisons(a, 1), a.min_effect) == "better"
    # Peak RSS still open: tcmalloc may be better on both, so the race keeps it.
    assert may_be_better_on_both(a, a.workloads[0]) == {1}


def test_one_speed_metric_open_leaves_speed_open():
    a = analysis(True, OPEN)
    assert best.axis(best.speed_comparisons(a, 1), a.min_effect) == "open"
    assert may_be_better_on_both(a, a.workloads[0]) == {1}


def test_a_metric_not_marked_primary_is_not_judged():
    a = analysis(False, EVEN)
    assert best.speed_metrics(a.workloads[0]) == ["iops"]
    assert best.axis(best.speed_comparisons(a, 1), a.min_effect) == "even"
    assert may_be_better_on_both(a, a.workloads[0]) == set()
