"""Where the memory goes: the allocator's own books beside the anonymous RSS, split into parts.

In: each process's books (launcher/books.c: figures by name, in bytes, -1 where unknown, read at
samples of the fingerprint run; the last just before the process exits) and the catalog's roles
(catalog/allocators.toml, [allocators.NAME.books]). Out: a Books record (store/fingerprint_model.py)
with the tree's rows and the split of its anonymous RSS at the fingerprint's readings: the peak of
anonymous RSS, the end, and the end of each memory phase of a server.

The parts, each resident bytes:
  live         the program's live blocks (usable bytes, the interposer's count)
  free_top     glibc: free at the heap's top, what a trim gives back (mincore of the top chunks)
  free_inside  free between live blocks: glibc's bins and fastbins (the heaps' resident pages less
               the top and the blocks in use, at most the bins' bytes), jemalloc's active pages not
               allocated, tcmalloc's spans in use less their objects
  caches       freed blocks kept for reuse: glibc's tcache, jemalloc's tcache, tcmalloc's thread,
               central and transfer caches
  decaying     freed pages waiting to be returned: jemalloc's dirty and muzzy pages, tcmalloc's page
               heap
  metadata     glibc: a header per block; jemalloc's and gperftools' metadata
  held         mimalloc 2.0: what its mappings hold beyond the live bytes, not split (its interface
               gives only the committed bytes, an address-space figure)
  other        not the allocator's, from smaps: stacks, the libraries' written pages, the
               interposer's tables and helper stack, and under glibc the program's own anonymous
               maps (under the others every anonymous mapping that is not a stack is taken as theirs)
The books of jemalloc and gperftools, and glibc's blocks in use, are address space: a block
malloc'd and never touched, a span never handed out, most of jemalloc's metadata, count in them
but not in RSS. So the allocator's parts are taken in order (glibc: the top, the mapped chunks and
free inside, measured; then the tcache, the headers and the live blocks; the others: live,
caches, free inside, decaying, metadata), each at most what the allocator's resident mappings
(smaps) have left; what the books count beyond them is `beyond_resident`, and what the mappings
hold beyond every part, with the smaps/statm difference, is `unexplained`; tests bound it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from alloclab.catalog.allocators import load_catalog
from alloclab.store.fingerprint_model import Books, MemorySplit, Plain

OTHER = ("stacks", "libraries", "interposer", "own_maps")
# Figures of the tree that are not summed over its processes: each process's own setting or state.
NOT_SUMMED = {"mmap_threshold", "trim_threshold", "thresholds_fixed", "raised_by", "raised_at_ms", "arenas.page"}
ROWS_KEPT = 200


@dataclass
class ProcessBooks(Plain):
    """One process's books as the interposer wrote them: [ms since its start, figure...] rows."""
    interface: str = "none"
    spent_ns: int = 0
    names: list[str] = field(default_factory=list)
    rows: list[list[int]] = field(default_factory=list)


def _pos(v: int | None) -> int:
    return v if v is not None and v > 0 else 0


def _sum(v: dict[str, int], names: Iterable[str]) -> int | None:
    """The named figures added up; None where any is unknown."""
    out = 0
    for n in names:
        x = v.get(n)
        if x is None or x < 0:
            return None
        out += x
    return out


def _resident(booked: list[tuple[str, int]], maps: int) -> dict[str, int]:
    """The booked parts, in order, each at most what the allocator's resident mappings have left:
    a part its books count but the pages do not hold (a block never touched, a span never handed
    out) is not resident. Whatever the mappings hold beyond every part stays unexplained."""
    out, left = {}, max(0, maps)
    for name, x in booked:
        out[name] = min(max(0, x), left)
        left -= out[name]
    return out


def _glibc(v: dict[str, int], roles) -> tuple[list[tuple[str, int]], int] | None:
    need = ("system", "fast", "bins", "top", "mmap_count", "mmap_bytes", "heap_resident", "top_resident")
    if any(v.get(k, -1) < 0 for k in need):
        return None
    live, blocks = _pos(v.get("live")), _pos(v.get("live_blocks"))
    in_use = max(0, v["system"] - v["fast"] - v["bins"] - v["top"])
    mapped_live = max(0, v["mmap_bytes"] - 16 * v["mmap_count"])
    heap_blocks = max(0, blocks - v["mmap_count"])
    live_heap = max(0, live - mapped_live)
    headers = 8 * heap_blocks
    mapped = v.get("mapped_resident")
    mapped = mapped_live if mapped is None or mapped < 0 else mapped
    inside = min(v["fast"] + v["bins"], max(0, v["heap_resident"] - v["top_resident"] - in_use))
    # Measured first (the top and the mapped chunks by mincore, free inside from the heaps' resident
    # pages), then what is in use: the tcache, a header per block, the live blocks.
    booked = [("free_top", v["top_resident"]), ("live_mapped", mapped), ("free_inside", inside),
              ("caches", max(0, in_use - live_heap - headers)), ("metadata", headers), ("live", live_heap)]
    return booked, v["heap_resident"] + mapped


def _jemalloc(v: dict[str, int], roles) -> tuple[list[tuple[str, int]], int] | None:
    page = _sum(v, roles.role("page")) or 4096
    allocated, active = _sum(v, roles.role("allocated")), _sum(v, roles.role("active"))
    dirty, muzzy = _sum(v, roles.role("dirty_pages")), _sum(v, roles.role("muzzy_pages"))
    if None in (allocated, active, dirty, muzzy):
        return None
    return [("live", _pos(v.get("live"))), ("caches", _sum(v, roles.role("caches")) or 0),
            ("free_inside", max(0, active - allocated)), ("decaying", (dirty + muzzy) * page),
            ("metadata", _sum(v, roles.role("metadata")) or 0)], _pos(v.get("allocator_maps"))


def _tcmalloc(v: dict[str, int], roles) -> tuple[list[tuple[str, int]], int] | None:
    allocated, heap = _sum(v, roles.role("allocated")), _sum(v, roles.role("heap"))
    free, unmapped = _sum(v, roles.role("page_heap_free")), _sum(v, roles.role("unmapped"))
    physical, caches = _sum(v, roles.role("physical")), _sum(v, roles.role("caches"))
    if None in (allocated, heap, free, unmapped, caches):
        return None
    metadata = physical - heap + unmapped if physical is not None else 0
    return [("live", _pos(v.get("live"))), ("caches", caches),
            ("free_inside", max(0, heap - unmapped - free - caches - allocated)), ("decaying", free),
            ("metadata", metadata)], _pos(v.get("allocator_maps"))


def _held_only(v: dict[str, int], roles) -> tuple[list[tuple[str, int]], int]:
    maps, live = _pos(v.get("allocator_maps")), _pos(v.get("live"))
    return [("live", live), ("held", max(0, maps - live))], maps


SPLITS = {"malloc_info": _glibc, "mallctl": _jemalloc, "property": _tcmalloc, "mi_process_info": _held_only,
          "none": _held_only}


def split(interface: str, at: str, t_s: float | None, v: dict[str, int]) -> MemorySplit | None:
    """One reading's anonymous RSS in parts; None where the books of that instant could not say
    (no smaps, no answer from the allocator)."""
    if v.get("anon", -1) < 0 or v.get("allocator_maps", -1) < 0:
        return None
    roles = load_catalog().books(interface)
    booked, maps = SPLITS.get(interface, _held_only)(v, roles) or _held_only(v, roles)
    parts = _resident(booked, maps)
    parts["live"] = parts.get("live", 0) + parts.pop("live_mapped", 0)
    other = {k: _pos(v.get(k)) for k in OTHER}
    parts["other"] = sum(other.values())
    # What the books count beyond the resident pages (address space: never touched, or purged).
    beyond = sum(max(0, x) for _, x in booked) - sum(p for k, p in parts.items() if k != "other")
    return MemorySplit(at, t_s, v["anon"], parts, other, v["anon"] - sum(parts.values()),
                       {k: x for k, x in v.items() if x is not None and x >= 0}, beyond)


def _tracks(procs) -> list[tuple[list[str], list[tuple[int, list[int]]]]]:
    """Per process: its names, and its rows on the monotonic clock (ns)."""
    out = []
    for p in procs:
        b = ProcessBooks.of(getattr(p, "books", None))
        if b is None or not b.rows:
            continue
        out.append((b.names, [(p.start_ns + row[0] * 1_000_000, row[1:]) for row in b.rows]))
    return out


def _read_between(tracks, after_ns: int, until_ns: int) -> bool:
    """Whether any process read its books in (after_ns, until_ns]."""
    return any(after_ns < t <= until_ns for _, rows in tracks for t, _ in rows)


def _merge(tracks, at_ns: int | None) -> dict[str, int]:
    """The tree's figures at a monotonic instant (None: each process's last row, what it held as it
    exited): each process's last row at or before it, summed; a setting (a threshold) is the
    largest any process has; a figure one process does not know is unknown."""
    out: dict[str, int] = {}
    for names, rows in tracks:
        row = rows[-1][1] if at_ns is None else next((r for t, r in reversed(rows) if t <= at_ns), None)
        if row is None or (at_ns is not None and at_ns > rows[-1][0] + 1_000_000_000):
            continue
        for name, x in zip(names, row):
            if name in out and (out[name] < 0 or x < 0):
                out[name] = -1
            elif name in NOT_SUMMED:
                out[name] = max(out.get(name, x), x)
            else:
                out[name] = out.get(name, 0) + x
    return out


def books_of(procs, t0_ns: int | None, peak_t_s: float | None, phases: list[tuple[str, float]]) -> Books | None:
    """The tree's books and its splits at the peak of anonymous RSS (`peak_t_s`, on the series'
    clock, whose 0 is `t0_ns`), at the end, and at the end of each phase."""
    tracks = _tracks(procs)
    if not tracks:
        return None
    interfaces = {ProcessBooks.of(p.books).interface for p in procs if getattr(p, "books", None)}
    interface = interfaces.pop() if len(interfaces) == 1 else "none"
    names = list(dict.fromkeys(n for ns, _ in tracks for n in ns))
    t0 = t0_ns if t0_ns is not None else min(rows[0][0] for _, rows in tracks)
    times = sorted({t for _, rows in tracks for t, _ in rows})
    step = max(1, len(times) // ROWS_KEPT)
    kept = times[::step] + ([times[-1]] if (len(times) - 1) % step else [])
    rows = []
    for t in kept:
        v = _merge(tracks, t)
        rows.append([round((t - t0) / 1e9, 3), *[v.get(n, -1) for n in names]])
    splits = []
    # A phase's books are those read after its action: the phase before it ended first. Read on
    # their own schedule (after a slow reading the next waits longer: fingerprint.c), they may not
    # have been read since; then the phase has no split, rather than the one before its action.
    since = {f"after {name}": phases[k - 1][1] for k, (name, _) in enumerate(phases) if k}
    readings = [("peak", peak_t_s), ("end", None)] + [(f"after {name}", t) for name, t in phases]
    end = _merge(tracks, None)
    for at, t_s in readings:
        if at == "peak" and t_s is None:
            continue
        if at in since and not _read_between(tracks, t0 + int(since[at] * 1e9), t0 + int(t_s * 1e9)):
            continue
        v = _merge(tracks, None if t_s is None else t0 + int(t_s * 1e9))
        if at == "peak" and v == end:
            continue   # the books last read before the peak are those of the end: one reading, not two
        s = split(interface, at, round(t_s, 3) if t_s is not None else rows[-1][0], v) if v else None
        if s is not None:
            splits.append(s)
    spent = sum(ProcessBooks.of(p.books).spent_ns for p in procs if getattr(p, "books", None))
    catalogued = load_catalog().books(interface)
    source = catalogued.source if catalogued is not None and catalogued.source else interface
    return Books(interface, source, round(spent / 1e9, 4), names, rows, splits)
