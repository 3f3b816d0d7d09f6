"""The decision rule: paired within-block effects, sequential looks, and four verdicts.

In comes a comparison's runs (baseline and candidate values keyed by the block they ran in); out
comes an effect with its interval and one of four verdicts:

* better / worse: the interval excludes "no change";
* equivalent: the whole interval lies inside +-margin (the --min-effect value);
* undecided: the interval straddles a margin; with the runs per variant that would likely decide it.

Why paired: every block runs each variant once, side by side in a shuffled order, so slow drift
of the machine (the capacity of a vCPU moving on a scale of seconds to minutes) is shared by
the runs of one block. The within-block log-ratio log(candidate / baseline) cancels it; comparing
the pooled samples does not.

Why a 20% trimmed mean (Yuen's paired test, Wilcox "Introduction to Robust Estimation", 5.9):
the run-to-run noise on a shared VM is heavy-tailed (about one run in eight 40-90% slower), which
inflates a plain t interval and makes a rank test need many blocks before it can reach a small
alpha at all. The trimmed mean ignores the tails on both sides, and its interval is defined from
two blocks on, so deterministic counts (page faults, peak RSS) decide in two or three runs.

How the looks spend alpha (plan/design.py): measuring until decided (the default without --runs) looks at the data after n0, n0*g,
n0*g^2, ... blocks up to --max-runs; look k tests at the increment of an alpha-spending function,
and the m comparisons of one family (every candidate against the baseline on one workload and
metric) share that by Bonferroni. By the union bound, the chance that any look of any comparison
states a false "better", "worse" or "equivalent" is at most alpha, however the looks turn out:
the printed intervals are simultaneous 1-alpha intervals. A run stopped between looks (the time
budget, Ctrl-C) spends what alpha is left on its last analysis.

One engine: `judge` is where every verdict of alloclab comes from (the answer and tables, the
CI gate, sweeps, ablations, fleet agreement, diff): paired within blocks where the runs were
measured side by side, the unpaired ratio of medians only where they cannot be (two experiments,
two hosts), always at the alpha the design's looks left and shared over its family.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
from alloclab.stats import special as _special

from alloclab.plan.design import Design
from alloclab.stats import estimates
from alloclab.stats.verdicts import DECIDED, VERDICTS, more_runs, verdict_for  # noqa: F401 (decide's own words)

TRIM = 0.2


# --- the paired estimate -----------------------------------------------------------------------

@dataclass(frozen=True)
class PairedEffect:
    ratio: float        # exp(trimmed mean of within-block log-ratios)
    ci_low: float
    ci_high: float
    p_value: float      # two-sided, Yuen's paired trimmed-mean test
    n: int              # pairs
    se_log: float       # standard error of the trimmed mean (log scale)
    df: float


def yuen(d: np.ndarray, confidence: float, trim: float = TRIM,
         df_drop: int = 0, trim_from: int = 0, plain_t: bool = False) -> tuple[float, float, float, float, float, float]:
    """Trimmed mean of `d`, its two-sided interval and p (H0: 0), standard error and df.

    `df_drop` takes degrees of freedom from Yuen's h - 1; the sequential rule takes one (its Design's
    df_drop): at the small per-look, per-family
    levels of a sequential experiment (0.0008-0.01) and few heavy-tailed blocks, h - 1 let through
    up to 3x the nominal rate at a look (6.3% for one comparison on the redis looks, 5.7-6.3% for a
    family of 7), h - 2 keeps every design measured at or below 5% for almost no power
    (docs/statistics.md, bench/rules.py).

    `trim_from`: below that many blocks nothing is trimmed (the standard error keeps Yuen's factor).
    At 5 blocks a 20% trim keeps 3 values, h - 2 leaves one degree of freedom, and t(0.9975, 1) = 127:
    a memory metric that barely varies (redis after its flush: five log-ratios of -0.12 to -0.14)
    could not be decided at a recipe's first look whatever its effect. Untrimmed, with n - 2 df, the
    resampled false-positive rate of every design measured stays at or below the trimmed rule's and
    a doubling is decided at a first look of 5 in 54% of experiments, not 5% (docs/statistics.md).

    `plain_t` (a race's design): below `trim_from` the plain paired t, the mean's own standard error
    with n - 1 df. At a race's looks of 5, 8 and 12 blocks, tested at alpha/K over a family of 10, the
    untrimmed standard error with Yuen's factor and n - 2 df left a +15% candidate decided by 12 blocks
    in about 11% of resampled races; the plain t in about 27%, its A/A rate over the family 3.5%
    (docs/statistics.md).

    With every value equal the standard error is 0: the interval is the point itself and p is 0
    unless the value is 0 (then 1)."""
    d = np.sort(np.asarray(d, dtype=float))
    n = d.size
    if n < 2:
        return (float(d[0]) if n else math.nan), math.nan, math.nan, math.nan, math.nan, math.nan
    g = int(math.floor(trim * n)) if n >= trim_from else 0
    h = n - 2 * g
    tmean = float(np.mean(d[g:n - g]))
    w = d.copy()
    if g:
        w[:g], w[n - g:] = d[g], d[n - g - 1]
    sw2 = float(np.var(w, ddof=1))
    plain = plain_t and not g
    se = math.sqrt(sw2) / ((1.0 if plain else 1 - 2 * trim) * math.sqrt(n)) if sw2 > 0 else 0.0
    df = max(1, h - 1 - (0 if plain else df_drop))
    if se == 0:
        return tmean, tmean, tmean, (1.0 if tmean == 0 else 0.0), 0.0, float(df)
    q = float(_special.stdtrit(df, 0.5 + confidence / 2))
    p = float(2 * _special.stdtr(df, -abs(tmean) / se))
    return tmean, tmean - q * se, tmean + q * se, p, se, float(df)


def paired_effect(base: dict, cand: dict, confidence: float, df_drop: int = 0,
                  trim_from: int = 0, plain_t: bool = False) -> PairedEffect | None:
    """Within-block effect of candidate against baseline; `base` and `cand` map block -> value.

    None where the values are not all positive (a log-ratio needs them), so the caller can fall
    back on the unpaired comparison: equal zeros (no major faults in either run) count as no change."""
    logs = []
    for blk, b in base.items():
        c = cand.get(blk)
        if c is None or not (math.isfinite(b) and math.isfinite(c)):
            continue
        if b > 0 and c > 0:
            logs.append(math.log(c / b))
        elif b == c == 0:
            logs.append(0.0)
        else:
            return None
    if len(logs) < 2:
        return None
    est, lo, hi, p, se, df = yuen(np.array(logs), confidence, df_drop=df_drop, trim_from=trim_from, plain_t=plain_t)
    # A look at few blocks with a tiny alpha can give a log-interval beyond what a float's exp holds
    # (the demo's suite at its first look): its ends are then 0 and inf, an interval that bounds nothing.
    return PairedEffect(safe_exp(est), safe_exp(lo), safe_exp(hi), p, len(logs), se, df)


def safe_exp(x: float) -> float:
    """exp, inf beyond what a float holds (a log-interval of a look at few blocks and a tiny alpha)."""
    return math.inf if x > 709.0 else math.exp(x)


# --- futility ---------------------------------------------------------------------------------

FUTILITY_FACTOR = 2.0   # stop only when the projection needs twice the runs left (the estimate is noisy)
# ... and only once the interval says something: within ±10% (or 5 margins) both ways. A wide
# interval at an early look (little alpha spent, an outlier block) keeps running while the
# experiment does, since every further block narrows the bound it will be reported with.
NARROW_FACTOR = 5.0
NARROW_MIN = 0.10


def narrow(ci_low: float, ci_high: float, margin: float) -> bool:
    """Is the interval already an informative bound (within ±max(10%, 5 margins))?"""
    r = math.log1p(max(NARROW_MIN, NARROW_FACTOR * margin))
    return ci_low > 0 and math.isfinite(ci_high) and -r <= math.log(ci_low) and math.log(ci_high) <= r


def futile(n: int, ratio: float, ci_low: float, ci_high: float, margin: float, *, confidence: float,
           final_confidence: float, df: float, reachable: int) -> int | None:
    """Runs per variant an undecided comparison would need, where even `reachable` blocks (what
    --max-runs or the budget leave) would not decide it; None where they might.

    The projection narrows the interval as 1/sqrt(n), with the t quantile of the level the final
    analysis would have, and is optimistic by one standard error: the effect is taken one standard
    error further from zero for a better/worse verdict, one nearer for equivalence, so that a noisy
    estimate does not close a comparison that could still be decided (non-binding: stopping never
    adds false positives, it only gives up power, which docs/statistics.md measures)."""
    if n < 2 or reachable <= n or not all(math.isfinite(v) and v > 0 for v in (ratio, ci_low, ci_high)):
        return None
    est = abs(math.log(ratio))
    half = (math.log(ci_high) - math.log(ci_low)) / 2
    q_now = float(_special.stdtrit(df, 0.5 + confidence / 2)) if df > 0 else math.inf
    se = half / q_now
    q_end = float(_special.stdtrit(max(df, 1.0) * reachable / n, 0.5 + final_confidence / 2))
    lm = math.log1p(margin) if margin > 0 else 0.0

    def need(target: float) -> float:
        return math.ceil((se * math.sqrt(n) * q_end / target) ** 2) - n if target > 0 else math.inf
    if need(max(est + se, lm - max(0.0, est - se))) <= FUTILITY_FACTOR * (reachable - n):
        return None
    # Said with the estimate as it is, as more_runs says it.
    return int(min(need(max(est, lm - est)), 10 ** 6))


# --- the engine -----------------------------------------------------------------------------------

def judge(base: list[float], cand: list[float], higher_is_better: bool, *, margin: float, design: Design,
          blocks: int, family: int = 1, base_blocks: list | None = None, cand_blocks: list | None = None,
          reachable: int | None = None, n_boot: int = 2000) -> "estimates.Comparison":
    """The one verdict of alloclab: candidate against baseline, judged at the alpha the design's
    looks left at `blocks` blocks, Bonferroni over a family of `family` comparisons.

    Paired (Yuen's trimmed mean of within-block log-ratios) where both sides carry the blocks they
    ran in and every value can be logged; else the unpaired ratio of medians with a bootstrap
    interval and Mann-Whitney p, said so by `method`. `reachable`: the blocks this comparison could
    still reach (--max-runs, or what the budget leaves); an undecided comparison that cannot be
    decided within them comes back `futile`, with the runs it would need."""
    level = design.alpha_at(blocks) / max(1, family)
    confidence = 1 - level
    adjust = design.alpha / level
    e = None
    if base_blocks is not None and cand_blocks is not None:
        e = paired_effect(dict(zip(base_blocks, base)), dict(zip(cand_blocks, cand)), confidence, design.df_drop,
                          design.trim_from, design.plain_t)
    if e is None:
        c = estimates.compare(base, cand, higher_is_better, alpha=level, min_effect=margin, n_boot=n_boot,
                              confidence=confidence)
        return dataclasses.replace(c, p_adjusted=min(1.0, c.p_value * adjust) if c.p_value == c.p_value else c.p_value)
    verdict = verdict_for(e.ratio, e.ci_low, e.ci_high, higher_is_better, margin)
    need, is_futile = None, False
    if verdict == "undecided":
        need = more_runs(e.n, e.ratio, e.ci_low, e.ci_high, margin)
        # Not at the first look: its few blocks say too little about the spread to give up on.
        if reachable is not None and reachable > blocks and blocks > design.first:
            final = 1 - (design.alpha - design.spent(blocks)) / max(1, family)
            far = futile(e.n, e.ratio, e.ci_low, e.ci_high, margin, confidence=confidence,
                         final_confidence=final, df=e.df, reachable=reachable)
            if far is not None and narrow(e.ci_low, e.ci_high, margin):
                need, is_futile = far, True
    return estimates.Comparison(
        ratio=e.ratio, ci_low=e.ci_low, ci_high=e.ci_high, p_value=e.p_value, p_adjusted=min(1.0, e.p_value * adjust),
        higher_is_better=higher_is_better, verdict=verdict, n_baseline=len(base), n_candidate=len(cand),
        margin=margin, confidence=confidence, method="paired", more_runs=need, futile=is_futile)
