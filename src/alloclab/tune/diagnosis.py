"""From fingerprints to readings: what the program asks of each allocator and what that allocator
does about it, reduced to the named figures tune's rules read (catalog/tune_rules.toml).

In: the fingerprints of the diagnosed workloads under the plain allocators (measure/fingerprint.py;
store/fingerprint_model.py's Fingerprint, or the stored dicts).
Out: a Reading per allocator, each a set of named numbers (bytes, per second, per unit of work).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from alloclab.store.fingerprint_model import Fingerprint, Memory, MemorySplit, SizeClass
from alloclab.workloads.metrics import END_ANON as END_METRIC   # a command's anonymous RSS as it exits

BIG = 128 * 1024
PAGE = 4096


@dataclass(frozen=True)
class Reading:
    """One allocator's fingerprint, as the rules read it. `values` holds every named figure; a
    figure the fingerprint could not give (no system-call counts, no work unit) is absent."""
    allocator: str
    label: str
    values: dict[str, float] = field(default_factory=dict, hash=False)
    per: str = "second"            # the unit the per-unit figures use: a recipe's work, else the run
    held_where: str = "after a phase"
    rest_where: str = "at its end"  # where the program holds what it no longer needs: the split read there
    rest_metric: str = END_METRIC   # the timed metric that shows that memory
    words: dict[str, str] = field(default_factory=dict, hash=False)   # figures in words, for the sentences

    def get(self, name: str) -> float | None:
        return self.values.get(name)


def _big_block(hist: list[SizeClass]) -> float | None:
    """The upper edge of the power-of-two size class at or above 128 KiB that carries most bytes."""
    big = [(h.bytes, h.size_class) for h in hist if h.calls and (1 << max(h.size_class - 1, 0)) >= BIG]
    if not big:
        return None
    _, c = max(big)
    return float(1 << c)


def _small_share(hist: list[SizeClass]) -> float | None:
    """The share of allocation calls of at most 1 KiB (the power-of-two classes up to [512, 1024)),
    the requests glibc's per-thread cache can serve."""
    total = sum(h.calls for h in hist)
    if not total:
        return None
    return sum(h.calls for h in hist if (1 << h.size_class) <= 1024) / total


def _held(fp: Fingerprint) -> tuple[float | None, float | None, str]:
    """The most memory held beyond the live bytes after a memory phase of a service (after FLUSHALL,
    after the clients disconnect), with its share of the anonymous RSS there and which phase: what a
    server keeps between loads. A command's end is not such a phase: the process exits."""
    spots = [(ph.overhead_kb, ph.anon_kb, f"after {ph.name}") for ph in fp.phases]
    if not spots:
        return None, None, "after a phase"
    kb, anon, where = max(spots, key=lambda s: s[0])
    return kb * 1024.0, (kb / anon if anon else None), where


def _rest(fp: Fingerprint) -> tuple[MemorySplit | None, str, str]:
    """The split where the program holds memory it no longer needs: after the memory phase of a
    server where the allocator holds the most free, else the command's end; with where it is in
    words and the timed metric that shows it."""
    books = fp.books
    if books is None:
        return None, "at its end", END_METRIC
    phases = [sp for sp in books.splits if sp.at.startswith("after ")]
    if phases:
        sp = max(phases, key=lambda x: x.free)
        return sp, sp.at, f"rss_after_{sp.at[len('after '):]}_mb"
    given = fp.memory.exit_cleanup_kb if fp.memory is not None else None
    where = f"at its end (as exit began, before its allocator's exit cleanup gave back {size_text(given * 1024)})" \
        if given else "at its end"
    return books.at("end"), where, END_METRIC


def rest_values(sp: MemorySplit | None, hist: list[SizeClass]) -> dict[str, float | None]:
    """The split's parts as readings (rest_*), and glibc's thresholds and arenas as they stood."""
    if sp is None:
        return {}
    v: dict[str, float | None] = {f"rest_{k}": float(x) for k, x in sp.parts.items()}
    # rest_free_unsized: free inside that no fixed mmap threshold keeps out (an inspection takes off
    # the free chunks of one size of 64 KiB and more: free_chunk_values); a fingerprint's is all of it.
    v |= {"rest_anon": float(sp.anon), "rest_free": float(sp.free),
          "rest_free_unsized": float(sp.parts.get("free_inside", 0)),
          "rest_free_inside_share": sp.parts.get("free_inside", 0) / sp.anon if sp.anon > 0 else None}
    b = sp.books
    for k in ("trim_threshold", "mmap_threshold", "thresholds_fixed", "raised_by", "arenas"):
        if k in b:
            v[k] = float(b[k])
    if "arena_free" in b and sp.parts:
        v["rest_arena_free"] = float(min(b["arena_free"], sp.parts.get("free_top", 0) + sp.parts.get("free_inside", 0)))
    if "trim_threshold" in b and sp.parts.get("free_top"):
        v["trim_over_top"] = b["trim_threshold"] / sp.parts["free_top"]
    # Each thread arena's top, where the books give them one by one (an inspection's walk): glibc
    # weighs each top against the trim threshold at a free in its arena, so the largest below it
    # means every one is kept.
    if "arena_top" in b:
        v["rest_arena_top"] = float(min(b["arena_top"], sp.parts.get("free_top", 0)))
        v |= {k: float(b[k]) for k in ("arena_tops", "arena_top_max", "arena_top_min") if k in b}
        if "trim_threshold" in b and b.get("arena_top_max"):
            v["trim_over_arena_top"] = b["trim_threshold"] / b["arena_top_max"]
    if "mmap_default" in b:
        v["mmap_default"] = float(b["mmap_default"])
    # Blocks at or above 128 KiB asked below the mmap threshold as it stood: glibc served them from
    # its heap, as it does no block under its default threshold. A size class (2^(c-1), 2^c] counts
    # where it starts below the threshold: a threshold raised by a freed block sits between powers of
    # two (31 MiB), and the heap's 16-17 MiB buffers share a class with blocks up to 32 MiB.
    threshold = b.get("mmap_threshold")
    if threshold and threshold > BIG:
        below = [h for h in hist if h.calls and (1 << max(h.size_class - 1, 0)) >= BIG
                 and (1 << (h.size_class - 1)) < threshold]
        if below:
            v["heap_big_bytes"] = float(sum(h.bytes for h in below))
            v["heap_big_min"] = float(min(1 << (h.size_class - 1) for h in below))
    return v


def hist_of_chunks(rows: list[dict]) -> list[SizeClass]:
    """An inspection's chunks, free and in use, as the request histogram a fingerprint counts: the
    chunks a heap holds are the requests it served that are still there (a chunk's size is its
    request's plus a header, rounded to 16), which is what a snapshot has of them."""
    return [SizeClass(r["class"], "", r["free"] + r["used"], r["free_bytes"] + r["used_bytes"])
            for r in rows if r["free"] + r["used"]]


BIG_FREE = 64 * 1024   # below this a fixed mmap threshold would map the small blocks most programs make


def free_chunk_values(rows: list[dict], sp: MemorySplit | None) -> dict[str, float]:
    """The free chunks between live ones that sit in one size class of 64 KiB and more (the class
    that carries the most of their bytes), as readings: what a fixed mmap threshold below that size
    would have kept out of the heap. Their bytes are the class's and every larger one's, resident in
    the share the free chunks' resident bytes hold of their address space."""
    big = [r for r in rows if r["free"] and (1 << (r["class"] - 1)) >= BIG_FREE]
    if not big or sp is None:
        return {}
    top = max(big, key=lambda r: r["free_bytes"])
    above = [r for r in rows if r["class"] >= top["class"]]
    free_booked = sum(r["free_bytes"] for r in rows)
    booked = sum(r["free_bytes"] for r in above)
    resident = sp.parts.get("free_inside", 0) * booked / free_booked if free_booked else 0.0
    big_resident = float(min(resident, booked))
    return {"rest_free_big": big_resident, "free_big_min": float(top["free_min"]),
            "rest_free_unsized": max(0.0, sp.parts.get("free_inside", 0) - big_resident),
            "free_big_count": float(sum(r["free"] for r in above)),
            "free_big_share": booked / free_booked if free_booked else 0.0,
            "free_big_pages": float(-(-top["free_min"] // PAGE)),
            "live_big_count": float(sum(r["used"] for r in above))} | (
        {"mmap_over_free_big": sp.books["mmap_threshold"] / top["free_min"]} if "mmap_threshold" in sp.books else {})


def arena_fit(v: dict[str, float]) -> dict[str, float]:
    """The arenas to keep: half those in use, and no more than the CPUs the process may use (more
    threads than CPUs never run at once, so more arenas than CPUs only keep more free memory apart)."""
    if "arenas" not in v or "cpus" not in v:
        return {}
    return {"arenas_to_keep": float(max(1, min(int(v["arenas"] * 0.5), int(v["cpus"]))))}


def _known(**figures: float | None) -> dict[str, float]:
    """The figures the fingerprint gave, as floats; one it could not give (None) is left out."""
    return {name: float(x) for name, x in figures.items() if x is not None}


def _kib(kb: float | None) -> float | None:
    return None if kb is None else kb * 1024.0


def _share(part: float | None, whole: float | None) -> float | None:
    """part / whole, where the whole is known and not zero."""
    return part / whole if whole and part is not None else None


def reading(allocator: str, label: str, fp: Fingerprint | dict, cpus: int | None = None) -> Reading:
    """The named figures of one fingerprint (measure/fingerprint.py's; stored dicts are read as one)."""
    fp = Fingerprint.of(fp)
    wall = fp.wall_s or None
    v = _known(cpus=cpus or fp.cpus or os.cpu_count() or 1, threads=fp.threads or 0, allocs=fp.allocs or 0,
               allocs_per_s=fp.allocs_per_s, cross_thread_share=fp.cross_thread_share)
    mem = fp.memory or Memory()
    peak_live = _kib(mem.peak_live_kb)
    v |= _known(peak_live=peak_live, end_live=_kib(mem.end_live_kb),
                overhead_peak=_kib(mem.overhead_at_peak_kb), overhead_end=_kib(mem.overhead_at_end_kb),
                peak_anon=_kib(mem.peak_anon_kb),
                overhead_end_share=_share(mem.overhead_at_end_kb, mem.end_anon_kb),
                overhead_peak_share=_share(mem.overhead_at_peak_kb, mem.anon_at_peak_live_kb))
    if fp.series:   # (t, live KiB, RSS KiB, anonymous KiB) every 20 ms
        most = max(fp.series, key=lambda pt: pt.anon_kb - pt.live_kb)
        gap = most.anon_kb - most.live_kb
        v |= _known(overhead_most=gap * 1024.0, overhead_most_share=gap / most.anon_kb if most.anon_kb > 0 else None)
    held, share, where = _held(fp)
    big_bytes = float(fp.big_bytes or 0)
    # Turnover: how many times over its most live memory the program asked for it again. A churn
    # maps (or purges) the same memory again and again; one big buffer asked once (sort's) is 1.
    v |= _known(held_after_phase=held, held_after_phase_share=share,
                big_block=_big_block(fp.hist), small_share=_small_share(fp.hist), big_bytes_per_s=big_bytes / wall if wall else None,
                big_turnover=_share(big_bytes, peak_live))
    calls = fp.syscalls or {}
    v |= {f"{key}_calls": float(calls[key]) for key in ("brk", "mmap", "munmap", "madvise") if key in calls}
    per, units = _units(fp)
    words: dict[str, str] = {}
    if fp.syscall_bytes is not None:
        moved = fp.syscall_bytes
        grown, brk_trimmed = float(moved.brk_grown), float(moved.brk_shrunk)
        unmapped, released = float(moved.munmap), float(moved.madvise_released)
        # What the allocator gave back to regrow in place: glibc's main heap with brk, a thread's
        # arena with madvise (catalog: trims_with). An arena grows with mprotect, which moves no
        # page: its regrowth shows in the page faults, not in any call's bytes.
        arena_trimmed = released if "madvise" in _trims_with(allocator) else 0.0
        trimmed = brk_trimmed + arena_trimmed
        refault = min(1.0, fp.minflt * PAGE / trimmed) if fp.minflt is not None and trimmed else None
        # The heap given back and regrown in one unit of work: the run's bytes trimmed per allocation
        # call, times the calls of one unit in the client's measured window (the run's calls include
        # the server's start and the warm-up, whose transactions the window does not count: the
        # whole run over the window's units read 67 MiB a PostgreSQL transaction, 2.4 times its
        # heap's real swing). Without a unit, one cycle of the heap, at most the most ever live.
        pw = fp.per_work
        if units and pw is not None and pw.calls and fp.allocs:
            swing = trimmed / fp.allocs * pw.calls
        else:
            swing = trimmed / units if units else min(trimmed, trimmed if peak_live is None else peak_live)
        v |= _known(trim_bytes=trimmed, brk_trim_bytes=brk_trimmed, arena_trim_bytes=arena_trimmed,
                    munmap_bytes=unmapped, madvise_bytes=released,
                    trim_share=brk_trimmed / grown if grown else None,
                    # Over the most ever resident, not live: threads' arenas each keep what they
                    # freed, and 16 arenas trimmed once each give back 16 times the most live.
                    trim_turnover=_share(trimmed, _kib(mem.peak_anon_kb) or peak_live),
                    # Pages faulted in per page trimmed, at most 1: the trimmed heap regrown.
                    trim_refault_share=refault,
                    trim_regrown_share=_regrown(brk_trimmed, grown, arena_trimmed, refault),
                    big_unmapped_share=unmapped / big_bytes if big_bytes else None,
                    trim_bytes_per_s=trimmed / wall if wall else None,
                    mmap_churn_bytes_per_s=unmapped / wall if wall else None,
                    madvise_bytes_per_s=released / wall if wall else None,
                    madvise_turnover=_share(released, peak_live),
                    heap_swing=swing if units or trimmed else None)
        words["trim_how"] = _trim_how(v)
    if fp.minflt is not None:
        v["faults"] = float(fp.minflt)
        # Pages faulted in per page of the most ever anonymous: about 1 where a large heap is touched
        # once, page by page (what huge pages spare), far above 1 where it is given back and regrown.
        v |= _known(faults_per_s=fp.minflt / wall if wall else None,
                    faults_per_page=_share(fp.minflt * PAGE, _kib(mem.peak_anon_kb)))
    v |= _known(thp_madvise=_thp_madvise())
    rest, rest_where, rest_metric = _rest(fp)
    v |= _known(**rest_values(rest, fp.hist))
    v |= arena_fit(v)
    return Reading(allocator, label, v, per, where, rest_where, rest_metric, words)


def _thp_madvise() -> float | None:
    """1 where transparent huge pages are given on request only (`madvise`, which glibc's hugetlb=1
    makes for its heap), 0 where the kernel gives them always or never (the tunable changes nothing)."""
    try:
        mode = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return None
    return 1.0 if "[madvise]" in mode else 0.0


def _regrown(brk_trimmed: float, brk_grown: float, arena_trimmed: float, refault: float | None) -> float | None:
    """The share of the trimmed heap that grew back, weighed by where it was trimmed: the main heap's
    by brk's own growth (a heap that grew at least as much as it gave back regrew it), a thread
    arena's by the page faults (it grows with mprotect, which no call's bytes show)."""
    trimmed = brk_trimmed + arena_trimmed
    if not trimmed:
        return None
    brk_part = min(1.0, brk_grown / brk_trimmed) if brk_trimmed else 0.0
    if arena_trimmed and refault is None:
        return None
    return (brk_trimmed * brk_part + arena_trimmed * (refault or 0.0)) / trimmed


def _trims_with(allocator: str) -> tuple[str, ...]:
    from alloclab.catalog.allocators import load_catalog

    a = load_catalog().allocators.get(allocator)
    return a.trims_with if a is not None else ("brk",)


def _trim_how(v: dict[str, float]) -> str:
    """Where the trimmed heap was given back, in words: '27,832 brk calls', 'its threads' arenas
    trimmed with madvise: 79,998 calls', or both."""
    parts = []
    if v.get("brk_trim_bytes"):
        parts.append(f"{v.get('brk_calls', 0):,.0f} brk calls")
    if v.get("arena_trim_bytes"):
        parts.append(f"its threads' arenas trimmed with madvise: {v.get('madvise_calls', 0):,.0f} calls")
    return "; ".join(parts)


def merged(parts: list[Reading]) -> Reading:
    """One allocator's readings of several workloads (a recipe's load and its memory phases) as one:
    each figure at its largest, since a rule should fire where any workload shows its mechanism and
    a value sized from it should cover the largest. The unit of work is the first workload's; where
    memory is held, the workload that held the most."""
    first = parts[0]
    values: dict[str, float] = {}
    for r in parts:
        for k, x in r.values.items():
            values[k] = max(values.get(k, x), x)
    held = max((r for r in parts if r.get("held_after_phase") is not None), key=lambda r: r.get("held_after_phase"),
               default=first)
    rest = max((r for r in parts if r.get("rest_free") is not None), key=lambda r: r.get("rest_free"), default=first)
    words = {k: t for r in reversed(parts) for k, t in r.words.items() if t}
    return Reading(first.allocator, first.label, values, first.per, held.held_where, rest.rest_where, rest.rest_metric,
                   words)


def _units(fp: Fingerprint) -> tuple[str, float | None]:
    """The work unit and how much of it the fingerprint run measured: a recipe's transactions in the
    client's measured window, or none for a command."""
    pw = fp.per_work
    if not pw or not pw.rate or not pw.window_s:
        return "cycle of the heap", None
    return pw.work, pw.rate * pw.window_s


def size_text(n: float) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= div:
            return f"{n / div:.3g} {unit}"
    return f"{n:.0f} B"


def value_text(name: str, value: float) -> str:
    """A reading as a sentence shows it."""
    if name.endswith("_turnover"):
        return f"{value:.1f}x the most live"
    if name.endswith("_share"):
        return f"{value * 100:.0f}%"
    if name.endswith("_per_s") and "bytes" in name:
        return size_text(value)
    if name in ("heap_swing", "big_block", "trim_bytes", "brk_trim_bytes", "arena_trim_bytes", "munmap_bytes", "madvise_bytes", "overhead_end",
                "overhead_peak", "overhead_most", "end_live", "peak_live", "peak_anon", "held_after_phase",
                "trim_threshold", "mmap_threshold", "raised_by", "heap_big_bytes", "heap_big_min", "arena_top_max",
                "arena_top_min", "mmap_default", "free_big_min") \
            or name.startswith("rest_"):
        return size_text(value)
    return f"{value:,.0f}"
