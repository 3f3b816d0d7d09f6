"""The sequential design: when the data is looked at, and at which alpha.

In: the first look, --max-runs and alpha. Out: a Design, fixed before any data, stored with the
experiment, that the runner follows and the statistics judge by.

How alpha is spent over the looks (docs/statistics.md has the measurement that chose it): the
first look keeps alpha/K, as before (large effects, most verdicts, are decided there); the rest is
spent by a Hwang-Shih-DeCani function of the information after it, u = (t - t1) / (1 - t1) with
t = blocks / max-runs: (alpha - alpha/K) (1 - e^(-gamma u)) / (1 - e^(-gamma)), gamma = -2 (little at
the middle looks, most at the last ones, where small effects and equivalence are decided). Look k
tests at the increment of that cumulative spending, and
the looks are added up by the union bound (Bonferroni across looks), not by the joint normal law of
group-sequential boundaries: our statistic is a trimmed-mean t on a few heavy-tailed blocks, for
which the exact boundaries measured above 5% false positives. A final analysis that is not a planned
look (the budget ran out, Ctrl-C) spends everything the looks before it left, which is what lets
a budget-bound experiment decide more than alpha/K per look did.
Experiments stored before this rule carry no `spending` and are judged as they ran: alpha/K a look;
and those stored before `df_drop` with Yuen's own degrees of freedom.

A race (tune) is planned over the blocks its budget can reach (`Design.race`), not over --max-runs'
300: its looks start at 5 and grow by 1.5 (5, 8, 12, 18, 27, ...), the looks below 13 blocks each keep
alpha/K, and below 13 blocks the effect is the plain paired t (`plain_t`: the mean of the log-ratios,
its standard error, n - 1 df) rather than Yuen's trimmed mean with its 1/(1 - 2 trim) factor, which at
5 to 12 blocks cost the interval 1.7x its width. Measured on resampled races of 10 candidates built
from the stored runs (bench/rules.py, docs/statistics.md): a +15% candidate decided by 12 blocks
about 2.4x as often as under the compare-shaped race design (6, 10, 16, ... 300), A/A over the
family's verdicts below 5%.

A race (tune) adds an early look before the first (`early`): it keeps alpha/K too, so that the
look that follows it, compare's first, still tests at alpha/K and decides what compare's would;
without that, spending would starve it (0.0002 instead of 0.005 at 10 runs of 300).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SPENDING_GAMMA = -2.0
# Degrees of freedom of the paired trimmed-mean t below Yuen's h - 1 (stats/decide.yuen says why).
DF_DROP = 1
# The blocks from which the 20% trim applies (stats/decide.yuen says why): below, the plain mean.
TRIM_FROM = 6
# A race's design (Design.race): its first look, the growth of its looks, and the blocks from which
# its effect is the trimmed mean (below: the plain paired t).
RACE_FIRST = 5
RACE_GROWTH = 1.5
RACE_TRIM_FROM = 13


def hsd(t: float, alpha: float, gamma: float) -> float:
    """Hwang-Shih-DeCani cumulative alpha at information fraction t (clipped to [0, 1])."""
    t = min(1.0, max(0.0, t))
    if gamma == 0:
        return alpha * t
    return alpha * (1 - math.exp(-gamma * t)) / (1 - math.exp(-gamma))


@dataclass(frozen=True)
class Design:
    """When the data is looked at, and at which alpha."""

    alpha: float
    looks: tuple[int, ...]      # measured blocks per variant at which a look happens
    spending: float | None = SPENDING_GAMMA   # HSD gamma; None: alpha/K a look (the rule before)
    df_drop: int = DF_DROP      # 0: Yuen's own df, as experiments stored before it were judged
    early: int = 0              # looks before the first that, like it, test at alpha/K
    trim_from: int = TRIM_FROM  # 0: trimmed at every count, as experiments stored before it were judged
    plain_t: bool = False       # below trim_from: the plain paired t (n - 1 df), not Yuen's factor with df_drop

    @classmethod
    def fixed(cls, runs: int, alpha: float = 0.05) -> "Design":
        return cls(alpha, (max(1, runs),))

    @classmethod
    def sequential(cls, first: int, max_runs: int, alpha: float = 0.05, growth: float = 1.6,
                   spending: float | None = SPENDING_GAMMA, early: int | None = None) -> "Design":
        first = max(2, min(first, max_runs))
        looks = [first]
        while looks[-1] < max_runs:
            looks.append(min(max_runs, max(looks[-1] + 1, math.ceil(looks[-1] * growth))))
        if early is not None and 2 <= early < first:
            return cls(alpha, (early, *looks), spending, early=1)
        return cls(alpha, tuple(looks), spending)

    @classmethod
    def race(cls, horizon: int, alpha: float = 0.05, first: int = RACE_FIRST) -> "Design":
        """A race's looks, planned over the `horizon` blocks its budget can reach: from `first`, growing
        by 1.5; every look below RACE_TRIM_FROM blocks keeps alpha/K (the early looks), the plain
        paired t below it."""
        base = cls.sequential(first, max(2, horizon), alpha, growth=RACE_GROWTH)
        early = max(0, min(len(base.looks), sum(1 for n in base.looks if n < RACE_TRIM_FROM)) - 1)
        return cls(alpha, base.looks, SPENDING_GAMMA, DF_DROP, early=early, trim_from=RACE_TRIM_FROM, plain_t=True)

    @classmethod
    def of_stored(cls, design: dict | None, runs: int | None) -> "Design":
        """The design an experiment stored (its config's `design`), or, stored before designs were,
        its fixed runs."""
        if design:
            return cls._stored(**design)
        return cls(0.05, (max(1, int(runs or 1)),), df_drop=0, trim_from=0)

    @classmethod
    def _stored(cls, alpha: float, looks: list[int], spending: float | None = None, df_drop: int = 0,
                early: int = 0, trim_from: int = 0, plain_t: bool = False, **derived) -> "Design":
        """A design as to_config stored it (`rule` and `alpha_per_look` follow from the rest). Stored
        without "spending": before alpha spending; without "df_drop": before it, with Yuen's own df;
        without "trim_from": trimmed at every count. Each is judged by the rule it ran under."""
        return cls(float(alpha), tuple(int(n) for n in looks), spending, int(df_drop), int(early), int(trim_from),
                   bool(plain_t))

    def to_config(self) -> dict:
        out = {"rule": "sequential" if len(self.looks) > 1 else "fixed", "alpha": self.alpha,
               "looks": list(self.looks), "spending": self.spending, "df_drop": self.df_drop,
               "alpha_per_look": list(self.look_alphas)}
        if self.early:   # stored only where used: the stored bytes of every other design stay as they were
            out["early"] = self.early
        if self.trim_from:
            out["trim_from"] = self.trim_from
        if self.plain_t:
            out["plain_t"] = True
        return out

    @property
    def first(self) -> int:
        """The first look proper: the early look's few blocks say too little to give up on anything."""
        return self.looks[min(self.early, len(self.looks) - 1)]

    def spent(self, blocks: int) -> float:
        """Cumulative alpha of the planned looks made at or before `blocks`."""
        return sum(a for n, a in zip(self.looks, self.look_alphas) if n <= blocks)

    @property
    def look_alphas(self) -> tuple[float, ...]:
        """The alpha each planned look tests at; they sum to alpha."""
        k = len(self.looks)
        if self.spending is None or k == 1:
            return (self.alpha / k,) * k
        # The first look keeps alpha/K: large effects (most verdicts) are decided there, on few blocks
        # whose t quantiles explode at a smaller alpha. The rest is spent over the information after it.
        first = self.alpha / k
        kept = min(k, 1 + self.early)
        t1 = self.looks[kept - 1] / self.looks[-1]
        head = first * kept
        cum = [first * (i + 1) for i in range(kept)] + [
            head + hsd((n / self.looks[-1] - t1) / (1 - t1), self.alpha - head, self.spending)
            for n in self.looks[kept:]]
        cum[-1] = self.alpha
        return tuple(b - a for a, b in zip([0.0] + cum[:-1], cum))

    def alpha_at(self, blocks: int) -> float:
        """The alpha a comparison measured in `blocks` blocks is judged at: its look's share at a
        planned look; between looks (stopped by the budget or Ctrl-C), all the looks before left."""
        if blocks in self.looks:
            return self.look_alphas[self.looks.index(blocks)]
        if blocks > self.looks[-1]:   # more than planned (--until-precise adds blocks): the last look
            return self.look_alphas[-1]
        return self.alpha - self.spent(blocks)

    def describe(self) -> str:
        if len(self.looks) == 1:
            return f"fixed runs, alpha {self.alpha:g}"
        rule = ("alpha/K a look" if self.spending is None
                else f"Hwang-Shih-DeCani spending, gamma {self.spending:g}")
        if self.early and self.spending is not None:
            rule += f"; the early look at {self.looks[0]} and the first at alpha/K"
        if self.df_drop:
            rule += f"; t with Yuen's df less {self.df_drop}"
        if self.trim_from:
            rule += (f"; the plain paired t below {self.trim_from} runs, trimmed from them" if self.plain_t
                     else f"; trimmed from {self.trim_from} runs")
        return (f"sequential: looks at {', '.join(map(str, self.looks))} runs, alpha {self.alpha:g} spent "
                f"{', '.join(f'{a:.2g}' for a in self.look_alphas)} ({rule})")
