"""The answer's words match the evidence (issue 34).

"No difference beyond [..]" (a bound) is said only where the futility rule closed a comparison; one
the budget or --max-runs cut short reads as undecided "stopped by the budget", with the runs a
verdict would need. The profile's bound is stated per metric kind (a time falls by at most the
allocator's share, a rate rises by at most 1/(1 - share) - 1), as what the profiled runs showed, and
never beside a decided effect larger than it. Pure logic on fake experiments, and the fake runner.
"""

from __future__ import annotations

import dataclasses

import math

import numpy as np
import pytest

from alloclab.measure.fake import FakeClock, FakeExecutor
from alloclab.plan.design import Design
from alloclab.report.bounds import bound_answers
from alloclab.tune.bound import gain_bound
from alloclab.report.common import answers
from alloclab.stats import decide
from alloclab.stats.analysis import analyze
from alloclab.stats.estimates import format_comparison
from tests.test_stopping_rule import SEESAW, SEESAW5, no_perf, run  # noqa: F401 (no_perf: autouse fixture)
from tests.test_sweep import fake_experiment


def stopped_experiment(centres, n, *, higher=True, spread=0.05, seed=5, stopped="budget", runs_done=None,
                       looks=(4, 30)):
    """A sequential experiment as the runner leaves it: complete, with why it stopped."""
    rng = np.random.default_rng(seed)
    drift = np.exp(rng.normal(0, 0.1, n))
    data = {(0, i): list(c * drift * np.exp(rng.normal(0, spread, n))) for i, c in enumerate(centres)}
    exp = fake_experiment([f"v{i}" for i in range(len(centres))], [("w", {})], data, higher=higher)
    exp.config = exp.config.with_(design=Design.sequential(*looks).to_config(), margin=0.02, until_decided=True,
                                  stopped=stopped, runs_done=runs_done or n)
    return exp


def primary(exp, vi=1, **kw):
    return analyze(exp, **kw).workloads[0].primary().cells[vi].comparison


# --- "bounded" only for a futility stop ------------------------------------------------------------

def test_a_budget_stop_says_stopped_by_the_budget_and_the_runs_a_verdict_needs():
    # The TOP_PAD comparison of threadcache read "bounded" at +8.2% [-1.5, +18.9]: an interval
    # wider than the futility rule ever closes, ended by the budget.
    exp = stopped_experiment([100.0, 103.0], n=8)
    c = primary(exp)
    assert c.verdict == "undecided" and not c.futile and c.stopped == "budget"
    text = format_comparison(c)
    assert "no difference beyond" not in text
    assert text.startswith(f"? {(c.ratio - 1) * 100:+.1f}% [{(c.ci_low - 1) * 100:+.1f}, ")
    assert ", stopped by the budget; a verdict would need ~" in text or ", stopped by the budget; equivalence" in text
    # The runs needed are the projection of the interval narrowing as 1/sqrt(n) until it excludes
    # no change or fits within the margin (decide.more_runs), not a figure of its own.
    assert c.more_runs == decide.more_runs(8, c.ratio, c.ci_low, c.ci_high, 0.02)
    assert f"would need ~{c.more_runs} more runs" in text
    # The answer's line says the same.
    [x] = answers(analyze(exp))
    assert x.verdict == "undecided" and "stopped by the budget" in x.text and "no difference beyond" not in x.text


def test_the_projection_is_the_runs_at_which_the_interval_would_decide():
    # +-10% at 10 runs around +1%: excluding 0 needs the half-width at 1%, 100x the runs (-10);
    # within +-2% needs it at about 1%: the nearer of the two.
    lo, hi = 1.01 * math.exp(-0.1), 1.01 * math.exp(0.1)
    need = decide.more_runs(10, 1.01, lo, hi, 0.02)
    est = math.log(1.01)
    target = max(est, math.log(1.02) - est)
    assert need == math.ceil(10 * (0.1 / target) ** 2) - 10


def test_max_runs_stop_says_stopped_at_max_runs():
    exp = stopped_experiment([100.0, 103.0], n=8, stopped="max-runs")
    c = primary(exp)
    assert c.stopped == "max-runs" and not c.futile
    assert ", stopped at --max-runs; " in format_comparison(c)


def test_a_futility_stop_reads_as_the_bound():
    exp = stopped_experiment([100.0, 103.0], n=8, stopped="bounded")
    c = primary(exp)
    assert c.futile and c.stopped is None
    text = format_comparison(c)
    assert ", no difference beyond [" in text and "stopped by" not in text and f"~{c.more_runs} more runs" in text


def test_a_variant_closed_at_an_earlier_look_is_a_bound_though_the_budget_ended_the_experiment():
    # v1 ran 7 blocks (a look) and stopped there, undecided within +-10%: the futility rule closed
    # it; the experiment went on to 12 blocks for v2, and the budget ended that.
    exp = stopped_experiment([100.0, 100.5, 101.5], n=12, stopped="budget", looks=(4, 40), spread=0.015, seed=0)
    assert 7 in Design.sequential(4, 40).looks
    exp.runs = [r for r in exp.runs if not (r.variant_idx == 1 and r.block >= 7)]
    a = analyze(exp)
    c1, c2 = (a.workloads[0].primary().cells[vi].comparison for vi in (1, 2))
    assert c1.verdict == "undecided" and c1.futile and c1.stopped is None
    assert ", no difference beyond [" in format_comparison(c1)
    assert c2.verdict == "undecided" and not c2.futile and c2.stopped == "budget"
    assert ", stopped by the budget; " in format_comparison(c2)
    # An interval the rule would not call a bound (wider than +-10%) is never inferred to be one.
    exp = stopped_experiment([100.0, 100.5, 101.5], n=12, stopped="budget", looks=(4, 40), spread=0.015, seed=1)
    exp.runs = [r for r in exp.runs if not (r.variant_idx == 1 and r.block >= 7)]
    c1 = primary(exp)
    assert c1.verdict == "undecided" and not decide.narrow(c1.ci_low, c1.ci_high, 0.02)
    assert not c1.futile and "no difference beyond" not in format_comparison(c1)


def test_what_the_runner_did_not_judge_is_never_inferred_to_be_a_bound():
    exp = stopped_experiment([100.0, 100.5, 99.7], n=12, stopped="bounded", looks=(4, 40), spread=0.01, seed=3)
    assert all(c.comparison.futile for c in analyze(exp).workloads[0].primary().cells[1:])
    # Another baseline, or another margin, asks a question the runner's looks did not ask; and the
    # runner judges no secondary metric.
    for kw in ({"baseline": "v2"}, {"min_effect": 0.03}):
        a = analyze(exp, **kw)
        for cell in a.workloads[0].primary().cells:
            c = cell.comparison
            if c is not None:
                assert c.verdict == "undecided" and not c.futile and c.stopped is None
                text = format_comparison(c)
                assert text.endswith(f"~{c.more_runs} more run" + ("s" if c.more_runs != 1 else ""))
                assert "beyond" not in text and "stopped" not in text


def test_an_experiment_still_running_or_interrupted_is_plainly_undecided():
    for status in ("running", "interrupted"):
        exp = stopped_experiment([100.0, 103.0], n=8)
        exp.row.status = status
        c = primary(exp)
        assert c.verdict == "undecided" and not c.futile and c.stopped is None
        assert format_comparison(c) == f"? {(c.ratio - 1) * 100:+.1f}% [{(c.ci_low - 1) * 100:+.1f}, " \
                                       f"{(c.ci_high - 1) * 100:+.1f}] ~{c.more_runs} more runs"


def test_the_fake_runner_bounded_by_futility_and_cut_short_by_the_budget(tmp_path):
    # 5% either way, no difference: closed as futile once its interval is within +-10%.
    (tmp_path / "futile").mkdir()
    (tmp_path / "budget").mkdir()
    e, error = run(tmp_path / "futile", FakeExecutor(SEESAW5), max_runs=60)
    assert error is None and e.config.stopped == "bounded"
    [x] = answers(analyze(e))
    assert x.verdict == "undecided" and ", no difference beyond [" in x.text and "stopped by" not in x.text
    # 10% either way, a 1.5 s budget: stopped by it long before the rule could close anything.
    clock = FakeClock()
    e, error = run(tmp_path / "budget", FakeExecutor(SEESAW, clock=clock), clock=clock, max_seconds=1.5, max_runs=40)
    assert error is None and e.config.stopped == "budget"
    [x] = answers(analyze(e))
    assert x.verdict == "undecided" and "no difference beyond" not in x.text
    assert ", stopped by the budget; " in x.text and f"would need ~{x.more_runs} more runs" in x.text


# --- the profile's bound, per metric kind ------------------------------------------------------------

def test_the_bound_of_a_time_is_the_share_and_of_a_rate_one_over_one_minus_it():
    assert gain_bound(0.61, higher_is_better=False) == pytest.approx(-0.61)
    assert gain_bound(0.61, higher_is_better=True) == pytest.approx(1 / 0.39 - 1)   # +156%
    assert round(gain_bound(0.61, True) * 100) == 156
    assert gain_bound(0.1, True) == pytest.approx(0.1111, abs=1e-4)
    assert gain_bound(1.0, True) == math.inf


def profiled(exp, shares: dict[int, float], kernel_visible: bool = True):
    exp.profiles = {(0, vi): {"runs": [{"status": "ok", "samples": 400, "shares": {"allocator": s}}],
                              "kernel_visible": kernel_visible} for vi, s in shares.items()}
    return exp


def most(share: float) -> float:
    """The share the bound reads, of 400 samples: its upper limit at 95% (tune/bound.py's estimate)."""
    from alloclab.stats.estimates import proportion_upper
    return proportion_upper(round(share * 400), 400)


def test_a_rate_is_bounded_at_one_over_one_minus_the_share_in_the_profiled_runs():
    exp = profiled(stopped_experiment([100.0, 103.0], n=8, higher=True), {0: 0.61, 1: 0.40})
    [line] = bound_answers(analyze(exp))
    assert (f"took at most {most(0.61) * 100:.1f}% of the CPU in the profiled runs (v0 {most(0.61) * 100:.1f}%, "
            f"v1 {most(0.40) * 100:.1f}%)") in line
    assert f"in those runs no allocator could raise tput by much more than +{gain_bound(most(0.61), True) * 100:.0f}%" in line
    assert "no allocator can change it" not in line and "cut tput" not in line


def test_a_time_is_bounded_at_the_share_in_the_profiled_runs():
    exp = profiled(stopped_experiment([100.0, 103.0], n=8, higher=False), {0: 0.61, 1: 0.40})
    [line] = bound_answers(analyze(exp))
    assert f"in those runs no allocator could cut tput by much more than {most(0.61) * 100:.1f}%" in line
    assert "raise tput" not in line


def test_the_bound_is_never_printed_beside_a_larger_decided_effect():
    # mimalloc-bench's larson: a 61.1% share beside tcmalloc decided +76.9% [+38.3, +126.1] on the
    # rate. As a rate's bound (+157%) it holds, and is said ...
    exp = stopped_experiment([100.0, 176.9, 101.0], n=12, higher=True, spread=0.03, seed=1, looks=(4, 40))
    a = analyze(profiled(exp, {0: 0.611, 1: 0.30, 2: 0.35}))
    cells = a.workloads[0].primary().cells
    assert cells[1].comparison.verdict == "better" and cells[2].comparison.verdict == "undecided"
    [line] = bound_answers(a)
    assert f"no allocator could raise tput by much more than +{gain_bound(most(0.611), True) * 100:.0f}%" in line
    assert "did not capture" not in line
    # ... but a 20% share would bound a rate at +25%, less than the decided +77%: no bound is
    # stated for it, and the line says the profiled runs did not capture what changes it.
    a = analyze(profiled(exp, {0: 0.20, 1: 0.15, 2: 0.18}))
    [line] = bound_answers(a)
    assert "much more than" not in line and "+25" not in line
    assert "did not capture what changes tput: v1 is decided +" in line and "bound nothing there" in line
    # The same for a time: a 20% share bounds a cut at 20%, less than a decided -43%.
    exp = stopped_experiment([100.0, 56.5, 101.0], n=12, higher=False, spread=0.03, seed=1, looks=(4, 40))
    a = analyze(profiled(exp, {0: 0.20, 1: 0.15, 2: 0.18}))
    assert a.workloads[0].primary().cells[1].comparison.verdict == "better"
    [line] = bound_answers(a)
    assert "much more than" not in line and "did not capture what changes tput: v1 is decided -" in line


def test_a_size_gets_no_cpu_bound():
    # The CPU's share says nothing of memory: an undecided size (KB after free) gets no line.
    exp = stopped_experiment([100.0, 103.0], n=8, higher=False)
    exp.metric_defs = [dataclasses.replace(d, unit="KB") if d.primary else d for d in exp.metric_defs]
    assert bound_answers(analyze(profiled(exp, {0: 0.61, 1: 0.40}))) == []


@pytest.mark.parametrize("higher", [True, False])
def test_a_share_of_90_percent_or_more_states_no_bound(higher):
    # make demo's simple: "no allocator could cut ns_per_pair by much more than 96.6%" bounds nothing
    # a reader can use (a cut of 90% is x10, as a rate's 1/(1 - 0.9) - 1 is +900%).
    exp = profiled(stopped_experiment([100.0, 103.0], n=8, higher=higher), {0: 0.95, 1: 0.93})
    assert bound_answers(analyze(exp)) == []
    exp = profiled(stopped_experiment([100.0, 103.0], n=8, higher=higher), {0: 0.80, 1: 0.70})
    [line] = bound_answers(analyze(exp))
    assert "much more than" in line
