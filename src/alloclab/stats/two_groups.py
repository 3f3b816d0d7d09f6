"""Runs of one variant that fall into two groups: a setting that acted in only some runs.

A median effect over such runs is a mixture, not the effect of the setting. glibc.malloc.hugetlb=1
on a 2-core VM (2026-12-02): the kernel gave the heap huge pages in about half the runs (0.07-0.10 s)
and not in the others (0.43-0.61 s, as the default), and the race read "-39.5% [-62.5, -2.4]".
Where the default's runs split too, something outside the allocator changed between runs.

In: an Analysis and, per pick, its variant and the metrics it is judged on. Out: a note per
workload, variant and metric whose runs split: each group at least a quarter of the runs, the gap between them at least 15% and at
least GAP_SPREADS times the wider group's spread (robust sd of the logs), so that noise, a drift of a
few percent, or a tail of slow runs does not read as two groups.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from alloclab.stats.analysis import Analysis, WorkloadResult

MIN_RUNS = 12   # below it, two groups of three of a unimodal noise split by chance (4% at 8 runs of 30% noise)
MIN_SHARE = 0.25
MIN_GAP = math.log(1.15)
GAP_SPREADS = 8.0
SPREAD_FLOOR = 0.005   # log units: a figure that barely varies (page faults) still needs a real gap


@dataclass(frozen=True)
class TwoGroups:
    workload: str
    label: str
    metric: str
    unit: str
    low: tuple[int, float]      # runs in the lower group, their median
    high: tuple[int, float]
    default_split: bool         # the default's runs on this metric split too
    default_median: float | None

    def to_dict(self) -> dict:
        return {"workload": self.workload, "label": self.label, "metric": self.metric,
                "low": {"runs": self.low[0], "median": self.low[1]},
                "high": {"runs": self.high[0], "median": self.high[1]},
                "default_split": self.default_split, "default_median": self.default_median}


def _spread(logs: np.ndarray) -> float:
    return 1.4826 * float(np.median(np.abs(logs - np.median(logs))))


def split(values: list[float]) -> tuple[list[float], list[float]] | None:
    """The two groups of `values`, lower first, where they split as the module says; else None."""
    x = np.sort(np.asarray([v for v in values if math.isfinite(v) and v > 0], dtype=float))
    n = int(x.size)
    if n < MIN_RUNS:
        return None
    logs = np.log(x)
    least = max(3, math.ceil(MIN_SHARE * n))
    if n - least < least:
        return None
    gaps = np.diff(logs)[least - 1:n - least]          # a cut after index i keeps i+1 runs below
    i = least - 1 + int(np.argmax(gaps))
    gap = float(logs[i + 1] - logs[i])
    lo, hi = logs[:i + 1], logs[i + 1:]
    spread = max(SPREAD_FLOOR, _spread(lo), _spread(hi))
    if gap < MIN_GAP or gap < GAP_SPREADS * spread:
        return None
    return [float(v) for v in x[:i + 1]], [float(v) for v in x[i + 1:]]


def note(a: Analysis, w: WorkloadResult, metric: str, vi: int) -> TwoGroups | None:
    cell = w.cell(metric, vi)
    groups = split(cell.values) if cell is not None else None
    if groups is None:
        return None
    row, base = w.row(metric), w.cell(metric, a.baseline_idx)
    lo, hi = groups
    return TwoGroups(w.name, a.labels[vi], metric, row.unit, (len(lo), float(np.median(lo))),
                     (len(hi), float(np.median(hi))),
                     vi != a.baseline_idx and base is not None and split(base.values) is not None,
                     base.summary.median if base is not None and base.summary.n else None)


def notes(a: Analysis, wanted: list[tuple[int, str, str]]) -> list[TwoGroups]:
    """For each (variant, workload, metric) asked (the picks' effects and costs), in order and once, a
    note where that variant's runs split."""
    by_name = {w.name: w for w in a.workloads}
    return [n for vi, workload, metric in dict.fromkeys(wanted)
            if workload in by_name and (n := note(a, by_name[workload], metric, vi)) is not None]
