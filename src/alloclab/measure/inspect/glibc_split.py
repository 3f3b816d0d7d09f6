"""From what the walk read to the fingerprint's parts: per arena the figures malloc_info would print
(its system bytes, the top, the free chunks in its bins, its fastbins) and the tcaches, and for the
process the split of its anonymous RSS into live, free_top, free_inside, caches, metadata and other
(store/fingerprint_model.py's PARTS), each part its resident bytes (pagemap, chunk by chunk), beside
the same parts as address space (`booked`).

The parts, as the fingerprint's for glibc (measure/fingerprint_books.py), except that what the
heap alone shows in use is split further: the tcache's and the fastbins' chunks are caches, each
thread's tcache struct and each arena's own header are metadata with a header per block. Resident
bytes: the top, the free chunks, the cached chunks and the mapped chunks are each counted over the
pages pagemap shows present; the headers are taken as resident (each was written when its block
was made), up to what the heap's pages leave; live is what the heaps' resident pages hold beyond
all of these, at most the blocks in use. What that leaves (pages of unread spans) is unexplained."""

from __future__ import annotations

import numpy as np

from alloclab.catalog.glibc_layout import GlibcLayout
from alloclab.measure.inspect.glibc_read import GlibcState
from alloclab.measure.inspect.memory import PAGE, resident_bytes
from alloclab.measure.inspect.regions import Regions
from alloclab.store.fingerprint_model import MemorySplit
from alloclab.store.inspect_model import ArenaFigures

HEADER = 8          # a block's size field: glibc's overhead per chunk in use
MAPPED_HEADER = 16  # prev_size and size, in front of a mapped block


def _res(present, base, lo, hi) -> int:
    if present is None:
        return int(np.sum(np.asarray(hi) - np.asarray(lo)))
    return int(resident_bytes(present, base, np.asarray(lo), np.asarray(hi)).sum())


def arena_figures(state: GlibcState) -> list[ArenaFigures]:
    out = []
    cached = state.cached
    for r in state.arenas:
        a = r.arena
        f = ArenaFigures(address=a.address, main=a.main, threads=r.threads,
                         heaps=len(r.heaps) if a.main else len(a.heaps), system=a.system_mem, top=a.top_size)
        for h in r.heaps:
            w = h.walk
            _, size = w.free_chunks()
            f.free += int(size.sum())
            f.free_count += len(size)
            f.in_use += w.in_use_bytes
            f.in_use_count += w.in_use
            f.unread += w.unread
            if w.start <= a.top <= w.stop:
                f.top_resident = _res(h.present, h.lo, [a.top], [a.top + a.top_size])
            for c, s in cached.chunks.items():
                if w.start <= c < w.stop:
                    if c in cached.fast_set:
                        f.fast += s
                        f.fast_count += 1
                    else:
                        f.tcache += s
                        f.tcache_count += 1
        # malloc_info's system bytes: the main heap from its first chunk to the top's end; a thread
        # arena's heaps, each as far as heap_info says it reaches.
        f.walked = sum(h.walk.stop + a.top_size - h.walk.start for h in r.heaps) if a.main \
            else sum(size for _, size, _ in a.heaps)
        out.append(f)
    return out


def _capped(booked: list[tuple[str, int]], resident: int) -> dict[str, int]:
    """Without pagemap: the parts as booked, in order, each at most what the heaps' resident bytes
    (smaps) have left."""
    out, left = {}, max(0, resident)
    for name, x in booked:
        out[name] = min(x, left)
        left -= out[name]
    return out


def split(state: GlibcState, layout: GlibcLayout, regions: Regions, anon: int, figures: dict, resident_in,
          heap_anon: int) -> tuple[MemorySplit, dict[str, int], dict[str, int]]:
    """The split, the parts as address space, and the figures the rules read (books).
    `resident_in(lo, hi)`: resident bytes of a range outside the heaps (the mapped chunks);
    `heap_anon`: smaps' anonymous bytes of the heaps' mappings (used where pagemap is not read)."""
    cached = state.cached
    heap_res = top_res = free_res = cache_res = 0
    in_use = in_use_bytes = free_bytes = top_bytes = overhead = unread = 0
    cached_seen_bytes = cached_seen = 0
    measured = all(h.present is not None for r in state.arenas for h in r.heaps)
    for r in state.arenas:
        a = r.arena
        for h in r.heaps:
            w = h.walk
            present = h.present
            at, size = w.free_chunks()
            free_bytes += int(size.sum())
            in_use += w.in_use
            in_use_bytes += w.in_use_bytes
            unread += w.unread
            overhead += h.overhead + (32 if w.fencepost else 0)
            mine = np.array([c for c in cached.chunks if w.start <= c < w.stop], dtype=np.int64)
            sizes = np.array([cached.chunks[c] for c in mine.tolist()], dtype=np.int64)
            cached_seen_bytes += int(sizes.sum())
            cached_seen += len(mine)
            if w.start <= a.top <= w.stop:
                top_bytes += a.top_size
            if not measured:
                continue
            heap_res += int(present.sum()) * PAGE
            free_res += _res(present, h.lo, at, at + size)
            cache_res += _res(present, h.lo, mine, mine + sizes) if len(mine) else 0
            if w.start <= a.top <= w.stop:
                top_res += _res(present, h.lo, [a.top], [a.top + a.top_size])
                # The heap's pages past the top, within its writable mapping: kept, not in a chunk.
                top_res += _res(present, h.lo, [a.top + a.top_size], [h.hi]) if a.top + a.top_size < h.hi else 0
    structs = len(cached.tcaches)
    struct_bytes = structs * layout.tcache_struct_chunk
    blocks = max(0, in_use - cached_seen - structs)
    live_booked = max(0, in_use_bytes - cached_seen_bytes - struct_bytes - HEADER * blocks)
    meta_booked = HEADER * blocks + struct_bytes + overhead
    if measured:
        left = heap_res - top_res - free_res - cache_res
        meta_res = min(meta_booked, max(0, left))
        live_res = min(live_booked, max(0, left - meta_res))
    else:
        # A top pad is mostly never touched, and the blocks in use mostly are: the top comes last.
        heap_res = heap_anon
        c = _capped([("metadata", meta_booked), ("live", live_booked), ("caches", cached_seen_bytes),
                     ("free_inside", free_bytes), ("free_top", top_bytes)], heap_res)
        meta_res, live_res, cache_res, free_res, top_res = (c["metadata"], c["live"], c["caches"], c["free_inside"],
                                                            c["free_top"])
    mapped_chunks = state.mapped.chunks
    mapped_res = sum(resident_in(at, at + size) for at, size in mapped_chunks)
    mapped_meta = MAPPED_HEADER * len(mapped_chunks)
    parts = {"live": live_res + max(0, mapped_res - mapped_meta), "free_top": top_res, "free_inside": free_res,
             "caches": cache_res, "metadata": meta_res + min(mapped_meta, mapped_res)}
    other = {"stacks": regions.by_kind["stacks"], "libraries": regions.by_kind["libraries"], "interposer": 0,
             "own_maps": regions.by_kind["own_maps"]}
    parts["other"] = sum(other.values())
    booked = {"live": live_booked + sum(s for _, s in mapped_chunks) - mapped_meta, "free_top": top_bytes,
              "free_inside": free_bytes, "caches": cached_seen_bytes, "metadata": meta_booked + mapped_meta}
    books = dict(figures)
    books |= {"anon": anon, "mapped_resident": mapped_res, "heap_resident": heap_res, "top_resident": top_res,
              "live": live_booked, "live_blocks": blocks + len(mapped_chunks), "unread": unread,
              "allocator_maps": regions.by_kind["allocator"], **other}
    beyond = sum(booked.values()) - sum(v for k, v in parts.items() if k != "other")
    sp = MemorySplit("inspect", None, anon, parts, other, anon - sum(parts.values()), books, beyond)
    return sp, booked, books
