"""Everything a report or a command shows of one experiment, computed once, here.

In: a stored Experiment and the question asked of it (the baseline, the equivalence margin, the
memory budget of the recommendation; the sweep tables, the summary across workloads and a fleet's
hosts where the view shows them). Out: Results, which report/ renders and cli/ prints and gates
on: neither calls a statistic itself (tests/test_layout.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from alloclab.stats.dominance import carried_geomeans
from alloclab.stats.analysis import Analysis, MetricRow, VariantSummary, analyze, summarize_variants, winners
from alloclab.stats.recommend import Recommendation, recommend
from alloclab.stats.sweep import AblationResult, SweepCurve, ablations, sweep_results
from alloclab.stats.tune_answer import TuneAnswer, answer
from alloclab.store.db import Experiment


@dataclass
class Results:
    analysis: Analysis
    recommendation: Recommendation             # made with the question's memory budget
    # Only where asked for (None otherwise): each costs comparisons or bootstraps a view without
    # them does not need.
    sweeps: list[SweepCurve] | None = None      # the curves of the experiment's stored sweeps
    ablations: list[tuple[dict, AblationResult]] | None = None   # (its stored structure, its result)
    summary: list[VariantSummary] | None = None  # per variant across workloads (geomean speed, memory)
    winners: list[tuple[str, str | None, MetricRow | None]] | None = None   # per workload
    carried: dict[str, str] | None = None   # label -> where one workload carries its geomean (stats/dominance.py)
    hosts: dict[str, Analysis] | None = None    # a fleet experiment's hosts with runs, each alone
    tune: TuneAnswer | None = None               # a tune race's answer, with the question's memory budget
    # Where stats/results_cache.py keeps these Results (None: not kept); an exporter may keep
    # what it derives from them under the same key (report/html.py: the charts).
    key: str | None = None

    @property
    def experiment(self) -> Experiment:
        return self.analysis.experiment

    @property
    def max_rss_increase(self) -> float | None:
        """The recommendation's memory budget, a fraction (0.10 = +10%); None: no limit."""
        return self.recommendation.budget


def build_results(exp: Experiment, *, baseline: str | int | None = None, min_effect: float | None = None,
                  max_rss_increase: float | None = None, sweeps: bool = False, summary: bool = False,
                  hosts: dict[str, Experiment] | None = None) -> Results:
    """The one way to Results. `sweeps`: the sweep and ablation tables; `summary`: suite's summary
    across workloads; `hosts`: a fleet experiment's runs split per host (fleet/report.per_host)."""
    a = analyze(exp, baseline=baseline, min_effect=min_effect)
    out = Results(a, recommend(a, max_rss_increase))
    if exp.row.kind == "tune" and exp.config.tune is not None:
        out.tune = answer(a, exp.config.tune_candidates(), max_rss_increase, exp.config.tune)
    if sweeps:
        stored = exp.config.stored_sweeps()
        out.sweeps = sweep_results(a, stored)
        out.ablations = [(s, r) for s in stored if "ablation" in s for r in ablations(a, [s])]
    if summary:
        out.summary, out.winners, out.carried = summarize_variants(a), winners(a), carried_geomeans(a)
    if hosts is not None:
        # Each host against the first variant, at the experiment's margin: the per-host tables
        # do not take the question's baseline.
        out.hosts = {host: analyze(one, min_effect=a.min_effect) for host, one in hosts.items() if one.runs}
    return out
