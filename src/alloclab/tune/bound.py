"""What a CPU profile bounds: the most any allocator or setting could change a program's speed,
from the share of its on-CPU time in the allocator's functions and the kernel's memory management.

In: the default allocator's ProfileSummary of a workload (measure/profile) and its primary metric.
Out: a ShareBound: the share measured, its one-sided upper limit over the samples, and the bound
on the metric (a time: at most the share; a rate: at most 1/(1 - share) - 1), both from the limit.
Time a thread spends asleep on an allocator's lock is not on-CPU: the profile does not see it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from alloclab.stats.estimates import proportion_upper

CONFIDENCE = 0.95


@dataclass(frozen=True)
class ShareBound:
    workload: str
    share: float        # allocator + kernel memory management, over all samples of the profiled runs
    upper: float        # its one-sided upper limit at CONFIDENCE
    samples: int
    metric: str | None  # the primary metric's name, None for wall time
    rate: bool          # the metric is a rate (higher is better)

    @property
    def bound(self) -> float:
        if not self.rate:
            return self.upper
        return math.inf if self.upper >= 1 else 1 / (1 - self.upper) - 1


def share_bound(workload: str, summary, metric) -> ShareBound | None:
    """None where the profile cannot bound a change: no kernel view (a fault-driven change would go
    unseen), no allocator found, or no run with samples."""
    runs = summary.ok_runs
    if not (summary.kernel_visible and summary.allocator and runs):
        return None
    samples = sum(r.samples for r in runs)
    hits = sum((r.shares.get("allocator", 0.0) + r.shares.get("kernel_mm", 0.0)) * r.samples for r in runs)
    return ShareBound(workload, hits / samples, proportion_upper(round(hits), samples, CONFIDENCE), samples,
                      metric.name if metric is not None else None,
                      bool(metric is not None and metric.higher_is_better))
