"""A glibc process, read: the walk (glibc_read.py), whose mappings are whose (regions.py), and the
split and figures (glibc_split.py), gathered into the Snapshot's fields."""

from __future__ import annotations

import numpy as np

from alloclab.catalog.glibc_layout import GlibcLayout
from alloclab.measure.inspect import glibc_read, glibc_split
from alloclab.measure.inspect.libc import Libc
from alloclab.measure.inspect.memory import PAGE, PRESENT, Memory
from alloclab.measure.inspect.procfs import Mapping
from alloclab.measure.inspect.ptrace import Freezer
from alloclab.measure.inspect.regions import _bss_ranges, classify
from alloclab.store.inspect_model import Snapshot


def resident_counter(mem: Memory, maps: list[Mapping]):
    """resident_in(lo, hi): pagemap's resident bytes of a range; without pagemap, the smaps share
    of the mapping it lies in (its Anonymous bytes in proportion)."""
    def resident_in(lo: int, hi: int) -> int:
        a, b = lo & ~(PAGE - 1), (hi + PAGE - 1) & ~(PAGE - 1)
        e = mem.entries(a, b)
        if e is None:
            m = next((m for m in maps if m.lo <= lo < m.hi), None)
            return min(hi - lo, m.anon * (hi - lo) // max(1, m.size)) if m else 0
        from alloclab.measure.inspect.memory import resident_bytes
        import numpy as np
        present = (e & np.uint64(PRESENT)) != 0
        return int(resident_bytes(present, a, np.array([lo]), np.array([hi]))[0])
    return resident_in


def _name_runtimes(snap: Snapshot, pid: int, maps, regions, mem, resident_in, sp) -> None:
    """The program's own maps (and stacks) less what a language runtime's heap holds of them
    (runtimes.py), each such heap a part of `other` by its name."""
    from alloclab.measure.inspect import runtimes
    for key, (kind, n) in runtimes.name(pid, snap.exe, maps, regions.kind_of, mem, resident_in).items():
        name = key.split(":")[0]
        n = min(n, sp.other_parts.get(kind, 0))
        sp.other_parts[kind] -= n
        sp.books[kind] = sp.other_parts[kind]
        sp.other_parts[name] = sp.other_parts.get(name, 0) + n
        sp.books[name] = sp.other_parts[name]


def _thread_tops(arenas) -> dict[str, int]:
    """The thread arenas' tops: what each keeps free at its heap's end, resident (the rules weigh each
    top against the trim threshold, which glibc compares with each arena's own top, not their sum)."""
    tops = [a for a in arenas if not a.main and a.top_resident >= 1 << 20]
    if not tops:
        return {}
    return {"arena_top": sum(a.top_resident for a in tops), "arena_tops": len(tops),
            "arena_top_max": max(a.top for a in tops), "arena_top_min": min(a.top for a in tops)}


def chunk_sizes(state) -> list[dict]:
    """The heaps' chunks by power-of-two class of their size (class c: [2^(c-1), 2^c)), free and in
    use, with the smallest free chunk of each class: what a snapshot has of the sizes the program
    asks for (a fingerprint counts its requests; here the chunks that serve them stand in)."""
    used_n = sum((h.walk.used_count for r in state.arenas for h in r.heaps), np.zeros(64, dtype=np.int64))
    used_b = sum((h.walk.used_bytes for r in state.arenas for h in r.heaps), np.zeros(64, dtype=np.int64))
    sizes = [h.walk.free_chunks()[1] for r in state.arenas for h in r.heaps]
    free = np.concatenate(sizes) if sizes else np.zeros(0, dtype=np.int64)
    classes = np.zeros(len(free), dtype=np.int64)
    if len(free):
        classes = np.floor(np.log2(free)).astype(np.int64) + 1
    out = []
    for c in range(64):
        mine = free[classes == c]
        if not len(mine) and not used_n[c]:
            continue
        out.append({"class": c, "free": int(len(mine)), "free_bytes": int(mine.sum()),
                    "free_min": int(mine.min()) if len(mine) else 0, "used": int(used_n[c]),
                    "used_bytes": int(used_b[c])})
    return out


def read(snap: Snapshot, pid: int, maps: list[Mapping], libc: Libc, layout: GlibcLayout, mem: Memory,
         freezer: Freezer) -> None:
    resident_in = resident_counter(mem, maps)
    bss = {}
    for lo, hi in _bss_ranges(pid, maps):
        for m in maps:
            if m.lo < hi and lo < m.hi and m.is_anon:
                bss[m.lo] = (max(lo, m.lo), min(hi, m.hi))
    state = glibc_read.read(pid, maps, libc, layout, mem, freezer, bss)
    heaps = [(h.lo, h.hi) for r in state.arenas for h in r.heaps]
    n_heaps = len(heaps)
    allocator = heaps + [(at, at + size) for at, size in state.mapped.chunks]
    regions = classify(pid, maps, allocator, state.sps, resident_in)
    arenas = glibc_split.arena_figures(state)
    figures = {"arenas": len(arenas), "system": sum(a.system for a in arenas),
               "fast": sum(a.fast for a in arenas), "bins": sum(a.free for a in arenas),
               "top": sum(a.top for a in arenas), "main_top": arenas[0].top if arenas else 0,
               "arena_free": sum(a.top + a.free + a.fast for a in arenas if not a.main),
               "mmap_count": len(state.mapped.chunks), "mmap_bytes": state.mapped.bytes,
               "mmap_default": layout.default_mmap_threshold}
    figures |= _thread_tops(arenas)
    snap.chunk_sizes = chunk_sizes(state)
    p = state.params
    if p is not None:
        raised = p.mmap_threshold if not p.no_dyn_threshold and p.mmap_threshold > layout.default_mmap_threshold else 0
        snap.thresholds = {"trim_threshold": p.trim_threshold, "mmap_threshold": p.mmap_threshold,
                           "thresholds_fixed": p.no_dyn_threshold, "raised_by": raised, "top_pad": p.top_pad,
                           "arena_max": p.arena_max, "tcache_count": p.tcache_count,
                           "n_mmaps": p.n_mmaps, "mmapped_mem": p.mmapped_mem}
        figures |= {k: snap.thresholds[k] for k in ("trim_threshold", "mmap_threshold", "thresholds_fixed",
                                                      "raised_by")}
    heap_anon = sum(m.anon for m in maps if any(lo <= m.lo < hi for lo, hi in allocator[:n_heaps]))
    sp, booked, books = glibc_split.split(state, layout, regions, regions.anon, figures, resident_in, heap_anon)
    _name_runtimes(snap, pid, maps, regions, mem, resident_in, sp)
    snap.split, snap.booked, snap.arenas = sp, booked, arenas
    snap.smaps = regions.categories()
    snap.mapped_count, snap.mapped_bytes = len(state.mapped.chunks), state.mapped.bytes
    snap.mapped_resident = books["mapped_resident"]
    snap.unread = books["unread"]
    snap.located_by = state.main_by
    snap.tcache_by = state.tcache_by
    snap.source = "glibc's heaps, walked from outside"
    notes = [f"main_arena found by {state.main_by}; mp_ "
             + (f"at {state.mp_at:#x}" if state.mp_at else "not found: glibc's thresholds are not known")]
    if state.tcache_by:
        notes.append(f"tcaches read from {state.tcache_by} ({len(state.cached.tcaches)} threads' tcaches)")
    if state.cached.broken:
        notes.append(f"{state.cached.broken} cached-chunk links failed their checks (the process ran between reads)")
    if snap.unread:
        notes.append(f"{snap.unread:,} bytes of heap could not be read or trusted (changed under the walk, or "
                     f"swapped out): counted as unread")
    snap.notes += notes
