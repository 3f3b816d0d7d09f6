"""The decision rule (decide.py): looks and their alpha, Yuen's paired interval, the four verdicts,
the runs an undecided comparison needs, and the false-positive rate of the whole sequential rule
on simulated heavy-tailed, drifting noise (the real-run figures are bench/aa_power.py's)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from alloclab.stats import decide
from alloclab.measure.padding import PAD_VAR, env_size, pad_env


# --- design ----------------------------------------------------------------------------------

def test_sequential_looks_grow_geometrically_and_end_at_max_runs():
    d = decide.Design.sequential(10, 300)
    assert d.looks[0] == 10 and d.looks[-1] == 300
    assert list(d.looks) == sorted(set(d.looks))
    assert all(b / a <= 1.7 for a, b in zip(d.looks, d.looks[1:-1]))
    assert decide.Design.fixed(7).looks == (7,)


@settings(deadline=None)   # a design of 1000 looks takes 0.3 s on a loaded 2-core machine: no timing here
@given(st.integers(2, 50), st.integers(2, 1000), st.sampled_from([None, -4.0, -2.0, 0.0, 1.0]),
       st.sampled_from([None, 2, 6]))
def test_alpha_spent_over_the_looks_never_exceeds_alpha(first, max_runs, gamma, early):
    """The union bound: whatever looks happened before a stop (a planned look, or the budget between
    looks), their alphas and the stop's sum to at most alpha."""
    d = decide.Design.sequential(first, max_runs, alpha=0.05, spending=gamma, early=early)
    assert sum(d.look_alphas) == pytest.approx(0.05) and min(d.look_alphas) > 0
    for stop in range(1, max_runs + 1):
        looks_before = [a for n, a in zip(d.looks, d.look_alphas) if n < stop]
        assert sum(looks_before) + d.alpha_at(stop) <= 0.05 + 1e-12


def test_spending_keeps_alpha_for_the_last_looks():
    """The first look keeps alpha/K (large effects are decided there); then Hwang-Shih-DeCani,
    gamma -2: little at the middle looks, most where small effects are decided."""
    d = decide.Design.sequential(10, 300)
    k = len(d.looks)
    assert d.look_alphas[0] == pytest.approx(0.05 / k)
    assert max(d.look_alphas[1:5]) < 0.05 / k / 3 and d.look_alphas[-2] > 0.05 / k
    assert sum(d.look_alphas[-3:]) > 0.05 * 0.6     # from 175 runs on: where small effects are decided
    legacy = decide.Design(0.05, d.looks, None)
    assert legacy.look_alphas == pytest.approx((0.05 / k,) * k)


def test_a_race_s_early_look_leaves_compare_s_first_look_its_alpha():
    """tune's race looks at 6 runs before compare's first at 10; the look at 10 still tests at
    alpha/K (spending alone would leave it 0.0002), and the design says so where it is stored."""
    race, compare = decide.Design.sequential(10, 300, early=6), decide.Design.sequential(10, 300)
    k = len(race.looks)
    assert race.looks == (6, *compare.looks) and race.first == 10 and compare.first == 10
    assert race.look_alphas[:2] == pytest.approx((0.05 / k, 0.05 / k))
    assert race.look_alphas[1] == pytest.approx(0.9 * compare.look_alphas[0])   # K is 10 instead of 9
    assert decide.Design.of_stored(race.to_config(), None) == race
    assert "early" not in compare.to_config()     # every other stored design's bytes stay as they were
    assert decide.Design.sequential(10, 300, early=10) == compare   # no look before the first: none added


def test_alpha_between_looks_spends_what_is_left():
    d = decide.Design(0.05, (10, 16, 26), None)     # the rule before: alpha/K a look
    assert d.alpha_at(16) == pytest.approx(0.05 / 3)
    assert d.alpha_at(20) == pytest.approx(0.05 - 2 * 0.05 / 3)   # stopped by the budget after two looks
    assert d.alpha_at(5) == pytest.approx(0.05)                   # interrupted before any look
    assert decide.Design.fixed(10).alpha_at(10) == pytest.approx(0.05)
    assert decide.Design.fixed(10).alpha_at(14) == pytest.approx(0.05)   # --until-precise added blocks
    s = decide.Design(0.05, (10, 16, 26))
    assert s.alpha_at(20) == pytest.approx(0.05 - sum(s.look_alphas[:2]))   # a budget stop gets the rest
    assert s.alpha_at(20) > 0.05 / 3


def test_design_round_trips_through_the_config():
    d = decide.Design.sequential(8, 80)
    assert decide.Design.of_stored(d.to_config(), None) == d
    # Stored before the design was: judged as it ran, fixed runs with Yuen's own degrees of freedom.
    assert decide.Design.of_stored(None, 6) == decide.Design(0.05, (6,), df_drop=0, trim_from=0)
    old = d.to_config()
    del old["df_drop"], old["trim_from"]
    assert decide.Design.of_stored(old, None).df_drop == 0
    # Stored before small samples were left untrimmed: trimmed at every count, as it was judged.
    assert d.trim_from == 6 and decide.Design.of_stored(old, None).trim_from == 0
    # Stored before alpha spending: judged by the rule it ran under.
    old = {"rule": "sequential", "alpha": 0.05, "looks": [4, 7, 12], "alpha_per_look": 0.0167}
    assert decide.Design.of_stored(old, None).look_alphas == pytest.approx((0.05 / 3,) * 3)


# --- Yuen's paired trimmed mean ------------------------------------------------------------------

def test_yuen_matches_the_textbook_formula():
    from scipy import stats as sp   # here: importing it costs every collection a second
    d = np.array([0.12, -0.03, 0.05, 0.08, 0.30, 0.02, 0.07, -0.10, 0.04, 0.06])
    est, lo, hi, p, se, df = decide.yuen(d, 0.95, df_drop=1)
    s = np.sort(d)
    g = 2   # floor(0.2 * 10)
    assert est == pytest.approx(np.mean(s[g:-g]))
    w = np.clip(d, s[g], s[-g - 1])
    assert se == pytest.approx(np.std(w, ddof=1) / (0.6 * math.sqrt(10)))
    assert df == 10 - 2 * g - 2      # one fewer than Yuen's h - 1, as the sequential rule uses it
    assert decide.yuen(d, 0.95)[5] == 10 - 2 * g - 1
    q = sp.t.ppf(0.975, df)
    assert (lo, hi) == pytest.approx((est - q * se, est + q * se))
    assert p == pytest.approx(2 * sp.t.sf(abs(est) / se, df))


def test_five_blocks_of_a_metric_that_barely_varies_decide_at_a_recipes_first_look():
    """redis' RSS after its flush, mimalloc against jemalloc as linked: five paired log-ratios of
    -0.12 to -0.14 (stored by tune at 18:39). Trimmed to 3 with one df taken, t(0.9975, 1) = 127
    left it ? -12.4% [-50.5, +55.0]; untrimmed below 6 blocks it is decided, near the hand's -12.1%."""
    d = np.log(np.array([0.867, 0.885, 0.881, 0.876, 0.870]))
    design = decide.Design.sequential(5, 30)
    assert design.trim_from == 6 and design.looks[0] == 5
    level = design.alpha_at(5) / 2      # a family of two candidates
    est, lo, hi, p, se, df = decide.yuen(d, 1 - level, df_drop=design.df_drop, trim_from=design.trim_from)
    assert df == 5 - 2 and est == pytest.approx(np.mean(d))
    assert se == pytest.approx(np.std(d, ddof=1) / (0.6 * math.sqrt(5)))   # Yuen's factor kept: no narrower
    assert -0.20 < lo < hi < -0.07
    c = decide.judge([24.0] * 5, list(24.0 * np.exp(d)), False, margin=0.02, design=design, blocks=5, family=2,
                     base_blocks=list(range(5)), cand_blocks=list(range(5)))
    assert c.verdict == "better"
    # The stored design of the run that could not decide it: judged as it ran.
    old = decide.Design(0.05, design.looks, design.spending, design.df_drop, trim_from=0)
    c = decide.judge([24.0] * 5, list(24.0 * np.exp(d)), False, margin=0.02, design=old, blocks=5, family=2,
                     base_blocks=list(range(5)), cand_blocks=list(range(5)))
    assert c.verdict == "undecided"
    # From 6 blocks the trim applies as before.
    assert decide.yuen(np.r_[d, -0.13], 0.99, df_drop=1, trim_from=6)[5] == 6 - 2 - 2


def test_yuen_with_no_spread_decides_at_once():
    est, lo, hi, p, se, _ = decide.yuen(np.full(3, math.log(0.1)), 0.999)
    assert lo == hi == est and p == 0.0 and se == 0.0
    est, lo, hi, p, *_ = decide.yuen(np.zeros(4), 0.99)
    assert (est, lo, hi, p) == (0.0, 0.0, 0.0, 1.0)


def test_paired_effect_pairs_by_block_and_ignores_unpaired_runs():
    base = {("h", 1): 10.0, ("h", 2): 20.0, ("h", 3): 40.0, ("h", 4): 5.0}
    cand = {("h", 1): 11.0, ("h", 2): 22.0, ("h", 3): 44.0}
    e = decide.paired_effect(base, cand, 0.95)
    assert e.n == 3 and e.ratio == pytest.approx(1.1) and e.ci_low == pytest.approx(1.1)
    # A value that cannot be logged makes the caller fall back on the unpaired comparison.
    assert decide.paired_effect({1: 0.0, 2: 1.0}, {1: 1.0, 2: 1.0}, 0.95) is None
    assert decide.paired_effect({1: 0.0, 2: 0.0}, {1: 0.0, 2: 0.0}, 0.95).ratio == 1.0


def test_pairing_removes_drift_that_pooling_cannot():
    """Noise that drifts between blocks is shared by the variants of a block: the paired interval is
    narrow where the pooled samples overlap completely."""
    rng = np.random.default_rng(1)
    level = np.exp(np.linspace(0, 1.0, 20))                 # the machine slows by 2.7x over the run
    base = {b: level[b] * rng.lognormal(0, 0.02) for b in range(20)}
    cand = {b: level[b] * 1.05 * rng.lognormal(0, 0.02) for b in range(20)}
    e = decide.paired_effect(base, cand, 0.99)
    assert 1.0 < e.ci_low < 1.05 < e.ci_high < 1.1


# --- verdicts -----------------------------------------------------------------------------------

@pytest.mark.parametrize("ratio, lo, hi, hib, margin, expected", [
    (1.10, 1.05, 1.15, True, 0.02, "better"),
    (1.10, 1.05, 1.15, False, 0.02, "worse"),
    (0.90, 0.85, 0.95, False, 0.02, "better"),
    (1.002, 0.992, 1.011, True, 0.02, "equivalent"),
    (1.005, 1.001, 1.009, True, 0.02, "equivalent"),   # distinguishable, but smaller than what matters
    (1.03, 0.92, 1.15, True, 0.02, "undecided"),
    (1.01, 0.99, 1.03, True, 0.02, "undecided"),       # straddles the margin
    (1.0, 0.99, 1.01, True, 0.0, "undecided"),         # no margin: equivalence is never shown
    (math.nan, math.nan, math.nan, True, 0.02, "undecided"),
])
def test_four_verdicts(ratio, lo, hi, hib, margin, expected):
    assert decide.verdict_for(ratio, lo, hi, hib, margin) == expected


def test_more_runs_scales_with_the_square_of_the_interval():
    # Interval half-width 0.1 (log) around an effect of 0.05: halving it needs 4x the runs.
    r = math.exp(0.05)
    assert decide.more_runs(10, r, math.exp(-0.05), math.exp(0.15), 0.0) == 30
    assert decide.more_runs(10, 1.0, 0.99, 1.01, 0.0) is None      # no effect, no margin: never
    assert decide.more_runs(10, 1.0, 0.9, 1.1, 0.02) >= 200         # inside +-2% needs many runs


# --- the whole sequential rule on simulated noise -------------------------------------------------

def _experiment(rng, effect: float, max_runs: int = 120) -> str:
    """One two-variant sequential experiment on heavy-tailed noise (1 run in 8 is 40-90% slower)
    with slow drift between blocks; returns the final verdict as the runner would reach it."""
    d = decide.Design.sequential(10, max_runs)
    drift = np.cumsum(rng.normal(0, 0.03, max_runs))

    def run(b, factor):
        slow = 1 + rng.uniform(0.4, 0.9) if rng.random() < 1 / 8 else 1.0
        return math.exp(drift[b]) * factor * slow * rng.lognormal(0, 0.08)

    base, cand = {}, {}
    for b in range(max_runs):
        base[b], cand[b] = run(b, 1.0), run(b, effect)
        n = b + 1
        if n in d.looks:
            e = decide.paired_effect(base, cand, 1 - d.alpha_at(n))
            v = decide.verdict_for(e.ratio, e.ci_low, e.ci_high, False, 0.02)
            if v in decide.DECIDED:
                return v
    return "undecided"


def test_sequential_rule_keeps_its_false_positive_rate_and_finds_a_5_percent_slowdown():
    rng = np.random.default_rng(2026)
    aa = [_experiment(rng, 1.0) for _ in range(300)]
    false = sum(v in ("better", "worse") for v in aa)
    assert false / len(aa) <= 0.05
    slow = [_experiment(rng, 1.05, max_runs=300) for _ in range(60)]
    assert sum(v == "worse" for v in slow) / len(slow) >= 0.9


# --- equal-size environments ---------------------------------------------------------------------

@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text("ABCDEFGHIJ_", min_size=1, max_size=8), st.text(max_size=40), max_size=6),
       st.integers(0, 4096))
def test_padding_gives_every_variant_the_same_environment_size(env, filler):
    big = env | {"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "MALLOC_CONF": "narenas:2"}
    target = max(env_size(env), env_size(big)) + len(PAD_VAR) + 2 + filler
    assert env_size(pad_env(env, target)) == env_size(pad_env(big, target)) == target


def test_a_paired_interval_beyond_a_floats_exp_bounds_nothing_rather_than_crashing():
    # The demo's suite crashed at a first look (math range error): two blocks far apart at a tiny alpha.
    from alloclab.stats.decide import paired_effect
    e = paired_effect({0: 1.0, 1: 1.0}, {0: 1.0, 1: 1e20}, 1 - 1e-9, 0, 13, True)
    assert e is not None and e.ci_high == float("inf") and e.ci_low >= 0.0, e
