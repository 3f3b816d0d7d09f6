"""What the HTML page and its charts share without drawing anything: the variants' colours, which
runs the RSS chart shows, and what a chart is handed to draw. Kept apart from report/charts.py,
which imports matplotlib (0.4 s): a page whose charts come from the cache (report/html.py) never
imports it. The charts take plain data (Strip, Pareto), made here from the statistics' objects, so
the drawer forked before the page is known (report/pen.py) imports matplotlib and not the statistics."""

from __future__ import annotations

import math
from dataclasses import dataclass

RSS_LINES_PER_VARIANT = 12      # runs drawn in the RSS-over-time chart, spread over the experiment
PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c",
           "#ccb974", "#64b5cd")


def colour(vi: int) -> str:
    return PALETTE[vi % len(PALETTE)]


def pick_runs(runs: list, k: int) -> list:
    if len(runs) <= k:
        return runs
    step = (len(runs) - 1) / (k - 1)
    return [runs[round(i * step)] for i in range(k)]


@dataclass(frozen=True)
class StripCell:
    values: list[float]          # every measured run
    median: float
    interval: tuple[float, float] | None
    verdict: str | None          # against the baseline: better, worse, ... (None: the baseline)


@dataclass(frozen=True)
class Strip:
    """One metric of one workload per variant, as its strip chart draws it."""
    name: str
    unit: str
    higher_is_better: bool
    cells: dict[int, StripCell]  # variant -> its runs


def strip(row) -> Strip:
    """A Strip of a stats.analysis.MetricRow."""
    def cell(c) -> StripCell:
        s = c.summary
        interval = (s.ci_low, s.ci_high) if math.isfinite(s.ci_low) and math.isfinite(s.ci_high) else None
        return StripCell(list(c.values), s.median, interval, c.comparison.verdict if c.comparison else None)
    return Strip(row.name, row.unit, row.higher_is_better, {c.variant_idx: cell(c) for c in row.cells})


@dataclass(frozen=True)
class ParetoPoint:
    variant_idx: int
    label: str
    speed: float
    rss: float
    usable: bool


@dataclass(frozen=True)
class Pareto:
    """Speed against memory per variant, the front and the pick: a stats.recommend.Choice, drawn."""
    points: list[ParetoPoint]
    front: list[int]
    pick: int | None


def pareto(choice) -> Pareto:
    return Pareto([ParetoPoint(p.variant_idx, p.label, p.speed, p.rss, p.usable) for p in choice.points],
                  list(choice.front), choice.pick)
