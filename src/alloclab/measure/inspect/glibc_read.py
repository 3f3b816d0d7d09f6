"""Reading glibc's heaps in a running process: its state in one short stop (main_arena, mp_, the
arenas and their heaps, the threads' tcache pointers), then the cached chunks' lists and the heaps
themselves in bounded slices, the process running between them.

The state and the slices are read at different moments of a process that keeps running: whatever
changed in between fails a check (walk.py, arena.py) and is counted as unread, never guessed."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from alloclab.catalog.glibc_layout import GlibcLayout
from alloclab.measure.inspect import arena as ar
from alloclab.measure.inspect import mapped as mp
from alloclab.measure.inspect.libc import Libc
from alloclab.measure.inspect.memory import PAGE, PRESENT, Memory, Unreadable
from alloclab.measure.inspect.pacing import SLICE_BYTES, SLICE_S, Pacer
from alloclab.measure.inspect.procfs import Mapping
from alloclab.measure.inspect.ptrace import Freezer
from alloclab.measure.inspect.tls import thread_vars
from alloclab.measure.inspect.walk import HeapWalk


class NotGlibcHeap(Exception):
    """main_arena could not be found: the walk cannot start (the caller falls back to smaps)."""


@dataclass
class HeapRegion:
    lo: int                   # the mapping the heap is in (residency is counted over it)
    hi: int
    walk: HeapWalk | None
    present: np.ndarray | None = None    # per page of [lo, hi), from pagemap
    overhead: int = 0          # heap_info, and the arena itself in an arena's first heap


@dataclass
class ArenaRead:
    arena: ar.Arena
    heaps: list[HeapRegion] = field(default_factory=list)
    threads: list[int] = field(default_factory=list)


@dataclass
class GlibcState:
    main_at: int
    main_by: str
    mp_at: int | None
    params: ar.Params | None
    arenas: list[ArenaRead]
    cached: ar.Cached
    tcache_by: str
    mapped: mp.Mapped
    sps: list[int]
    stopped: bool
    bss: dict[int, tuple[int, int]] = field(default_factory=dict)


def _align_chunk(at: int, alignment: int) -> int:
    """glibc's first chunk in a region: moved up until its user pointer (at + 16) is aligned."""
    mis = (at + 16) % alignment
    return at + (alignment - mis if mis else 0)


def _page_up(at: int) -> int:
    return (at + PAGE - 1) & ~(PAGE - 1)


def _candidates(layout: GlibcLayout, libc: Libc, mem: Memory, heap: Mapping | None) -> tuple[list, list, str]:
    """Where main_arena and mp_ may be (the debug symbols' address, else what their content
    suggests), read before any stop: a search by content takes tens of milliseconds. The choice is
    made in the stop (_choose), where the bins checked do not move."""
    data_regions = [(m.lo, m.hi, mem.read(m.lo, m.size)) for m in libc.writable()]
    heap_start = heap.lo if heap is not None else None
    mains = [libc.symbols["main_arena"]] if "main_arena" in libc.symbols else []
    mps = [libc.symbols["mp_"]] if "mp_" in libc.symbols else []
    by = f"debug symbols ({libc.symbols_from})" if mains else "content (no debug symbols)"
    content_mains = [a for lo, hi, data in data_regions for a in ar.main_arena_candidates(layout, (lo, hi), data)]
    content_mps = [a for lo, hi, data in data_regions for a in [ar.find_mp(layout, (lo, hi), data, heap_start)] if a]
    return [(a, by) for a in mains] + [(a, "content (the symbols did not check out)" if mains else by)
                                       for a in content_mains if a not in mains], mps + content_mps, by


def _choose(layout: GlibcLayout, mem: Memory, heap: Mapping | None, mains: list, mps: list) -> tuple[int, str, int | None]:
    """In the stop: the first candidate main_arena whose every bin checks out, and mp_."""
    found = [(a, by) for a, by in mains
             if ar.bins_back_home(layout, mem, a, mem.read(a, layout.size("malloc_state"))) == layout.nbins - 1]
    symbol = [f for f in found if f[1].startswith("debug symbols")]
    if not symbol and len(found) != 1:
        raise NotGlibcHeap()
    main, by = (symbol or found)[0]
    heap_start = heap.lo if heap is not None else None
    mp_at = next((a for a in mps if ar.plausible_params(layout, ar.params(layout, mem.read(a, layout.size("malloc_par"))),
                                                        heap_start)), None)
    return main, by, mp_at


def brk_heap(maps: list[Mapping]) -> Mapping | None:
    """[heap], as one range: the kernel splits it into several mappings (a forked child's inherited
    part and the part it grew itself)."""
    parts = [m for m in maps if m.path == "[heap]"]
    if not parts:
        return None
    hi = parts[0].hi
    for m in parts[1:]:
        if m.lo == hi:
            hi = m.hi
    return Mapping(parts[0].lo, hi, parts[0].perms, 0, 0, "[heap]")


def _heaps(layout: GlibcLayout, arenas: list[ar.Arena], params: ar.Params | None, maps: list[Mapping],
           mem: Memory) -> list[ArenaRead]:
    hi_size, ms_size = layout.size("heap_info"), layout.size("malloc_state")
    hmax = ar.heap_max(layout, params)
    heap_map = brk_heap(maps)
    out = []
    for a in arenas:
        r = ArenaRead(a)
        if a.main:
            home = a.address + layout.at("malloc_state", "bins") - 16
            # The maps were read before the stop: a heap grown since ends at the top's end now.
            end = _page_up(a.top + a.top_size)
            if heap_map is not None and a.top != home and heap_map.lo <= a.top < max(heap_map.hi, end) \
                    and not a.flags & ar.NONCONTIGUOUS:
                base = params.sbrk_base if params is not None and params.sbrk_base else heap_map.lo
                start = _align_chunk(base, layout.alignment)
                r.heaps.append(HeapRegion(heap_map.lo, max(heap_map.hi, end),
                                          HeapWalk(start, a.top, layout.min_chunk, layout.tcache_struct_chunk)))
        else:
            ar.thread_heaps(layout, mem, a, hmax)
            for h, size, _ in a.heaps:
                m = next((m for m in maps if m.lo == h), None)
                if m is None:
                    continue
                first = (h + hi_size + ms_size) if a.address == h + hi_size else h + hi_size
                start = _align_chunk(first, layout.alignment)
                stop = a.top if h <= a.top < h + size else h + size
                r.heaps.append(HeapRegion(m.lo, max(m.hi, _page_up(h + size)),
                                          HeapWalk(start, stop, layout.min_chunk, layout.tcache_struct_chunk),
                                          overhead=start - h))
        out.append(r)
    return out


def _walk(mem: Memory, freezer: Freezer, region: HeapRegion, anchors: list[int]) -> None:
    w = region.walk
    w.anchors = sorted(a for a in anchors if w.start < a <= w.stop)
    with freezer.paused():
        e = mem.entries(region.lo, region.hi)
    region.present = (e & np.uint64(PRESENT)) != 0 if e is not None else None
    top_word = None
    buffer = bytearray(min(SLICE_BYTES, region.hi - region.lo))
    while not w.done and w.pos < w.stop:
        lo = w.pos & ~(PAGE - 1)
        hi = min(region.hi, lo + SLICE_BYTES)
        if w.pos + 16 > hi:
            w.unread += w.stop - w.pos
            break
        with freezer.paused():
            e = mem.entries(lo, hi)
            sl = mem.slice(lo, hi, e, buffer, until=time.perf_counter() + SLICE_S)
        if e is not None and region.present is not None:
            a = (lo - region.lo) // PAGE
            region.present[a:a + len(e)] = (e & np.uint64(PRESENT)) != 0
        if sl.hi < hi and w.pos + 16 > sl.hi:
            continue   # the stop ended before the next header: read again from it
        w.feed(sl)
        if w.pos == w.stop and w.stop + 16 <= sl.hi:
            i = (w.stop - sl.lo) // 8
            top_word = None if sl.unknown(w.stop) else int(np.frombuffer(sl.data, dtype=np.uint64)[i + 1])
    if not w.done:
        if top_word is None and w.pos == w.stop and not mem.swapped(w.stop):
            with freezer.paused():
                try:
                    top_word = mem.word(w.stop + 8)
                except Unreadable:
                    top_word = None
        w.finish_at_top(top_word)


def read(pid: int, maps: list[Mapping], libc: Libc, layout: GlibcLayout, mem: Memory, freezer: Freezer,
         bss: dict[int, tuple[int, int]]) -> GlibcState:
    heap_map = brk_heap(maps)
    mains, mps, _ = _candidates(layout, libc, mem, heap_map)
    with Pacer(freezer) as pacer:
        main, by, mp_at = _choose(layout, mem, heap_map, mains, mps)
        params = ar.params(layout, mem.read(mp_at, layout.size("malloc_par"))) if mp_at else None
        arenas = _heaps(layout, ar.ring(layout, mem, main), params, maps, mem)
        key = mem.word(libc.symbols["tcache_key"]) if "tcache_key" in libc.symbols else None
        regs = dict(pacer.stop.regs) if pacer.stop else {}
    # Each thread's tcache pointer stays as it is while the thread lives: read from its registers'
    # thread pointer after the stop, which it would only lengthen.
    main_first = arenas[0].heaps[0].walk.start if arenas[0].heaps else 0
    offsets = {k: libc.symbols[k] for k in ("tcache", "thread_arena") if k in libc.tls}
    tv = thread_vars(mem, regs, pid, main_first, main, offsets)
    sps = [r.sp for r in regs.values()]
    spans = [(h.walk.start, h.walk.stop + 16) for r in arenas for h in r.heaps] + \
        [(h, h + s) for r in arenas for h, s, _ in r.arena.heaps]

    def inside(addr: int) -> bool:
        return any(lo <= addr < hi for lo, hi in spans)

    cached = ar.Cached()
    limit = params.tcache_count if params is not None else 0xFFFF
    with Pacer(freezer) as pacer:
        for r in arenas:
            ar.fastbins(layout, mem, r.arena, cached, inside, pacer.tick)
        if tv is not None:
            how = tv.how
            for tid, chunk in tv.tcache.items():
                pacer.tick()
                if chunk and chunk not in cached.tcaches:
                    ar.tcache(layout, mem, chunk, key, cached, inside, limit)
            for r in arenas:
                r.threads = sorted(t for t, a in tv.arena.items() if a == r.arena.address)
        else:
            how = None
    anchors = sorted(cached.chunks) + [r.arena.top for r in arenas]
    for r in arenas:
        for h in r.heaps:
            _walk(mem, freezer, h, anchors)
    if tv is None:
        # No registers (a process traced by someone else): every in-use chunk of a tcache's size
        # whose content checks out is one.
        how = "content: in-use chunks of a tcache's size whose counts and links check out"
        with Pacer(freezer) as pacer:
            for r in arenas:
                for h in r.heaps:
                    for chunk in h.walk.tcache_like:
                        pacer.tick()
                        ar.tcache(layout, mem, chunk, key, cached, inside, limit)
    skip = {m.lo for m in maps for r in arenas for h in r.heaps if h.lo <= m.lo < h.hi}
    with Pacer(freezer) as pacer:
        mapped = mp.find(mem, maps, skip, bss, pacer.tick)
    return GlibcState(main, by, mp_at, params, arenas, cached, how, mapped, sps, freezer.enabled, bss)
