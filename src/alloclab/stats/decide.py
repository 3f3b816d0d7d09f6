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

Why the looks are Bonferroni-spent (Pocock-like): measuring until decided (the default without
--runs) looks at the data after n0, n0*g, n0*g^2, ... blocks up to --max-runs, K looks in all,
and each look tests at alpha/K; the
m comparisons of one family (every candidate against the baseline on one workload and metric)
share that by Bonferroni. By the union bound, the chance that any look of any comparison states
a false "better", "worse" or "equivalent" is at most alpha, however the looks turn out: the
printed intervals are simultaneous 1-alpha intervals. A run stopped between looks (the time
budget, Ctrl-C) spends what alpha is left on its last analysis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special as _special   # not scipy.stats: a second less at every start

from alloclab.plan.design import Design  # noqa: F401  (the verdicts are judged at its looks)

VERDICTS = ("better", "worse", "equivalent", "undecided")
DECIDED = ("better", "worse", "equivalent")
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


def yuen(d: np.ndarray, confidence: float, trim: float = TRIM) -> tuple[float, float, float, float, float, float]:
    """Trimmed mean of `d`, its two-sided interval and p (H0: 0), standard error and df.

    With every value equal the standard error is 0: the interval is the point itself and p is 0
    unless the value is 0 (then 1)."""
    d = np.sort(np.asarray(d, dtype=float))
    n = d.size
    if n < 2:
        return (float(d[0]) if n else math.nan), math.nan, math.nan, math.nan, math.nan, math.nan
    g = int(math.floor(trim * n))
    h = n - 2 * g
    tmean = float(np.mean(d[g:n - g]))
    w = d.copy()
    if g:
        w[:g], w[n - g:] = d[g], d[n - g - 1]
    sw2 = float(np.var(w, ddof=1))
    se = math.sqrt(sw2) / ((1 - 2 * trim) * math.sqrt(n)) if sw2 > 0 else 0.0
    df = h - 1
    if se == 0:
        return tmean, tmean, tmean, (1.0 if tmean == 0 else 0.0), 0.0, float(df)
    q = float(_special.stdtrit(df, 0.5 + confidence / 2))
    p = float(2 * _special.stdtr(df, -abs(tmean) / se))
    return tmean, tmean - q * se, tmean + q * se, p, se, float(df)


def paired_effect(base: dict, cand: dict, confidence: float) -> PairedEffect | None:
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
    est, lo, hi, p, se, df = yuen(np.array(logs), confidence)
    return PairedEffect(math.exp(est), math.exp(lo), math.exp(hi), p, len(logs), se, df)


# --- verdicts -------------------------------------------------------------------------------

def verdict_for(ratio: float, ci_low: float, ci_high: float, higher_is_better: bool, margin: float,
                significant: bool | None = None) -> str:
    """One of VERDICTS for a ratio candidate/baseline and its interval.

    `margin` is relative (0.02 for +-2%), symmetric on the log scale. Equivalence comes first: an
    effect whose whole interval is smaller than what the user said matters is reported as such,
    even where it is statistically distinguishable from zero. `significant`, where given (the
    unpaired path's p-value), must also hold for better/worse."""
    if not all(math.isfinite(v) for v in (ratio, ci_low, ci_high)):
        return "undecided"
    if margin > 0 and 1 / (1 + margin) < ci_low and ci_high < 1 + margin:
        return "equivalent"
    if (ci_low > 1 or ci_high < 1) and significant is not False:
        return "better" if (ratio > 1) == higher_is_better else "worse"
    return "undecided"


def more_runs(n: int, ratio: float, ci_low: float, ci_high: float, margin: float) -> int | None:
    """Runs per variant to add before an undecided comparison would likely be decided, at the spread
    seen so far (the interval narrows as 1/sqrt(n)): enough to exclude no change, or to fit inside
    the margin, whichever is nearer. None where no amount would do (no effect and no margin)."""
    if n < 2 or not all(math.isfinite(v) and v > 0 for v in (ratio, ci_low, ci_high)):
        return None
    est = abs(math.log(ratio))
    half = (math.log(ci_high) - math.log(ci_low)) / 2
    target = max(est, math.log1p(margin) - est if margin > 0 else 0.0)
    if target <= 0 or half <= 0:
        return None
    need = math.ceil(n * (half / target) ** 2)
    return max(1, need - n)
