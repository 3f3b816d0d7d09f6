"""The sequential design: when the data is looked at, and at which alpha (see stats/decide.py for
why the looks are Bonferroni-spent).

In: the first look, --max-runs and alpha. Out: a Design, fixed before any data, stored with the
experiment, that the runner follows and the statistics judge by.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Design:
    """When the data is looked at, and at which alpha."""

    alpha: float
    looks: tuple[int, ...]      # measured blocks per variant at which a look happens

    @classmethod
    def fixed(cls, runs: int, alpha: float = 0.05) -> "Design":
        return cls(alpha, (max(1, runs),))

    @classmethod
    def sequential(cls, first: int, max_runs: int, alpha: float = 0.05, growth: float = 1.6) -> "Design":
        first = max(2, min(first, max_runs))
        looks = [first]
        while looks[-1] < max_runs:
            looks.append(min(max_runs, max(looks[-1] + 1, math.ceil(looks[-1] * growth))))
        return cls(alpha, tuple(looks))

    @classmethod
    def from_config(cls, config: dict, runs_hint: int) -> "Design":
        d = config.get("design")
        if d:
            return cls(float(d["alpha"]), tuple(int(n) for n in d["looks"]))
        return cls.fixed(int(config.get("runs") or runs_hint or 1))

    def to_config(self) -> dict:
        return {"rule": "sequential" if len(self.looks) > 1 else "fixed", "alpha": self.alpha,
                "looks": list(self.looks), "alpha_per_look": self.alpha / len(self.looks)}

    @property
    def per_look(self) -> float:
        return self.alpha / len(self.looks)

    def alpha_at(self, blocks: int) -> float:
        """The alpha a comparison measured in `blocks` blocks is judged at: alpha/K at a planned look;
        between looks (stopped by the budget or Ctrl-C), what the looks already made left over."""
        if blocks in self.looks:
            return self.per_look
        spent = sum(1 for n in self.looks if n < blocks) * self.per_look
        return max(self.per_look, self.alpha - spent)
