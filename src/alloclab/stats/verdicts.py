"""A comparison's verdict from its ratio and interval, and how many more runs would likely decide
it: the words every estimate (stats/estimates.py) and the sequential rule (stats/decide.py) share.
"""

from __future__ import annotations

import math

VERDICTS = ("better", "worse", "equivalent", "undecided")
DECIDED = ("better", "worse", "equivalent")


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
