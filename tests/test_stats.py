"""Tests for alloclab.stats: known answers, error rates by simulation, properties."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from alloclab.stats import estimates as S
from alloclab.stats import findings as F
from alloclab.stats import ranktests as R

_IV = r"\[([+-]\d+\.\d|[+-]?inf|nan), ([+-]\d+\.\d|[+-]?inf|nan)\]|\[n/a\]"
FORMAT_RE = re.compile(
    rf"^(\? \(n/a\)|x[0-9.e+-]+ \[x[0-9.e+-]+, x[0-9.e+-]+\]|[+-]\d+\.\d% ({_IV})|≈ within ±[0-9.e+-]+% ({_IV})|\? [+-]\d+\.\d% ({_IV})( ~\d+ more runs?)?"
    rf"|\? [+-]\d+\.\d% on \d+ runs? (each|against \d+), too few or too noisy for an interval \(wider than x10\)"
    rf"(, stopped [^;]+)?(; [a-z ±%0-9.]+ would need ~\d+ more runs?"
    rf"|; \d+ runs? (each|against \d+) cannot tell how many a verdict needs)?)$"
)

any_floats = st.floats(allow_nan=True, allow_infinity=True)
finite_floats = st.floats(allow_nan=False, allow_infinity=False)
# Positive, measurement-like values (times, bytes), with duplicates likely.
measurements = st.lists(
    st.one_of(st.floats(1e-3, 1e6), st.sampled_from([1.0, 2.0, 100.0])), max_size=25
)


def codes(findings):
    return {f.code for f in findings}


# --------------------------------------------------------------------------
# summarize
# --------------------------------------------------------------------------

def test_summarize_known_values():
    from scipy import stats as sp   # here: importing it costs every collection a second
    s = S.summarize(np.arange(20.0), n_failed=2)
    assert (s.n, s.median, s.mean, s.min, s.max, s.n_failed) == (20, 9.5, 9.5, 0.0, 19.0, 2)
    assert s.std == pytest.approx(np.std(np.arange(20.0), ddof=1))
    assert s.cv == pytest.approx(s.std / 9.5)
    # Binomial(20, 1/2): P(B <= 5) = 0.0207 <= 0.025 < P(B <= 6), so the 95%
    # interval is [x_(6), x_(15)] in 1-based order statistics.
    assert (s.ci_low, s.ci_high) == (5.0, 14.0)
    assert 1 - 2 * sp.binom.cdf(5, 20, 0.5) >= 0.95 > 1 - 2 * sp.binom.cdf(6, 20, 0.5)


def test_summarize_edge_cases():
    empty = S.summarize([], n_failed=3)
    assert empty.n == 0 and empty.n_failed == 3
    assert all(math.isnan(getattr(empty, f)) for f in ("median", "mean", "std", "cv", "ci_low", "ci_high"))

    one = S.summarize([5.0])
    assert (one.n, one.median, one.min, one.max) == (1, 5.0, 5.0, 5.0)
    assert math.isnan(one.std) and math.isnan(one.ci_low)

    two = S.summarize([1.0, 3.0])
    assert two.median == 2.0 and math.isnan(two.ci_low)  # [min, max] covers only 50%

    ties = S.summarize([7.0] * 10)
    assert (ties.median, ties.std, ties.cv, ties.ci_low, ties.ci_high) == (7.0, 0.0, 0.0, 7.0, 7.0)


def test_summarize_drops_non_finite_values():
    s = S.summarize([1.0, float("nan"), 2.0, float("inf"), 3.0, -float("inf")])
    assert (s.n, s.median, s.min, s.max) == (3, 2.0, 1.0, 3.0)


def test_summarize_ci_needs_six_values_at_95_percent():
    assert math.isnan(S.summarize(np.arange(5.0)).ci_low)
    s6 = S.summarize(np.arange(6.0))
    assert (s6.ci_low, s6.ci_high) == (0.0, 5.0)  # 1 - 2/64 = 96.9% >= 95%


@settings(max_examples=300, deadline=None)
@given(st.lists(any_floats, max_size=40))
def test_summarize_never_raises(values):
    s = S.summarize(values)
    assert s.n == sum(math.isfinite(v) for v in values)


@settings(max_examples=300, deadline=None)
@given(st.lists(finite_floats, max_size=40))
def test_summarize_ci_brackets_median(values):
    s = S.summarize(values)
    if s.n:
        assert s.min <= s.median <= s.max
    if not math.isnan(s.ci_low):
        assert s.min <= s.ci_low <= s.median <= s.ci_high <= s.max


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(finite_floats, st.sampled_from([1.0, 2.0, 1e308])), min_size=1, max_size=60),
       st.integers(0, 2**32))
def test_bootstrap_medians_are_numpys_medians_of_the_same_resamples(values, seed):
    # The counting shortcut must give np.median's values (a signed zero aside): the intervals in every
    # stored report (and the golden files) come from them.
    x = np.sort(np.asarray(values, dtype=float))
    idx = np.random.default_rng(seed).integers(0, x.size, size=(50, x.size))
    with np.errstate(all="ignore"):
        expected = np.median(x[idx], axis=1)
    got = S._bootstrap_medians(x, 50, np.random.default_rng(seed))
    assert np.array_equal(got, expected, equal_nan=True)


def test_median_ci_coverage_by_simulation():
    rng = np.random.default_rng(20240601)
    true_median = 1.0  # lognormal(mu=0, sigma) has median exp(0)
    samples = rng.lognormal(mean=0.0, sigma=0.5, size=(400, 15))
    covered = 0
    for sample in samples:
        s = S.summarize(sample)
        covered += s.ci_low <= true_median <= s.ci_high
    assert covered / len(samples) >= 0.90


# --------------------------------------------------------------------------
# compare
# --------------------------------------------------------------------------

@pytest.mark.parametrize("higher_is_better", [True, False])
def test_compare_detects_ten_percent_shift_with_correct_direction(higher_is_better):
    rng = np.random.default_rng(7)
    baseline = rng.normal(100.0, 5.0, 20)
    faster = rng.normal(110.0, 5.0, 20)
    c = S.compare(baseline, faster, higher_is_better)
    assert c.ratio == pytest.approx(np.median(faster) / np.median(baseline))
    assert c.ratio > 1 and c.ci_low > 1 and c.ci_low <= c.ratio <= c.ci_high
    assert c.p_value < 0.001 and c.p_adjusted == c.p_value
    assert c.verdict == ("better" if higher_is_better else "worse")
    assert (c.n_baseline, c.n_candidate) == (20, 20)

    reverse = S.compare(faster, baseline, higher_is_better)
    assert reverse.ratio < 1
    assert reverse.verdict == ("worse" if higher_is_better else "better")


def test_compare_identical_distributions_are_same():
    rng = np.random.default_rng(11)
    c = S.compare(rng.normal(100, 5, 20), rng.normal(100, 5, 20), higher_is_better=False)
    assert c.verdict == "undecided"   # no margin given: nothing can be shown equivalent
    assert S.compare(rng.normal(100, 1, 20), rng.normal(100, 1, 20), False, min_effect=0.05).verdict == "equivalent"


def test_compare_identical_data_has_p_one():
    data = [3.0, 1.0, 2.0, 5.0, 4.0]
    c = S.compare(data, list(reversed(data)), higher_is_better=True)
    assert c.p_value == 1.0 and c.ratio == 1.0 and c.verdict == "undecided"
    assert S.format_comparison(c).startswith("? +0.0% on 5 runs each")   # [x0.25, x3]: wider than x10


def test_compare_min_effect_suppresses_small_but_significant_changes():
    rng = np.random.default_rng(3)
    baseline = rng.normal(100, 0.5, 20)
    candidate = rng.normal(102, 0.5, 20)
    assert S.compare(baseline, candidate, True).verdict == "better"
    assert S.compare(baseline, candidate, True, min_effect=0.05).verdict == "equivalent"


def test_compare_uses_exact_p_for_small_tied_samples():
    # Complete separation of 4 vs 4 has exact p = 2/70 whatever the ties.
    c = S.compare([1, 1, 2, 2], [3, 3, 4, 4], higher_is_better=True)
    assert c.p_value == pytest.approx(2 / 70)


@pytest.mark.parametrize(
    "baseline, candidate",
    [([], []), ([], [1.0]), ([1.0], []), ([1.0], [2.0]), ([1.0, 2.0], [3.0, 4.0]),
     ([0.0, 0.0, 0.0], [1.0, 2.0, 3.0]), ([0.0] * 5, [0.0] * 5),
     ([float("nan")] * 3, [1.0, 2.0, 3.0]), ([5.0] * 8, [5.0] * 8)],
)
def test_compare_edge_cases_never_raise_and_say_undecided(baseline, candidate):
    c = S.compare(baseline, candidate, higher_is_better=True)
    assert c.verdict == "undecided"
    assert FORMAT_RE.match(S.format_comparison(c))


def test_compare_zero_baseline_median_is_undefined():
    c = S.compare([0.0, 0.0, 0.0, 0.0], [1.0, 2.0, 3.0, 4.0], higher_is_better=True)
    assert math.isnan(c.ratio) and c.verdict == "undecided"
    assert S.format_comparison(c) == "? (n/a)"


def test_compare_is_deterministic_and_order_independent():
    rng = np.random.default_rng(5)
    b, c = rng.lognormal(0, 0.2, 12), rng.lognormal(0.05, 0.2, 12)
    first, second = S.compare(b, c, True), S.compare(b, c, True)
    assert first == second
    shuffled = S.compare(rng.permutation(b), rng.permutation(c), True)
    assert (shuffled.ci_low, shuffled.ci_high) == (first.ci_low, first.ci_high)
    # Different data must not reuse the same interval by accident.
    other = S.compare(b, c * 1.001 + 0.01, True)
    assert (other.ci_low, other.ci_high) != (first.ci_low, first.ci_high)


def test_a_a_false_positive_rate_and_power():
    rng = np.random.default_rng(42)
    same = sum(
        S.compare(rng.normal(100, 5, 10), rng.normal(100, 5, 10), True, n_boot=1000).verdict not in ("better", "worse")
        for _ in range(500)
    )
    assert same / 500 >= 0.93

    # 5% slower (lower is better) with 2% CV, n = 10 per group.
    detected = sum(
        S.compare(rng.normal(100, 2, 10), rng.normal(105, 2.1, 10), False, n_boot=1000).verdict == "worse"
        for _ in range(200)
    )
    assert detected / 200 >= 0.90


# --------------------------------------------------------------------------
# holm / adjust
# --------------------------------------------------------------------------

def test_holm_known_values():
    assert R.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert R.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert R.holm([]) == []


def test_holm_nan_passes_through_and_does_not_count():
    out = R.holm([0.01, float("nan"), 0.02])
    assert math.isnan(out[1])
    assert out[0] == pytest.approx(0.02) and out[2] == pytest.approx(0.02)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.floats(0, 1), st.just(float("nan"))), max_size=30))
def test_holm_properties(pvalues):
    adjusted = R.holm(pvalues)
    assert len(adjusted) == len(pvalues)
    pairs = sorted((p, a) for p, a in zip(pvalues, adjusted) if not math.isnan(p))
    assert all(math.isnan(a) for p, a in zip(pvalues, adjusted) if math.isnan(p))
    for p, a in pairs:
        assert p <= a <= 1.0
    adj_in_p_order = [a for _, a in pairs]
    assert adj_in_p_order == sorted(adj_in_p_order)


def test_the_unpaired_engine_is_bonferroni_over_its_family():
    """Two experiments or two hosts: decide.judge without blocks compares unpaired, at alpha/m."""
    from alloclab.stats import decide
    rng = np.random.default_rng(9)
    base, cand = rng.normal(100, 2, 5), rng.normal(106, 2, 5)
    one = decide.judge(base, cand, True, margin=0.0, design=decide.Design.fixed(1), blocks=1)
    assert one.method == "unpaired" and one.verdict == "better" and one.p_value < 0.05
    ten = decide.judge(base, cand, True, margin=0.0, design=decide.Design.fixed(1), blocks=1, family=10)
    assert ten.p_adjusted == pytest.approx(min(1.0, 10 * one.p_value))
    assert ten.verdict == "undecided"     # one of ten at n=5 can't reach 0.005
    assert ten.confidence == pytest.approx(0.995) and ten.ci_high - ten.ci_low >= one.ci_high - one.ci_low


def _comparison(**kw):
    base = dict(ratio=1.04, ci_low=1.021, ci_high=1.059, p_value=0.003, p_adjusted=0.003,
                higher_is_better=True, verdict="better", n_baseline=10, n_candidate=10)
    base.update(kw)
    return S.Comparison(**base)


def test_format_comparison_examples():
    assert S.format_comparison(_comparison()) == "+4.0% [+2.1, +5.9]"
    # Sign is the raw change; a lower-is-better metric going down is "better" but negative.
    down = _comparison(ratio=0.9, ci_low=0.85, ci_high=0.95, higher_is_better=False)
    assert S.format_comparison(down) == "-10.0% [-15.0, -5.0]"
    assert S.format_comparison(_comparison(ratio=216.1, ci_low=111.3, ci_high=419.5)) == "x216 [x111, x420]"
    # The interval is always printed: "no difference beyond 2%" never reads like "anything".
    assert S.format_comparison(_comparison(verdict="equivalent", ratio=1.002, ci_low=0.992, ci_high=1.011,
                                           margin=0.02)) == "≈ within ±2% [-0.8, +1.1]"
    assert S.format_comparison(_comparison(verdict="undecided", ratio=1.031, ci_low=0.92, ci_high=1.152,
                                           more_runs=40)) == "? +3.1% [-8.0, +15.2] ~40 more runs"
    assert S.format_comparison(_comparison(verdict="undecided", ratio=math.nan)) == "? (n/a)"


@settings(max_examples=150, deadline=None)
@given(measurements, measurements, st.booleans())
def test_format_comparison_matches_grammar_for_real_comparisons(baseline, candidate, hib):
    c = S.compare(baseline, candidate, hib, n_boot=200)
    assert FORMAT_RE.match(S.format_comparison(c)), S.format_comparison(c)


@settings(max_examples=300, deadline=None)
@given(any_floats, any_floats, any_floats, st.one_of(st.floats(0, 1), st.just(math.nan)),
       st.sampled_from(["better", "worse", "equivalent", "undecided"]))
def test_format_comparison_matches_grammar_for_any_fields(ratio, lo, hi, p, verdict):
    c = _comparison(ratio=ratio, ci_low=lo, ci_high=hi, p_value=p, p_adjusted=p, verdict=verdict)
    assert FORMAT_RE.match(S.format_comparison(c)), S.format_comparison(c)


# --------------------------------------------------------------------------
# min_runs_for_significance
# --------------------------------------------------------------------------

def test_min_runs_for_significance_known_values():
    assert R.min_runs_for_significance(0.05, 1) == 4  # 2/C(8,4) = 0.029; n=3: 2/20 = 0.1
    assert R.min_runs_for_significance(0.05, 10) == 6  # 2/C(12,6) = 0.0022 < 0.005 < 2/C(10,5)
    with pytest.raises(ValueError):
        R.min_runs_for_significance(0.0)


@pytest.mark.parametrize("alpha, k", [(0.05, 1), (0.05, 3), (0.01, 1), (0.1, 20)])
def test_min_runs_matches_scipy_exact_test(alpha, k):
    n = R.min_runs_for_significance(alpha, k)

    def best_p(m):
        from scipy import stats as sp   # here: importing it costs every collection a second
        return sp.mannwhitneyu(np.arange(m), np.arange(m) + m, method="exact").pvalue

    assert best_p(n) < alpha / k
    assert n == 1 or best_p(n - 1) >= alpha / k


# --------------------------------------------------------------------------
# geomean_ratio
# --------------------------------------------------------------------------

def test_geomean_ratio_orients_ratios_as_speedups():
    rng = np.random.default_rng(13)
    b1 = rng.normal(100, 1, 10)
    b2 = rng.normal(50, 0.5, 10)
    pairs = [
        (b1, b1 * 0.8, False),   # time down 20% -> speedup 1.25
        (b2, b2 * 1.25, True),   # throughput up 25% -> 1.25
    ]
    g = S.geomean_ratio(pairs)
    assert g.n == 2
    assert g.ratio == pytest.approx(1.25)
    assert g.ci_low <= g.ratio <= g.ci_high
    assert g.ci_low > 1.2 and g.ci_high < 1.3


def test_geomean_ratio_is_deterministic_and_skips_undefined_workloads():
    rng = np.random.default_rng(17)
    good = (rng.normal(10, 1, 8), rng.normal(9, 1, 8), False)
    pairs = [good, ([0.0] * 4, [1.0] * 4, False), ([], [1.0], True)]
    g1, g2 = S.geomean_ratio(pairs), S.geomean_ratio(pairs)
    assert g1 == g2 and g1.n == 1
    assert S.geomean_ratio([]).n == 0 and math.isnan(S.geomean_ratio([]).ratio)


# --------------------------------------------------------------------------
# cell_findings
# --------------------------------------------------------------------------

def test_quiet_cell_has_no_findings():
    rng = np.random.default_rng(21)
    values = rng.normal(100, 1, 12)
    assert F.cell_findings(values, durations_s=[0.5] * 12, load_avg=[0.3], n_cores=8) == []


def test_high_cv_finding():
    rng = np.random.default_rng(1)
    values = 100 + 20 * rng.standard_normal(30)  # CV ~ 20%
    found = [f for f in F.cell_findings(values) if f.code == "high-cv"]
    assert len(found) == 1 and "above 10%" in found[0].message
    assert "high-cv" not in codes(F.cell_findings(values, cv_threshold=0.5))


def test_outlier_finding_lists_the_value_and_keeps_it():
    values = [10.0, 10.1, 9.9, 10.05, 9.95, 10.0, 10.02, 55.0, 9.98, 10.01]
    found = [f for f in F.cell_findings(values) if f.code == "outliers"]
    assert len(found) == 1
    assert "1 outlier" in found[0].message and "55" in found[0].message
    assert S.summarize(values).max == 55.0  # never dropped


def test_outliers_with_zero_mad_use_mean_absolute_deviation():
    values = [10.0] * 8 + [50.0]
    z = R.modified_zscores(values)
    assert z[-1] > 3.5 and np.all(z[:-1] == 0)
    assert "outliers" in codes(F.cell_findings(values))


def test_all_equal_values_have_no_outliers_and_no_crash():
    assert F.cell_findings([3.0] * 12) == []
    assert np.all(R.modified_zscores([3.0] * 12) == 0)


def test_drift_finding_for_monotone_series():
    values = np.linspace(100, 110, 10)
    found = [f for f in F.cell_findings(values, blocks=list(range(10))) if f.code == "drift"]
    assert len(found) == 1 and "upward" in found[0].message
    # Too few blocks: no drift claim however clean the trend.
    assert "drift" not in codes(F.cell_findings(values[:5], blocks=list(range(5))))


def test_drift_uses_block_index_not_position():
    # Two runs per block; the trend is across blocks.
    values = np.repeat(np.arange(8.0), 2) + 100
    blocks = np.repeat(np.arange(8), 2).tolist()
    assert "drift" in codes(F.cell_findings(values, blocks=blocks))


def test_no_drift_for_stationary_noise():
    rng = np.random.default_rng(23)
    assert "drift" not in codes(F.cell_findings(rng.normal(100, 1, 20)))


def test_warmup_first_run_outlier():
    values = [130.0] + [100.0, 100.5, 99.5, 100.2, 99.8, 100.1, 99.9, 100.3, 99.7]
    found = [f for f in F.cell_findings(values) if f.code == "warmup-trend"]
    assert len(found) == 1 and "first run 130" in found[0].message
    assert "drift" not in codes(F.cell_findings(values))


def test_warmup_first_third_slower():
    rng = np.random.default_rng(29)
    values = np.concatenate([rng.normal(110, 1, 5), rng.normal(100, 1, 10)])
    assert "warmup-trend" in codes(F.cell_findings(values))


def test_steady_trend_is_drift_not_warmup():
    found = codes(F.cell_findings(np.linspace(100, 120, 15)))
    assert "drift" in found and "warmup-trend" not in found


def test_too_few_runs():
    # The paired interval is defined from two runs on (a count that never varies decides there);
    # a sequential experiment stopped at 4 runs because it was decided is not "too few".
    found = [f for f in F.cell_findings([1.0], alpha=0.05) if f.code == "too-few-runs"]
    assert len(found) == 1 and "2" in found[0].message
    assert "too-few-runs" not in codes(F.cell_findings([1.0, 1.1], alpha=0.05))
    assert "too-few-runs" not in codes(F.cell_findings([1.0, 1.1, 0.9, 1.05], n_comparisons=10))


def test_short_runs():
    values = [1.0] * 10
    assert "short-runs" in codes(F.cell_findings(values, durations_s=[0.001] * 10))
    assert "short-runs" not in codes(F.cell_findings(values, durations_s=[0.2] * 10))


def test_load_average_alone_never_warns():
    # The program's own threads raise the load average (qemu-img's io_uring workers reached 14 on
    # 2 cores): only CPU taken by other processes is evidence of competition.
    assert "high-load" not in codes(F.cell_findings([1.0] * 10, load_avg=[0.5, 5.0], n_cores=2))
    assert "high-load" not in codes(F.cell_findings([1.0] * 10, load_avg=5.0, n_cores=2))


def test_competing_cpu_is_judged_without_the_runs_own_threads():
    # A 32-thread workload drives the load average to 30 by itself; what counts is other work.
    assert "high-load" not in codes(F.cell_findings([1.0] * 10, load_avg=[30.0], n_cores=2, other_cpu=[0.05, 0.1]))
    (f,) = [f for f in F.cell_findings([1.0] * 10, load_avg=[0.1], n_cores=2, other_cpu=[0.1, 0.9, 0.3])
            if f.code == "high-load"]
    assert "up to 0.90 cores of 2" in f.message and "median 0.30" in f.message
    # Runs too short to measure it say nothing; nor does the load average without the measure.
    assert "high-load" not in codes(F.cell_findings([1.0] * 10, load_avg=[5.0], n_cores=2, other_cpu=[]))
    assert "high-load" not in codes(F.cell_findings([1.0] * 10, load_avg=[5.0], n_cores=2, other_cpu=None))


def test_failed_and_all_failed():
    partly = F.cell_findings([1.0] * 10, n_failed=2)
    assert "failed-runs" in codes(partly) and "all-failed" not in codes(partly)
    assert "2 of 12" in next(f.message for f in partly if f.code == "failed-runs")
    assert codes(F.cell_findings([], n_failed=5)) == {"all-failed"}
    assert codes(F.cell_findings([float("nan")], n_failed=1)) == {"all-failed"}


def test_findings_carry_message_and_advice():
    for f in F.cell_findings([1.0, 50.0, 1.1], durations_s=[0.001] * 3, load_avg=9, n_cores=1, n_failed=1):
        assert f.message and f.advice
        with pytest.raises(dataclasses.FrozenInstanceError):
            f.code = "x"  # type: ignore[misc]


@settings(max_examples=200, deadline=None)
@given(st.lists(any_floats, max_size=30), st.integers(0, 3))
def test_cell_findings_never_raise(values, n_failed):
    blocks = list(range(len(values)))
    for f in F.cell_findings(values, blocks=blocks, n_failed=n_failed):
        assert f.code in {"too-few-runs", "high-cv", "warmup-trend", "outliers", "drift",
                          "high-load", "short-runs", "failed-runs", "all-failed"}


# --------------------------------------------------------------------------
# precise_enough
# --------------------------------------------------------------------------

def test_precise_enough():
    rng = np.random.default_rng(31)
    tight = rng.normal(100, 1, 30)
    loose = rng.normal(100, 20, 30)
    assert S.precise_enough(tight, 0.02)
    assert not S.precise_enough(loose, 0.02)
    assert not S.precise_enough([1.0, 2.0], 0.5)      # CI undefined at n = 2
    assert not S.precise_enough([0.0] * 10, 0.02)     # relative width undefined


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=2, max_size=7), st.lists(st.integers(0, 5), min_size=2, max_size=7))
def test_exact_tied_mann_whitney_matches_scipys_permutation_test(a, b):
    """Our enumeration of tied midranks is the same null distribution as scipy's (slow) exact
    permutation test: the same p-value to the last bit that matters."""
    from scipy import stats as sp   # here: importing it costs every collection a second
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    assume(not np.all(np.concatenate([a, b]) == a[0]))
    expected = sp.mannwhitneyu(a, b, alternative="two-sided",
                               method=sp.PermutationMethod(n_resamples=np.inf)).pvalue
    assert R._exact_tied_p(a, b) == pytest.approx(min(expected, 1.0), abs=1e-12)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 6).map(float), min_size=3, max_size=30))
def test_ranks_and_spearman_match_scipy(values):
    from scipy import stats as sp   # here: importing it costs every collection a second
    x = np.asarray(values)
    assert np.allclose(R._ranks(x), sp.rankdata(x))
    blocks = np.arange(x.size, dtype=float)
    rho, p = R._spearman(blocks, x)
    if math.isnan(rho):
        assert np.all(x == x[0])
        return
    ref = sp.spearmanr(blocks, x)
    assert rho == pytest.approx(ref.statistic, abs=1e-9) and p == pytest.approx(ref.pvalue, abs=1e-9)


def test_warnings_have_a_floor_of_size():
    """A first run 0.04% from the others, an 'outlier' 0.1% away, or drift of 0.5% is no warning
    when the margin is 2%; the same shapes at a size that matters still are."""
    tiny = [455000.0] + [455200.0 + (i % 3) for i in range(11)]
    assert "warmup-trend" in codes(F.cell_findings(tiny))
    assert "warmup-trend" not in codes(F.cell_findings(tiny, floor=0.02))
    big = [300000.0] + tiny[1:]
    assert "warmup-trend" in codes(F.cell_findings(big, floor=0.02))
    out_tiny = [100.0, 100.1, 99.9, 100.0, 100.05, 99.95, 100.0, 100.5]
    assert "outliers" in codes(F.cell_findings(out_tiny))
    assert "outliers" not in codes(F.cell_findings(out_tiny, floor=0.02))
    assert "outliers" in codes(F.cell_findings(out_tiny[:-1] + [130.0], floor=0.02))
    drift_tiny = [100 + 0.05 * i for i in range(12)]
    assert "drift" in codes(F.cell_findings(drift_tiny, blocks=list(range(12))))
    assert "drift" not in codes(F.cell_findings(drift_tiny, blocks=list(range(12)), floor=0.02))
    assert "drift" in codes(F.cell_findings([100 + 3 * i for i in range(12)], blocks=list(range(12)), floor=0.02))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 20).map(float), min_size=10, max_size=25),
       st.lists(st.integers(0, 20).map(float), min_size=10, max_size=25))
def test_mannwhitney_normal_path_matches_scipy_asymptotic(a, b):
    from scipy import stats as sp   # here: importing it costs every collection a second
    x, y = np.asarray(a), np.asarray(b)
    if np.all(np.concatenate([x, y]) == x[0]):
        return
    ref = sp.mannwhitneyu(x, y, alternative="two-sided", method="asymptotic").pvalue
    assert R._mannwhitney_p(x, y) == pytest.approx(ref, abs=1e-9)
