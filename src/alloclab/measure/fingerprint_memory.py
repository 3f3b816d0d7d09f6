"""Live bytes against RSS in the fingerprint run (measure/fingerprint.py reads the per-process
files; this merges their memory series): the program's live bytes, the tree's RSS and anonymous
RSS, and the allocator's own figures where it reports them, summed over the processes of a tree;
read at the end of each memory phase of a server."""

from __future__ import annotations

import json
from dataclasses import dataclass

from alloclab.catalog.allocators import load_catalog
from alloclab.measure.fingerprint_work import ProcessFile
from alloclab.store.fingerprint_model import AllocatorAt, AllocatorFigures, Memory, MemPoint, OwnPoint, Phase, Plain


# An exit cleanup smaller than this is a few pages any exit path touches, not an allocator's cleanup.
CLEANUP_MIN_KB = 4096
CLEANUP_MIN_SHARE = 0.1


def exit_cleanup_kb(p: ProcessFile) -> int:
    """What the process gave back between exit()'s start and its final reading (KiB), where that is an
    allocator's cleanup worth a line; 0 otherwise."""
    if not (p.final and p.at_exit_start and p.series):
        return 0
    given = p.at_exit_start[3] - p.series[-1][3]
    return given if given >= max(CLEANUP_MIN_KB, CLEANUP_MIN_SHARE * p.at_exit_start[3]) else 0


def _rows(p: ProcessFile) -> list[list[int]]:
    """The process's series, its final reading replaced by the one as exit began where an exit cleanup
    came between: what the program held at its end, not what its allocator left after tearing down."""
    if not exit_cleanup_kb(p):
        return p.series
    last, (_, live, rss, anon) = p.series[-1], p.at_exit_start
    return p.series[:-1] + [[last[0], live, rss, anon, *last[4:]]]


def before_exit_cleanup(fp, procs: list[ProcessFile]) -> None:
    """Where an allocator built into the program gave back memory after exit() began (the series' end
    already reads from before it: fingerprint_memory._rows), the end split counts what it gave back
    as maps of the program's own beside the booked allocator's, so that its parts add up to the end
    reading."""
    given = sum(exit_cleanup_kb(p) for p in procs)
    if not given or fp.memory is None:
        return
    fp.memory.exit_cleanup_kb = given
    for sp in (fp.books.splits if fp.books else []):
        if sp.at == "end":
            sp.anon += given * 1024
            sp.parts["other"] = sp.parts.get("other", 0) + given * 1024
            sp.other_parts["own_maps"] = sp.other_parts.get("own_maps", 0) + given * 1024


def _merged_series(procs: list[ProcessFile], points: int = 400) -> list[tuple]:
    """(seconds since the first process started, live KiB, RSS KiB, anonymous RSS KiB, allocator's
    allocated KiB, allocator's held KiB) of the whole tree: each process's last reading held until
    its last write, summed over the processes. The allocator's figures (columns 5-6 of a process's
    series, -1 where it reports none; absent in files of an older interposer) are summed over the
    processes that report them, None where none does."""
    tracks = []
    for p in procs:
        pts = [(p.start_ns + row[0] * 1_000_000, *row[1:4],
                *(v if v >= 0 else None for v in (list(row[4:6]) + [-1, -1])[:2]))
               for row in _rows(p)]
        if pts:
            tracks.append((pts, max(p.t_ns, pts[-1][0])))
    if not tracks:
        return []
    t0 = min(pts[0][0] for pts, _ in tracks)
    t1 = max(end for _, end in tracks)
    step = max((t1 - t0) // points, 1)
    out = []
    for t in range(t0, t1 + step, step):
        live = rss = anon = 0
        alloc = held = None
        for pts, end in tracks:
            if t < pts[0][0] or t > end + step:
                continue
            last = pts[0]
            for pt in pts:          # few points per process: a scan is simpler than bisect here
                if pt[0] > t:
                    break
                last = pt
            live, rss, anon = live + last[1], rss + last[2], anon + last[3]
            if last[4] is not None:
                alloc = (alloc or 0) + last[4]
            if last[5] is not None:
                held = (held or 0) + last[5]
        out.append((round((t - t0) / 1e9, 3), live, rss, anon, alloc, held))
    return out


def sample_times(procs: list[ProcessFile], t0_monotonic_s: float | None) -> list[float] | None:
    """Every process's own sample times in seconds on the merged series' clock (None without one)."""
    if t0_monotonic_s is None:
        return None
    return [(p.start_ns + row[0] * 1_000_000) / 1e9 - t0_monotonic_s for p in procs for row in _rows(p)]


def allocator_figures(series6: list[tuple], sources: list[str], memory: Memory | None) -> AllocatorFigures:
    """The allocator's own count of allocated and held bytes, read at the same instants as our live
    bytes and RSS, at the peak of live bytes and at the end."""
    # What the allocator's own figures are (the interposer reads them in the process): the catalog's books.
    books = load_catalog().sampled(sources[0]) if len(sources) == 1 else None
    what = books.sampled if books is not None else (None, None)
    out = AllocatorFigures(", ".join(sources), *what, series=[OwnPoint(pt[0], pt[4], pt[5]) for pt in series6])
    if memory:
        peak = max(series6, key=lambda pt: pt[1])
        end = series6[-1]
        out.at_peak_live, out.at_end = AllocatorAt(peak[1], peak[4], peak[5]), AllocatorAt(end[1], end[4], end[5])
    return out


@dataclass
class PhaseTimes(Plain):
    """A memory phase as the service's summary line gives it (measure/service/executors.py): its
    start and end in seconds since the server started, and its end on CLOCK_MONOTONIC where known."""
    name: str = ""
    t_start: float = 0.0
    t_end: float = 0.0
    end_monotonic_s: float | None = None


def phase_memory(series: list[tuple[float, int, int, int]], stdout: str,
                 allocator_series: list[tuple] | None = None, t0_monotonic_s: float | None = None,
                 sampled_at: list[float] | None = None) -> list[dict]:
    """phases_at's readings as stored."""
    return [ph.to_dict() for ph in phases_at(series, stdout, allocator_series, t0_monotonic_s, sampled_at)]


def phases_at(series: list[tuple[float, int, int, int]], stdout: str,
              allocator_series: list[tuple] | None = None, t0_monotonic_s: float | None = None,
              sampled_at: list[float] | None = None) -> list[Phase]:
    """Live bytes beside anonymous RSS at the end of the load and of each memory phase of a service
    run (the phases' times, in seconds since the server started, are in the run's summary line;
    the series counts from the server's first process): what the program still holds against
    what its allocator keeps, e.g. after FLUSHALL. A phase no process sampled between its action's
    start and its end (`sampled_at`: the processes' own sample times on the series' clock) has no
    reading: the series' last value before it is what the phase before it left."""
    phases = []
    for line in reversed(stdout.splitlines()):
        if line.startswith('{"alloclab"'):
            try:
                values = json.loads(line)["alloclab"]
            except (ValueError, KeyError):
                continue
            # Each phase's end on the series' clock: exactly where both are CLOCK_MONOTONIC; else
            # the server's start stands for the series' time 0 (its first process starts a little
            # later, so the reading may fall just into the next phase).
            times = [PhaseTimes.from_dict(p) for p in values.get("phases") or []]
            phases = [(p.name, p.end_monotonic_s - t0_monotonic_s
                       if t0_monotonic_s is not None and p.end_monotonic_s is not None else float(p.t_end),
                       values.get(f"rss_after_{p.name}_mb"), p.t_end - p.t_start) for p in times]
            break
    out = []
    for name, t_end, rss_mb, length in phases:
        at = [pt for pt in series if pt[0] <= t_end]
        if not at or (sampled_at is not None and not any(t_end - length < t <= t_end for t in sampled_at)):
            continue
        last = MemPoint(*at[-1][:4])
        live, anon = last.live_kb, last.anon_kb
        own = [OwnPoint(*pt) for pt in allocator_series or [] if pt[0] <= t_end]
        out.append(Phase(name, round(t_end, 3), live, anon, anon - live,
                         round(rss_mb * 1024) if rss_mb is not None else None,
                         AllocatorAt(live, own[-1].allocated_kb, own[-1].held_kb) if own else None))
    return out
