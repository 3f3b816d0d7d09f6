"""Allocations per unit of work: what one transaction (one operation, one request) asks of the
allocator, in the fingerprint run of a service.

The interposer's series carries each process's allocation calls and requested bytes so far
(launcher/fingerprint.c, columns 7 and 8; counted from the process's start or fork). The calls
made while the client's measured load ran are the difference of two readings per process, read
on CLOCK_MONOTONIC like the load's window (measure/service/executors.py); divided by the work
done in that window (the primary metric, a rate, times the window's length) they give calls per
transaction. A progress metric's first `skip` intervals are left out of the window as they are
of the metric, so that connection set-up and the first, slower seconds do not count.

The recipe names the unit of work on its primary metric (`work = "transaction"`).

The interposer's per-process file, as read (ProcessFile), is defined here too: the memory series
(measure/fingerprint_memory.py) and the summary (measure/fingerprint.py) read it as well.
"""

from __future__ import annotations

import statistics
from bisect import bisect_right
from dataclasses import dataclass, field

from alloclab.store.fingerprint_model import PerWork, Plain

ALLOC_KINDS = ("malloc", "calloc", "realloc", "memalign", "posix_memalign", "aligned_alloc", "valloc", "new")


@dataclass
class ProcessAllocatorStats(Plain):
    """The allocator's own figures as the process last read them (bytes; -1 where it gives none)."""
    source: str = "none"
    allocated: int = -1
    held: int = -1


@dataclass
class ProcessSampled(Plain):
    """One process's sampled blocks, and their lifetimes by decade from 1 us (freed, still live at exit)."""
    allocs: int = 0
    frees: int = 0
    cross_thread: int = 0
    cross_unknown: int = 0
    realloc_moved: int = 0
    dropped: int = 0
    lifetime_decades_from_1us: list[int] = field(default_factory=lambda: [0] * 9)
    still_live_decades_from_1us: list[int] = field(default_factory=lambda: [0] * 9)


@dataclass
class ProcessFile(Plain):
    """One process's file from the interposer (launcher/fingerprint.c writes it as it exits, and now
    and then before). What an older interposer did not write takes its default."""
    pid: int = 0
    ppid: int = 0
    cmdline: str = ""
    start_ns: int = 0               # CLOCK_MONOTONIC at the process's start (or fork)
    t_ns: int = 0                   # ... when it wrote this file
    final: bool = False             # written as it exited
    calls: dict[str, int] = field(default_factory=dict)   # by kind: malloc, free, ...
    bytes: int = 0
    usable_bytes: int = 0
    big_calls: int = 0
    big_bytes: int = 0
    threads: int = 0
    cpus_allowed: int = 0           # its affinity's CPUs (0: an older interposer)
    hist: list[list[int]] = field(default_factory=list)   # [size class, calls, bytes]
    live: int = 0
    anon_kb: int = 0
    peak_live: int = 0
    allocator_stats: ProcessAllocatorStats = field(default_factory=ProcessAllocatorStats)
    sample_every: int = 0
    sampled: ProcessSampled = field(default_factory=ProcessSampled)
    # Rows of (ms since start, live KiB, RSS KiB, anonymous KiB, the allocator's allocated and held
    # KiB or -1, alloc calls so far, requested bytes so far); an older interposer wrote 4 or 6 columns.
    series: list[list[int]] = field(default_factory=list)
    books: dict | None = None       # the allocator's books (measure/fingerprint_books.py reads them)
    # [ms since start, live KiB, RSS KiB, anonymous KiB] as exit() began, before the atexit handlers
    # and destructors (where an allocator built into the program gives back what it holds).
    at_exit_start: list[int] | None = None

    def __post_init__(self) -> None:
        self.allocator_stats = ProcessAllocatorStats.of(self.allocator_stats) or ProcessAllocatorStats()
        self.sampled = ProcessSampled.of(self.sampled) or ProcessSampled()

    @property
    def alloc_calls(self) -> int:
        return sum(self.calls.get(k, 0) for k in ALLOC_KINDS)


def _track(p: ProcessFile) -> list[tuple[int, int, int]] | None:
    """(monotonic ns, calls so far, requested bytes so far) of one process; None from an older
    interposer whose series has no such columns."""
    rows = p.series
    if rows and len(rows[0]) < 8:
        return None
    start = p.start_ns
    pts = [(start, 0, 0)] + [(start + row[0] * 1_000_000, row[6], row[7]) for row in rows]
    if p.final:
        pts.append((max(p.t_ns, pts[-1][0]), p.alloc_calls, p.bytes))
    return pts


def _at(pts: list[tuple[int, int, int]], t: int) -> tuple[float, float]:
    """The counts at time t, linear between readings; a process's counts stay at their last
    reading after it (a process that exited, or wrote its last file then)."""
    times = [pt[0] for pt in pts]
    i = bisect_right(times, t)
    if i == 0:
        return 0.0, 0.0
    if i == len(pts):
        return float(pts[-1][1]), float(pts[-1][2])
    (t0, c0, b0), (t1, c1, b1) = pts[i - 1], pts[i]
    f = (t - t0) / (t1 - t0) if t1 > t0 else 1.0
    return c0 + f * (c1 - c0), b0 + f * (b1 - b0)


def counts_at(procs: list[ProcessFile | dict], times_ns: list[int]) -> list[tuple[float, float]] | None:
    """The whole tree's allocation calls and requested bytes so far at each monotonic time (each
    process's track read once for all of them); None from an older interposer."""
    tracks = [_track(ProcessFile.of(p)) for p in procs]
    if any(pts is None for pts in tracks):
        return None
    out = []
    for t in times_ns:
        at = [_at(pts, t) for pts in tracks]
        out.append((sum(c for c, _ in at), sum(b for _, b in at)))
    return out


def calls_between(procs: list[ProcessFile | dict], a_ns: int, b_ns: int) -> tuple[float, float] | None:
    """Allocation calls and requested bytes of the whole tree between two monotonic times."""
    counts = counts_at(procs, [a_ns, b_ns])
    if counts is None:
        return None
    (ca, ba), (cb, bb) = counts
    return cb - ca, bb - ba


def per_work(procs: list[ProcessFile | dict], values: dict | None, metrics) -> dict | None:
    """work_of's figures as stored: {"work", "metric", "rate", "window_s", "calls", "bytes",
    "calls_in_window", "median_of"}, or None."""
    work = work_of(procs, values, metrics)
    return work.to_dict() if work is not None else None


def work_of(procs: list[ProcessFile | dict], values: dict | None, metrics) -> PerWork | None:
    """Allocation calls and bytes per unit of the primary metric's work, or None where the recipe
    names no work, the run measured no rate or the interposer kept no counts.

    With three or more steady progress intervals the figures are the median over those intervals
    of each one's calls over its own work (the intervals taken as even slices of the client's
    window, as the skip is): a second in which the server did something else as well (a cache
    rebuilt, a checkpoint, the machine taken away and the rate halved) does not move the
    demand per transaction. With fewer, they are the whole window's calls over its work."""
    spec = next((m for m in metrics if m.primary and getattr(m, "work", None)), None)
    values = values or {}
    window = values.get("load_window_monotonic_s")
    rate = values.get(spec.name) if spec else None
    if spec is None or not window or not rate or rate <= 0:
        return None
    start, end = window
    seen = list((values.get("intervals") or {}).get(spec.name) or []) if spec.progress else []
    slices = []
    if len(seen) > spec.skip:
        step = (end - start) / len(seen)
        slices = [(start + k * step, start + (k + 1) * step, v) for k, v in enumerate(seen) if k >= spec.skip]
        start = slices[0][0]
    counts = counts_at(procs, [int(t * 1e9) for t in [start] + [b for _, b, _ in slices] + [end]])
    if counts is None or end <= start:
        return None
    work = rate * (end - start)
    in_window = counts[-1][0] - counts[0][0]
    calls, nbytes = in_window / work, (counts[-1][1] - counts[0][1]) / work
    ratios = [((c1 - c0) / (v * (b - a)), (b1 - b0) / (v * (b - a)))
              for (a, b, v), (c0, b0), (c1, b1) in zip(slices, counts, counts[1:]) if v > 0]
    median_of = len(ratios) if len(ratios) >= 3 else 0
    if median_of:
        calls = statistics.median(r[0] for r in ratios)
        nbytes = statistics.median(r[1] for r in ratios)
    return PerWork(spec.work, spec.name, rate, round(end - start, 3), calls, nbytes, round(in_window), median_of)
