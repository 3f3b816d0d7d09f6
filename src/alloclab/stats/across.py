"""The pick across several workloads, by counts: a variant decided better on some workload's
primary metric and worse on none (usable, within the memory budget everywhere), and of those the
one better on the most workloads (then undecided on the fewest). No mean of ratios ranks or
explains it: one workload's x200 would carry a mean, while a count holds each workload's verdict
as one. The counts, and why each variant better on more workloads is not the pick, are data here;
report/across.py says them in words.

In: the per-workload Choices of stats/recommend.py. Out: a Tally per variant and the Rivals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

RULE = "better-somewhere-worse-nowhere"   # docs/reports.md, "The recommendation"


@dataclass(frozen=True)
class Tally:
    """One variant's verdicts on the workloads' primary metrics, as the workloads' names."""

    better: tuple[str, ...] = ()
    worse: tuple[str, ...] = ()
    equivalent: tuple[str, ...] = ()
    undecided: tuple[str, ...] = ()
    worse_metrics: tuple[str, ...] = ()     # the primary metric of each of `worse`, in its order
    rss_lower: tuple[str, ...] = ()         # peak RSS decided lower than the baseline's
    rss_higher: tuple[str, ...] = ()

    def rank(self) -> tuple[int, int]:
        """Of the variants that meet the rule, the pick has the largest: the most workloads better,
        then the fewest undecided."""
        return len(self.better), -len(self.undecided)


class Why(str, Enum):
    """Why a variant better on more workloads than the pick is not the pick."""

    WORSE = "worse"                  # decided worse on some workload's primary metric
    INEFFECTIVE = "ineffective"      # its allocator was not in effect on some workload
    OVER_BUDGET = "over-budget"      # beyond the memory budget on some workload
    KEEPS_MORE = "keeps-more"        # decided to hold more memory after a phase


@dataclass(frozen=True)
class Rival:
    variant_idx: int
    why: tuple[Why, ...]


@dataclass
class Across:
    """The overall choice's counts: every variant's Tally (by variant index, the baseline left out),
    the variants tied for the pick where no single one is picked, and the rivals: each variant decided
    better on more workloads than the pick (or, with no pick, than none), with why it is not."""

    rule: str
    tallies: dict[int, Tally]
    tied: list[int] = field(default_factory=list)
    rivals: list[Rival] = field(default_factory=list)


def tally(choices: list, vi: int) -> Tally:
    """`choices`: the per-workload Choices (stats/recommend.py), each with its primary metric's verdicts."""
    kinds: dict[str, list[str]] = {"better": [], "worse": [], "equivalent": [], "undecided": []}
    worse_metrics, lower, higher = [], [], []
    for c in choices:
        p = c.points[vi]
        kinds.setdefault(p.speed_verdict, []).append(c.scope)
        if p.speed_verdict == "worse":
            worse_metrics.append(c.metric)
        if p.rss_verdict == "better":
            lower.append(c.scope)
        elif p.rss_verdict == "worse":
            higher.append(c.scope)
    return Tally(*(tuple(kinds[k]) for k in ("better", "worse", "equivalent", "undecided")),
                 tuple(worse_metrics), tuple(lower), tuple(higher))


def rivals(points: list, tallies: dict[int, Tally], pick: int | None, within, tied: list[int] = ()) -> list[Rival]:
    """The variants better on more workloads than the pick (or than those `tied` for it; with
    neither, better anywhere), each with why it is not the pick (`within(point)`: inside the memory
    budget), most wins first."""
    top = [pick] if pick is not None else list(tied)
    floor = max((len(tallies[vi].better) for vi in top), default=0)
    out = []
    for vi, t in tallies.items():
        if vi in top or len(t.better) <= floor:
            continue
        p = points[vi]
        why = [w for w, applies in ((Why.WORSE, bool(t.worse)), (Why.INEFFECTIVE, not p.usable),
                                     (Why.OVER_BUDGET, not within(p)), (Why.KEEPS_MORE, p.keeps_more is not None))
               if applies]
        out.append(Rival(vi, tuple(why)))
    return sorted(out, key=lambda r: (-len(tallies[r.variant_idx].better), len(tallies[r.variant_idx].worse)))
