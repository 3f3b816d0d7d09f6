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
"""

from __future__ import annotations

from bisect import bisect_right

ALLOC_KINDS = ("malloc", "calloc", "realloc", "memalign", "posix_memalign", "aligned_alloc", "valloc", "new")


def _track(p: dict) -> list[tuple[int, int, int]] | None:
    """(monotonic ns, calls so far, requested bytes so far) of one process; None from an older
    interposer whose series has no such columns."""
    rows = p.get("series") or []
    if rows and len(rows[0]) < 8:
        return None
    start = p["start_ns"]
    pts = [(start, 0, 0)] + [(start + row[0] * 1_000_000, row[6], row[7]) for row in rows]
    if p.get("final"):
        calls = sum(p["calls"].get(k, 0) for k in ALLOC_KINDS)
        pts.append((max(p["t_ns"], pts[-1][0]), calls, p.get("bytes", 0)))
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


def calls_between(procs: list[dict], a_ns: int, b_ns: int) -> tuple[float, float] | None:
    """Allocation calls and requested bytes of the whole tree between two monotonic times."""
    calls = nbytes = 0.0
    for p in procs:
        pts = _track(p)
        if pts is None:
            return None
        (ca, ba), (cb, bb) = _at(pts, a_ns), _at(pts, b_ns)
        calls, nbytes = calls + cb - ca, nbytes + bb - ba
    return calls, nbytes


def per_work(procs: list[dict], values: dict | None, metrics) -> dict | None:
    """{"work", "metric", "rate", "window_s", "calls", "bytes", "calls_in_window"} per unit of the
    primary metric's work, or None where the recipe names no work, the run measured no rate or
    the interposer kept no counts."""
    spec = next((m for m in metrics if m.primary and getattr(m, "work", None)), None)
    values = values or {}
    window = values.get("load_window_monotonic_s")
    rate = values.get(spec.name) if spec else None
    if spec is None or not window or not rate or rate <= 0:
        return None
    start, end = window
    seen = len((values.get("intervals") or {}).get(spec.name) or [])
    if spec.progress and seen > spec.skip:
        start = end - (end - start) * (seen - spec.skip) / seen
    counted = calls_between(procs, int(start * 1e9), int(end * 1e9))
    if counted is None or end <= start:
        return None
    work = rate * (end - start)
    return {"work": spec.work, "metric": spec.name, "rate": rate, "window_s": round(end - start, 3),
            "calls": counted[0] / work, "bytes": counted[1] / work, "calls_in_window": round(counted[0])}
