"""One variant's profile (ProfileSummary): the shares over its profiled runs (median, min-max),
the sampling overhead against its unprofiled runs, and the notes; stored with the experiment
(table `profiles`), with the counters and RSS series of its timed runs, and the headline texts.
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import asdict, dataclass, field
from typing import Callable

from alloclab.measure.profile.attribution import RunProfile, _is_glibc, _realpath

TIMING_OK = 0.02             # profiled runs slower than this may not stand in for timed runs
LOW_COVERAGE = 0.6           # samples standing for less of the program's CPU time than this get a note
FEW_SAMPLES = 200            # below this a share moves by whole percents from noise alone
UNRESOLVED_NOTE = 0.2        # a DSO with this fraction of samples lacking symbols gets a note


# --- the summary of one variant ------------------------------------------------------------------

@dataclass
class ProfileSummary:
    workload: str
    variant: str                  # the variant's label
    variant_idx: int
    library: str | None
    event: str
    frequency_hz: int
    call_graph: bool
    kernel_visible: bool          # False when perf may only sample user space (perf_event_paranoid)
    runs: list[RunProfile] = field(default_factory=list)
    plain: list[dict] = field(default_factory=list)   # unprofiled runs, same variant: {wall_s, METRIC}
    metric: str | None = None         # the workload's metric the throughput overhead is read from
    metric_higher: bool = True
    perf_fixed_s: float | None = None  # perf record's own start and stop, timed on `true`
    workload_idx: int = 0
    notes: list[str] = field(default_factory=list)
    counters: dict | None = None        # perf stat medians (cycles, instructions, cache_misses, ipc)
    instructions: dict | None = None    # callgrind: total, allocator, top

    @property
    def ok_runs(self) -> list[RunProfile]:
        return [r for r in self.runs if r.status == "ok" and r.samples]

    def spread(self, category: str) -> tuple[float, float, float] | None:
        values = [r.shares.get(category, 0.0) for r in self.ok_runs]
        if not values:
            return None
        return statistics.median(values), min(values), max(values)

    @property
    def allocator(self) -> tuple[float, float, float] | None:
        return self.spread("allocator")

    @property
    def kernel_mm(self) -> tuple[float, float, float] | None:
        return self.spread("kernel_mm") if self.kernel_visible else None

    def rest(self) -> tuple[float, float, float] | None:
        values = [1 - r.shares.get("allocator", 0) - (r.shares.get("kernel_mm", 0) if self.kernel_visible else 0)
                  for r in self.ok_runs]
        return (statistics.median(values), min(values), max(values)) if values else None

    def plain_values(self, metric: str) -> list[float]:
        """The unprofiled runs' values of a metric (each run's metrics by name), where they have one."""
        return [v for v in (p.get(metric) for p in self.plain) if v]

    def allocator_seconds(self) -> float | None:
        """CPU seconds per run spent in the allocator: its share times the unprofiled runs' CPU time.
        Unlike the share, this compares across variants whose runs take different times."""
        cpu = self.plain_values("cpu_s")
        share = self.allocator
        return share[0] * statistics.median(cpu) if cpu and share else None

    def mean_of(self, pick: Callable[[RunProfile], dict[str, float]]) -> dict[str, float]:
        runs = self.ok_runs
        out: dict[str, float] = {}
        for r in runs:
            for k, v in pick(r).items():
                out[k] = out.get(k, 0.0) + v / len(runs)
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def top_symbols(self, n: int = 5) -> list[tuple[str, float]]:
        return list(self.mean_of(lambda r: r.allocator_symbols).items())[:n]

    def kernel_kinds(self) -> dict[str, float]:
        return self.mean_of(lambda r: r.kernel_mm_kinds)

    def coverage(self) -> float | None:
        """CPU time the samples stand for over the CPU time of the unprofiled runs (medians)."""
        sampled = [r.sampled_s for r in self.ok_runs if r.sampled_s]
        cpu = self.plain_values("cpu_s")
        return statistics.median(sampled) / statistics.median(cpu) if sampled and cpu else None

    def kernel_from_allocator(self) -> float | None:
        values = [r.kernel_mm_from_allocator for r in self.ok_runs if r.kernel_mm_from_allocator is not None]
        return statistics.median(values) if values else None

    def kernel_other_from_allocator(self) -> float | None:
        values = [r.kernel_other_from_allocator for r in self.ok_runs
                  if r.kernel_other_from_allocator is not None]
        return statistics.median(values) if values else None

    def allocator_with_kernel(self) -> tuple[float, float, float] | None:
        """The allocator's code plus every kernel sample entered from it (memory work, lock waits):
        all the CPU the allocator is answerable for. Call graphs only."""
        values = [r.shares.get("allocator", 0) + r.kernel_mm_from_allocator + (r.kernel_other_from_allocator or 0)
                  for r in self.ok_runs if r.kernel_mm_from_allocator is not None]
        return (statistics.median(values), min(values), max(values)) if values else None

    def _medians(self, key: str) -> tuple[float, float] | None:
        prof = [v for v in (getattr(r, key) if key == "metric" else r.wall_s for r in self.ok_runs) if v]
        plain = self.plain_values(self.metric if key == "metric" else "wall_s")
        return (statistics.median(prof), statistics.median(plain)) if prof and plain else None

    def wall_overhead(self) -> float | None:
        """Profiled wall time over unprofiled wall time, minus one (medians, same variant)."""
        m = self._medians("wall_s")
        return m[0] / m[1] - 1 if m else None

    def sampling_overhead(self) -> float | None:
        """The same less perf's own start/stop, which does not slow the program down."""
        m = self._medians("wall_s")
        if not m or self.perf_fixed_s is None:
            return None
        return (m[0] - self.perf_fixed_s) / m[1] - 1

    def throughput_overhead(self) -> float | None:
        """How much slower the program itself said it ran while sampled (its own metric)."""
        m = self._medians("metric") if self.metric else None
        if not m:
            return None
        prof, plain = m
        return plain / prof - 1 if self.metric_higher else prof / plain - 1

    def overhead(self) -> float | None:
        """The best measure of the sampling's cost to the program that this profile has."""
        for o in (self.throughput_overhead(), self.sampling_overhead(), self.wall_overhead()):
            if o is not None:
                return o
        return None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "ProfileSummary":
        summary = cls(**data)
        summary.runs = [RunProfile(**r) for r in summary.runs]
        return summary


def _finish(s: ProfileSummary) -> ProfileSummary:
    """Notes that depend on all runs: failures, few samples, missing symbols."""
    failed = [r for r in s.runs if r.status != "ok" or not r.samples]
    if failed:
        s.notes.append(f"{len(failed)} of {len(s.runs)} profiled runs under {s.variant} gave no profile "
                       f"({failed[0].error or failed[0].status}).")
    ok = s.ok_runs
    if ok and min(r.samples for r in ok) < FEW_SAMPLES:
        s.notes.append(f"Fewer than {FEW_SAMPLES} samples in a run: shares move by whole percents from noise. "
                       f"Run the program longer or raise --frequency.")
    cover = s.coverage()
    if cover is not None and cover < LOW_COVERAGE:
        s.notes.append(
            f"Under {s.variant} the samples stand for {cover:.0%} of the CPU time the program uses unprofiled: "
            f"perf missed part of it (threads that live shorter than the sampling period, "
            f"{1e3 / s.frequency_hz:.1f} ms, are barely sampled), so the shares describe the longer-lived "
            f"threads. Raise --frequency.")
    worst: dict[str, list[float]] = {}
    for r in ok:
        for dso, (share, bad) in r.unresolved.items():
            if bad >= UNRESOLVED_NOTE and share >= 0.01:
                worst[dso] = max(worst.get(dso, [0, 0]), [share, bad])
    for dso, (share, bad) in sorted(worst.items()):
        name = os.path.basename(dso)
        if s.library and _realpath(dso) == _realpath(s.library):
            what = "all of it is still allocator time, but its top symbols show as [unknown]"
        elif _is_glibc(dso):
            what = ("glibc's malloc cannot be told from the rest of libc there, so the allocator share "
                    "is a lower bound")
        else:
            what = "its samples are attributed by shared object only"
        s.notes.append(f"{name} has no symbols for {bad:.0%} of its samples ({share:.1%} of CPU): {what}. "
                       f"Install its debug symbols or use an unstripped build to see functions.")
    return s


# --- storing --------------------------------------------------------------------------------------

def store_profiles(store, exp_id: int, summaries: list[ProfileSummary]) -> None:
    store.save_profiles(exp_id, [(s.workload_idx, s.variant_idx, s.to_dict()) for s in summaries])


def load_profiles(store, exp_id: int) -> list[ProfileSummary]:
    return [ProfileSummary.from_dict(d) for d in store.profiles(exp_id)]


# --- what the experiment's timed runs add: counters, RSS over time ------------------------------------

def counters_of(experiment, workload_idx: int, variant_idx: int) -> dict | None:
    """Medians of the perf stat counters of an experiment's measured runs, with IPC; None without."""
    runs = [r for r in experiment.cell_runs(workload_idx, variant_idx) if r.status == "ok"]
    values: dict[str, list[float]] = {}
    for r in runs:
        m = r.metrics   # a run's values by metric name; a counter the machine lacks is absent
        for k in ("cycles", "instructions", "cache_misses"):
            if m.get(k):
                values.setdefault(k, []).append(m[k])
        cycles, instructions = m.get("cycles"), m.get("instructions")
        if cycles and instructions:
            values.setdefault("ipc", []).append(instructions / cycles)
    return {k: statistics.median(v) for k, v in values.items()} or None


def attach_counters(summaries: list[ProfileSummary], experiment) -> None:
    for s in summaries:
        s.counters = counters_of(experiment, s.workload_idx, s.variant_idx)


def rss_over_time(experiment, workload_idx: int = 0) -> dict[str, list[list[tuple[float, int]]]]:
    """Variant label -> one RSS series per measured run: [(seconds since start, KiB), ...]."""
    out: dict[str, list[list[tuple[float, int]]]] = {}
    for vi, v in enumerate(experiment.variants):
        series = []
        for r in experiment.cell_runs(workload_idx, vi):
            raw = r.rss_series
            points = json.loads(raw) if isinstance(raw, str) else (raw or [])
            series.append([(float(t), int(kb)) for t, kb in points])
        out[v.label] = series
    return out


# --- the headline ---------------------------------------------------------------------------------------

def pct(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f}%"


def spread_text(sp: tuple[float, float, float] | None) -> str:
    if sp is None:
        return "-"
    med, lo, hi = sp
    return f"{pct(med)} ({100 * lo:.1f}-{100 * hi:.1f})"


def headline(summaries: list[ProfileSummary]) -> str:
    """`glibc 8.1% (7.6-8.7) -> tcmalloc 1.2% (1.0-1.5)`: the allocator's share of CPU per variant."""
    return " -> ".join(f"{s.variant} {spread_text(s.allocator)}" for s in summaries)
