"""What a CPU profile bounds: the most any allocator or setting could change a program's speed,
from the share of its on-CPU time in the allocator's functions and the kernel's memory management.

In: the default allocator's ProfileSummary of a workload (measure/profile) and its primary metric.
Out: a ShareBound: the share measured, its one-sided upper limit over the samples, and the bound
on the metric (a time: at most the share; a rate: at most 1/(1 - share) - 1), both from the limit.
Time a thread spends asleep on an allocator's lock is not on-CPU: the profile does not see it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from alloclab.stats.estimates import proportion_upper
from alloclab.tune.styled import Line

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
        """The most the metric could improve, as a positive fraction (a time's cut, a rate's rise)."""
        return abs(gain_bound(self.upper, self.rate))


def gain_bound(share: float, higher_is_better: bool) -> float:
    """The one formula of what a CPU share bounds: the most an allocator could improve a metric of
    runs that spent `share` of their CPU in the allocator and the kernel's memory management (all of
    it gone, at best), as a relative change. A time (lower is better) falls by at most the share
    (-0.611 for 61.1%); a rate (higher is better: ops/s, tps) rises by at most 1/(1 - share) - 1
    (+1.571 for 61.1%, inf for 100%). tune's stop and the reports' bounds both read it."""
    if not higher_is_better:
        return -share
    return math.inf if share >= 1 else 1 / (1 - share) - 1


def pooled_share(summary) -> tuple[float, float, int] | None:
    """The share of a profile's samples (its runs pooled) in the allocator's functions and in the
    kernel's memory management (faults, page clearing, brk, mmap, munmap, madvise), its one-sided
    upper limit at CONFIDENCE, and the samples: the one estimate tune's stop and the reports' bounds
    read. `summary`: a ProfileSummary or its stored dict. None without samples."""
    if isinstance(summary, dict):   # as stored: its runs' samples and shares are all it needs
        runs = [(r.get("samples") or 0, r.get("shares") or {}) for r in summary.get("runs", []) if r.get("status") == "ok"]
    else:
        runs = [(r.samples, r.shares) for r in summary.ok_runs]
    samples = sum(n for n, _ in runs)
    if not samples:
        return None
    hits = sum((shares.get("allocator", 0.0) + shares.get("kernel_mm", 0.0)) * n for n, shares in runs)
    return hits / samples, proportion_upper(round(hits), samples, CONFIDENCE), samples


def share_bound(workload: str, summary, metric) -> ShareBound | None:
    """None where the profile cannot bound a change: no kernel view (a fault-driven change would go
    unseen), no allocator found, or no run with samples."""
    pooled = pooled_share(summary)
    if not (summary.kernel_visible and summary.allocator and pooled):
        return None
    share, upper, samples = pooled
    return ShareBound(workload, share, upper, samples, metric.name if metric is not None else None,
                      bool(metric is not None and metric.higher_is_better))


# Where no rule fires, or only rules of the allocation rate, one profiled run per plain allocator
# bounds what any of them could change.
QUIET_FREQUENCY = 4999   # samples a second: a program of a tenth of a second still gives hundreds


@dataclass(frozen=True)
class QuietBound:
    """What the profiled look found where nothing but the allocation rate was seen: the largest bound
    of the diagnosed workloads, the default's label, and what the diagnosis read."""
    bound: ShareBound
    default: str
    workloads: int
    calls_per_s: float
    fired: tuple[str, ...]
    margin: float

    @property
    def stops(self) -> bool:
        """Every change bounded below the margin: nothing to tune."""
        return self.bound.bound < self.margin

    def record(self) -> dict:
        return {"fact": "bound", **dataclasses.asdict(self.bound), "bound": self.bound.bound, "default": self.default,
                "workloads": self.workloads, "calls_per_s": self.calls_per_s, "fired": list(self.fired),
                "margin": self.margin, "stops": self.stops}


def quiet_bound(store, diag_id: int, chosen: list, plain: list, base, rx, timeout_s: float | None,
                seed: int, margin: float, note) -> QuietBound | None:
    """Where nothing the allocator does was seen beyond how often it is called: one profiled run per
    plain allocator and diagnosed workload (with an unprofiled run beside each: the one look).
    `base`: the default's Reading. The largest bound of the workloads (tune stops where it is below
    the margin); None where no bound could be read (no profile, a memory metric of the user's)."""
    from alloclab.errors import AlloclabError
    from alloclab.measure import auto_profile
    from alloclab.measure.profile.perf import read_int
    from alloclab.measure.profile.record import profile_workload
    from alloclab.measure.profile.summary import store_profiles
    from alloclab.workloads.metrics import is_memory
    from alloclab.workloads.primary import primary_metric

    if base is None:
        return None
    if why := auto_profile.unavailable():
        note(Line.of(f"No profile to bound the allocator's share ({why}); racing.", "yellow"))
        return None
    limit = read_int("/proc/sys/kernel/perf_event_max_sample_rate") or QUIET_FREQUENCY
    bounds = []
    for wi, workload in enumerate(chosen):
        try:
            summaries = profile_workload(workload, plain, runs=1, baseline=None, timeout_s=timeout_s,
                                         keep_session=True, seed=seed, frequency=min(QUIET_FREQUENCY, limit),
                                         workload_idx=wi)
        except AlloclabError as exc:   # a workload profiling cannot run (run_as, ...): no bound, race
            note(Line.of(f"No profile of {workload.name} to bound the allocator's share ({exc}); racing.", "yellow"))
            return None
        store_profiles(store, diag_id, summaries)
        metric = primary_metric(workload.metrics)
        if metric is not None and is_memory(metric):
            return None   # a memory metric of the user's: what the CPU's share bounds is time
        # The default's profile: what any change could take away from it.
        b = share_bound(workload.name, summaries[0], metric)
        if b is None:
            return None
        bounds.append(b)
    b = max(bounds, key=lambda x: x.bound)
    return QuietBound(b, plain[0].label, len(chosen), base.get("allocs_per_s") or 0.0, tuple(rx.fired), margin)
