"""One engine (stats.decide.judge): the answer, the sweep and the ablation of one experiment give
the same verdicts; a verdict inside a sequential experiment is judged at the alpha its looks left;
a comparison that more runs cannot decide is futile and closed (issue 25; issue 22 item 4)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from alloclab.plan.design import Design
from alloclab.stats import decide
from alloclab.stats import estimates
from alloclab.stats import sweep as sweep_stats
from alloclab.stats.analysis import analyze
from alloclab.stats.looks import Judge
from tests.test_sweep import fake_experiment

LABELS = ["glibc", "glibc A=1", "glibc B=1", "glibc A=1,B=1"]
ABLATION = {"ablation": {"baseline": "glibc", "combined": "glibc A=1,B=1",
                         "settings": [{"setting": "A=1", "variant": "glibc A=1"},
                                      {"setting": "B=1", "variant": "glibc B=1"}]}}
SWEEP = {"tunable": "A", "points": [{"variant": lab, "value": i} for i, lab in enumerate(LABELS)]}


def experiment(centres, n=16, spread=0.03, design: Design | None = None, seed=0):
    rng = np.random.default_rng(seed)
    drift = np.exp(rng.normal(0, 0.1, n))           # shared by the variants of a block
    data = {(0, i): list(c * drift * np.exp(rng.normal(0, spread, n))) for i, c in enumerate(centres)}
    exp = fake_experiment(LABELS, [("w", {})], data)
    if design is not None:
        exp.config = exp.config.with_(design=design.to_config(), margin=0.02)
    return exp


def test_ablation_sweep_and_answer_agree_on_one_experiment():
    exp = experiment([100.0, 104.0, 100.5, 104.5], design=Design.sequential(4, 16))
    a = analyze(exp)
    answer = {a.labels[c.variant_idx]: c.comparison for c in a.workloads[0].primary().cells if c.comparison}
    [abl] = sweep_stats.ablation_result(a, ABLATION)
    for e in abl.singles + [abl.combined]:
        assert e.comparison == answer[e.label]
    [curve] = sweep_stats.sweep_results(a, [SWEEP])
    # The sweep judges against its best point, paired and at the same level as the answer.
    for p in curve.points:
        if p is not curve.best:
            assert p.vs_best.method == "paired"
            assert p.vs_best.confidence == pytest.approx(1 - a.design.alpha_at(16) / 3)
    assert {c.verdict for c in answer.values()} >= {"better"}


def test_an_ablation_inside_a_sequential_experiment_is_judged_at_the_alpha_left():
    d = Design.sequential(4, 40)                     # stopped by the budget at 16 blocks, between looks
    exp = experiment([100.0, 104.0, 100.5, 104.5], design=d)
    a = analyze(exp, baseline="glibc B=1")           # the ablation's baseline is not the answer's
    [abl] = sweep_stats.ablation_result(a, ABLATION)
    left = d.alpha - d.spent(15)
    assert left < 0.05
    for e in abl.singles + [abl.combined]:
        assert e.comparison.method == "paired"
        assert e.comparison.confidence == pytest.approx(1 - left / 3)


def test_futile_comparison_is_closed_and_reported_as_a_bound():
    # A real difference of ~0.5% in 5% noise: 16 blocks give +-4%, +-2% would need hundreds.
    d = Design.sequential(4, 30)
    exp = experiment([100.0, 100.5, 100.0, 100.0], n=16, spread=0.05, design=d, seed=3)
    exp.runs = [r for r in exp.runs if r.variant_idx in (0, 1)]
    exp.variants = exp.variants[:2]
    a = analyze(exp)
    c = a.workloads[0].primary().cells[1].comparison
    assert c.verdict == "undecided" and c.futile and c.more_runs > 2 * (30 - 16)
    text = estimates.format_comparison(c)
    assert text.startswith("? ") and ", no difference beyond [" in text and "equivalence within ±2% would need ~" in text
    # The runner's Judge counts it as closed, so the experiment can stop.
    assert Judge().open_comparisons(exp, {0}, 0.02, reachable=30) == {0: set()}
    # With hundreds of blocks still reachable it stays open.
    assert Judge().open_comparisons(exp, {0}, 0.02, reachable=100000) == {0: {1}}


def test_futility_projection_uses_the_final_level():
    # Interval +-10% (log) at n=10 (df 5) around 0: +-2% needs ~25x the runs, less the smaller t
    # quantile of many blocks (4.0 -> 2.6): ~110 more.
    lo, hi = math.exp(-0.1), math.exp(0.1)
    need = decide.futile(10, 1.0, lo, hi, 0.02, confidence=0.99, final_confidence=0.99, df=5, reachable=40)
    assert need is not None and 100 < need < 130
    assert decide.futile(10, 1.0, lo, hi, 0.02, confidence=0.99, final_confidence=0.99, df=5, reachable=5000) is None


def test_what_a_stopped_sequential_run_left_undecided_reads_as_what_stopped_it():
    # Not decidable at its look, and more runs were possible: while running it is open ...
    d = Design.sequential(4, 30)
    exp = experiment([100.0, 103.0], n=8, spread=0.05, design=d, seed=5)
    exp.row.status = "running"
    c = analyze(exp).workloads[0].primary().cells[1].comparison
    assert c.verdict == "undecided" and not c.futile and c.stopped is None
    assert ", no difference beyond" not in estimates.format_comparison(c)
    # ... once the budget stopped the run no run will come, but the futility rule did not close it:
    # said as stopped by the budget (not as a bound), with the runs a verdict would need (issue 34).
    exp.row.status = "complete"
    exp.config = exp.config.with_(until_decided=True, stopped="budget", runs_done=8)
    c = analyze(exp).workloads[0].primary().cells[1].comparison
    assert c.verdict == "undecided" and not c.futile and c.stopped == "budget" and c.more_runs
    text = estimates.format_comparison(c)
    assert text.startswith(f"? {(c.ratio - 1) * 100:+.1f}% [") and ", stopped by the budget; " in text
    assert f"would need ~{c.more_runs} more runs" in text and "no difference beyond" not in text
    # Where the futility rule ended it, it reads as the bound its interval is.
    exp.config.stopped = "bounded"
    c = analyze(exp).workloads[0].primary().cells[1].comparison
    assert c.verdict == "undecided" and c.futile and c.more_runs
    text = estimates.format_comparison(c)
    assert text.startswith(f"? {(c.ratio - 1) * 100:+.1f}%, no difference beyond [") and "would need ~" in text
