"""glibc's own state in a process: main_arena and mp_ (from the debug symbols where installed,
else found by their content in libc's data), the ring of arenas, each arena's heaps, and the
chunks its fastbins and each thread's tcache hold.

By content: main_arena is the one place in libc's data where the bins of a malloc_state point back
at themselves when empty (fd == bk == the bin's own address less 16) and at chunks that point back
at the bin when not; mp_ is the malloc_par whose tcache figures agree with each other
(tcache_bins follows from tcache_max_bytes), whose sbrk_base is the start of [heap], and whose
other fields are in glibc's ranges. Whichever way, each is checked the same way before use.

The tcache of each thread: its pointer is the thread-local variable `tcache`, at a fixed offset
below the thread pointer in every thread. That offset is found in the main thread, whose tcache is
the heap's first chunk: the word there that holds its address, beside `thread_arena` holding
&main_arena (offsets from the symbols, or the nearest such word). Without the threads' registers
(a process traced by someone else), every in-use chunk of a tcache's size whose content checks
out is taken for one."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from alloclab.catalog.glibc_layout import GlibcLayout
from alloclab.measure.inspect.memory import Memory, Unreadable

FLAGS = 7
NONCONTIGUOUS = 2     # malloc_state.flags: the main arena's heap is not one brk range


@dataclass
class Arena:
    address: int
    main: bool
    state: bytes
    fast_heads: list[int] = field(default_factory=list)
    top: int = 0
    top_size: int = 0
    system_mem: int = 0
    flags: int = 0
    heaps: list[tuple[int, int, int]] = field(default_factory=list)   # (heap_info at, size, mprotect_size)


@dataclass
class Params:
    """What of mp_ the answer needs."""
    trim_threshold: int
    top_pad: int
    mmap_threshold: int
    arena_max: int
    hp_pagesize: int
    n_mmaps: int
    no_dyn_threshold: int
    mmapped_mem: int
    sbrk_base: int
    tcache_bins: int
    tcache_count: int


def _u(data: bytes, at: int, n: int = 8) -> int:
    return int.from_bytes(data[at:at + n], "little")


def params(layout: GlibcLayout, data: bytes) -> Params:
    f = layout.structs["malloc_par"]
    return Params(_u(data, f["trim_threshold"]), _u(data, f["top_pad"]), _u(data, f["mmap_threshold"]),
                  _u(data, f["arena_max"]), _u(data, f["hp_pagesize"]), _u(data, f["n_mmaps"], 4),
                  _u(data, f["no_dyn_threshold"], 4), _u(data, f["mmapped_mem"]), _u(data, f["sbrk_base"]),
                  _u(data, f["tcache_bins"]), _u(data, f["tcache_count"]))


# --- finding them ----------------------------------------------------------------------------------

def bins_back_home(layout: GlibcLayout, mem: Memory, at: int, state: bytes) -> int:
    """How many of the arena's bins check out: empty ones point at themselves; a non-empty one's
    first chunk points back at the bin. -1 if any bin is plainly broken."""
    ms = layout.structs["malloc_state"]
    ok = 0
    for i in range(1, layout.nbins):
        off = ms["bins"] + 16 * (i - 1)
        home = at + off - 16
        fd, bk = _u(state, off), _u(state, off + 8)
        if fd == home and bk == home:
            ok += 1
            continue
        if fd & 15 or bk & 15 or not fd or not bk:
            return -1
        try:
            if mem.word(fd + 24) != home or mem.word(bk + 16) != home:
                return -1
        except Unreadable:
            return -1
        ok += 1
    return ok


def main_arena_candidates(layout: GlibcLayout, region: tuple[int, int], data: bytes) -> list[int]:
    """Where main_arena may be in libc's writable data [lo, hi) (its bytes `data`), by content: a
    malloc_state whose bins point back at themselves where empty (at least 8 of them), whose `next`
    is itself or a thread arena. The bins that are not empty are checked in a stop
    (bins_back_home): a running process changes them."""
    lo, _ = region
    ms = layout.structs["malloc_state"]
    words = np.frombuffer(data[:len(data) // 8 * 8], dtype=np.uint64)
    addr = np.uint64(lo) + np.arange(len(words), dtype=np.uint64) * np.uint64(8)
    # An empty bin: its fd holds its own address less 16, its bk (the next word) the same value.
    empty = np.zeros(len(words), dtype=np.int32)
    empty[:-1] = (words[:-1] == addr[:-1] - np.uint64(16)) & (words[1:] == addr[:-1] - np.uint64(16))
    first = ms["bins"] // 8
    n = len(words) - ms["size"] // 8
    if n <= 0:
        return []
    counts = np.zeros(n, dtype=np.int32)
    for b in range(layout.nbins - 1):
        counts += empty[first + 2 * b:first + 2 * b + n]
    out = []
    for k in np.flatnonzero(counts >= 8).tolist():
        at = lo + 8 * k
        nxt = _u(data, 8 * k + ms["next"])
        if at % 16 == 0 and (nxt == at or (nxt - layout.size("heap_info")) % layout.alignment == 0):
            out.append(at)
    return out


def _tcache_bins_for(max_bytes: int) -> int:
    request = max(32, (max_bytes + 8 + 15) & ~15)
    return (request - 32 + 15) // 16 + 1


def plausible_params(layout: GlibcLayout, p: Params, heap_start: int | None) -> bool:
    return (p.tcache_bins <= layout.tcache_bins and p.tcache_count <= 0xFFFF and p.no_dyn_threshold in (0, 1)
            and p.mmap_threshold <= layout.mmap_threshold_max and p.mmapped_mem % 4096 == 0
            and p.n_mmaps < 1 << 24 and p.hp_pagesize & (p.hp_pagesize - 1) == 0
            and (p.sbrk_base == heap_start if heap_start else p.sbrk_base == 0 or p.sbrk_base % 16 == 0)
            and p.arena_max < 1 << 20)


def find_mp(layout: GlibcLayout, region: tuple[int, int], data: bytes, heap_start: int | None) -> int | None:
    """mp_ in libc's writable data, by content: tcache_bins agrees with tcache_max_bytes, sbrk_base is
    [heap]'s start, every other figure in glibc's range. None unless exactly one place fits."""
    lo, _ = region
    f = layout.structs["malloc_par"]
    found = []
    for off in range(0, len(data) - f["size"] + 1, 8):
        bins = _u(data, off + f["tcache_bins"])
        if bins == 0 or bins > layout.tcache_bins:
            continue
        if _tcache_bins_for(_u(data, off + f["tcache_max_bytes"])) != bins:
            continue
        p = params(layout, data[off:off + f["size"]])
        if plausible_params(layout, p, heap_start):
            found.append(lo + off)
    return found[0] if len(found) == 1 else None


# --- the arenas -------------------------------------------------------------------------------------

def read_arena(layout: GlibcLayout, mem: Memory, at: int, main: bool) -> Arena:
    ms = layout.structs["malloc_state"]
    state = mem.read(at, ms["size"])
    a = Arena(at, main, state)
    a.fast_heads = [_u(state, ms["fastbins"] + 8 * i) for i in range(layout.nfastbins)]
    a.top = _u(state, ms["top"])
    a.system_mem = _u(state, ms["system_mem"])
    a.flags = _u(state, ms["flags"], 4)
    a.top_size = mem.word(a.top + 8) & ~FLAGS if a.top else 0
    return a


def ring(layout: GlibcLayout, mem: Memory, main_at: int, limit: int = 4096) -> list[Arena]:
    """main_arena and every arena after it on the `next` ring."""
    ms = layout.structs["malloc_state"]
    out = [read_arena(layout, mem, main_at, True)]
    nxt = _u(out[0].state, ms["next"])
    while nxt and nxt != main_at and len(out) < limit:
        out.append(read_arena(layout, mem, nxt, False))
        nxt = _u(out[-1].state, ms["next"])
    return out


def heap_max(layout: GlibcLayout, p: Params | None) -> int:
    return p.hp_pagesize * 4 if p is not None and p.hp_pagesize else layout.heap_max


def thread_heaps(layout: GlibcLayout, mem: Memory, a: Arena, hmax: int) -> None:
    """A thread arena's heaps, last (the top's) first: heap_info.prev from the one its top is in."""
    hi = layout.structs["heap_info"]
    h = a.top & ~(hmax - 1)
    seen = set()
    while h and h not in seen and len(seen) < 1 << 16:
        seen.add(h)
        data = mem.read(h, hi["size"])
        if _u(data, hi["ar_ptr"]) != a.address:
            break
        a.heaps.append((h, _u(data, hi["heap_size"]), _u(data, hi["mprotect_size"])))
        h = _u(data, hi["prev"])


# --- the cached chunks --------------------------------------------------------------------------

@dataclass
class Cached:
    """Chunks that look in use from the heap but are kept for reuse: (chunk address, size)."""
    chunks: dict[int, int] = field(default_factory=dict)
    tcache_chunks: int = 0
    tcache_bytes: int = 0
    fast_chunks: int = 0
    fast_bytes: int = 0
    fast_by_arena: dict[int, int] = field(default_factory=dict)   # arena -> bytes
    fast_set: set[int] = field(default_factory=set)
    broken: int = 0          # links that failed their checks (the heap changed under the read)
    tcaches: list[int] = field(default_factory=list)               # tcache structs read (chunk addresses)


def reveal(at: int, link: int) -> int:
    """glibc's safe-linking: a link is stored as (its own address >> 12) ^ its target."""
    return (at >> 12) ^ link


def fastbins(layout: GlibcLayout, mem: Memory, a: Arena, cached: Cached, inside, budget) -> None:
    """Each fastbin's list from its head (heads are plain, links mangled): every chunk of the bin's
    size, inside the arena's heaps, aligned. `budget()` lets the process run between slices."""
    for i, head in enumerate(a.fast_heads):
        size, p = 32 + 16 * i, head
        while p:
            budget()
            if p & 15 or not inside(p) or p in cached.chunks:
                cached.broken += 1
                break
            try:
                header = mem.read(p + 8, 16)
            except Unreadable:
                cached.broken += 1
                break
            if _u(header, 0) & ~FLAGS != size:
                cached.broken += 1
                break
            cached.chunks[p] = size
            cached.fast_set.add(p)
            cached.fast_chunks += 1
            cached.fast_bytes += size
            cached.fast_by_arena[a.address] = cached.fast_by_arena.get(a.address, 0) + size
            p = reveal(p + 16, _u(header, 8)) if layout.safe_linking else _u(header, 8)


def tcache(layout: GlibcLayout, mem: Memory, chunk: int, key: int | None, cached: Cached, inside,
           limit: int) -> bool:
    """One thread's tcache, its struct at `chunk`: each bin's count of entries, followed from the
    head; entries are user pointers, links mangled, each carrying tcache_key. False if the struct
    does not check out (then nothing of it is counted)."""
    ts = layout.structs["tcache_perthread_struct"]
    try:
        raw = mem.read(chunk + 8, 8 + ts["size"])
    except Unreadable:
        return False
    if _u(raw, 0) & ~FLAGS != layout.tcache_struct_chunk:
        return False
    body = raw[8:]
    counts = struct.unpack_from(f"<{layout.tcache_bins}H", body, ts["counts"])
    heads = struct.unpack_from(f"<{layout.tcache_bins}Q", body, ts["entries"])
    if any(c > limit for c in counts) or any((c == 0) != (h == 0) for c, h in zip(counts, heads)):
        return False
    found: list[tuple[int, int]] = []
    for i, (n, e) in enumerate(zip(counts, heads)):
        size = 32 + 16 * i
        for _ in range(n):
            if not e or e & 15 or not inside(e):
                cached.broken += 1
                break
            try:
                entry = mem.read(e - 8, 24)
            except Unreadable:
                cached.broken += 1
                break
            if _u(entry, 0) & ~FLAGS != size or (key is not None and _u(entry, 16) != key):
                cached.broken += 1
                break
            found.append((e - 16, size))
            e = reveal(e, _u(entry, 8)) if layout.safe_linking else _u(entry, 8)
    cached.tcaches.append(chunk)
    for c, size in found:
        if c not in cached.chunks:
            cached.chunks[c] = size
            cached.tcache_chunks += 1
            cached.tcache_bytes += size
    return True
