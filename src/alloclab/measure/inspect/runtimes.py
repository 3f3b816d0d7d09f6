"""What in a process's own anonymous mappings is a language runtime's heap, not glibc's: CPython's
object allocator (pymalloc) arenas, Go's heap, the JVM's heap. Each is told from what the process
maps and what the memory holds, never from the program's name alone, and a mapping that fits no
runtime stays the program's own.

- **CPython**: a process that maps libpython3.X, or whose executable is python3.X. pymalloc carves
  its arenas (1 MiB from 3.10, 256 KiB before; anonymous mmaps the kernel may merge with their
  neighbours) into pools (16 KiB from 3.10, 4 KiB before), each aligned to its size and starting
  with a pool_header whose size class fixes its last block's offset: `maxnextoffset` is exactly
  the pool's size less one block. The present pages at each pool-aligned address of the program's
  own mappings are read for that header (48 bytes each, while the process runs: a pool that changes
  meanwhile is one more or one fewer); every arena with a valid pool counts from its first pool
  to its end.
- **Go**: an executable with a `.go.buildinfo` section (a Go program; with cgo, its C code uses
  glibc's malloc, walked as any). Go's runtime reserves its heap arenas at fixed hints on amd64,
  0x00c0 << 32 and then (i << 40) | 0x00c0 << 32: the anonymous mappings there are its heap.
- **The JVM**: a process that maps libjvm.so. HotSpot reserves its Java heap as one range of
  `-Xmx` bytes (committed parts rw, the rest PROT_NONE): the run of adjacent anonymous mappings
  whose span is the heap's largest size as its perf counters give it (the hsperfdata file it maps,
  `sun.gc.generation.N.maxCapacity`). Its resident bytes are the Java heap's.
"""

from __future__ import annotations

import os
import re
import struct

import numpy as np

from alloclab.measure.inspect.memory import PAGE, PRESENT, Memory, Unreadable
from alloclab.measure.inspect.procfs import Mapping, in_root

POOL_HEADER = struct.Struct("<IIQQQIIII")   # ref.count (+pad), freeblock, nextpool, prevpool, arenaindex, szidx, nextoffset, maxnextoffset
POOL_OVERHEAD = 48
ALIGNMENT = 16
NAMES = {"cpython_arenas": "CPython's object arenas", "go_heap": "Go's heap", "java_heap": "the Java heap"}


def cpython_version(maps: list[Mapping], exe: str) -> tuple[int, int] | None:
    for path in [exe, *(m.path for m in maps if m.path.startswith("/"))]:
        m = re.match(r"^(?:libpython|python)3\.(\d+)", os.path.basename(path))
        if m:
            return 3, int(m[1])
    return None


def _present(mem: Memory, lo: int, hi: int) -> np.ndarray:
    e = mem.entries(lo, hi)
    if e is None:
        return np.ones((hi - lo) // PAGE, dtype=bool)
    return (e & np.uint64(PRESENT)) != 0


def _valid_pool(h: bytes, at: int, pool: int) -> tuple[int, int] | None:
    """(arenaindex, szidx) of a pool header that checks out, else None."""
    count, _, free, _, _, arena, szidx, nextoffset, maxnext = POOL_HEADER.unpack(h)
    size = (szidx + 1) * ALIGNMENT
    if szidx >= 64 or maxnext != pool - size or nextoffset > pool or nextoffset < POOL_OVERHEAD:
        return None
    if (nextoffset - POOL_OVERHEAD) % size or count > (pool - POOL_OVERHEAD) // size:
        return None
    if free and not at + POOL_OVERHEAD <= free < at + pool:
        return None
    return arena, szidx


def cpython_arenas(mem: Memory, own: list[Mapping], version: tuple[int, int]) -> list[tuple[int, int]]:
    """The address ranges of pymalloc's arenas in the program's own mappings."""
    pool, arena = (16 << 10, 1 << 20) if version >= (3, 10) else (4 << 10, 256 << 10)
    found: dict[int, int] = {}    # arenaindex -> its first pool seen
    for m in own:
        if not m.writable or m.size < pool:
            continue
        present = _present(mem, m.lo, m.hi)
        first = (m.lo + pool - 1) & ~(pool - 1)
        for at in range(first, m.hi - pool + 1, pool):
            if not present[(at - m.lo) // PAGE]:
                continue
            try:
                got = _valid_pool(mem.read(at, POOL_HEADER.size), at, pool)
            except Unreadable:
                continue
            if got is not None:
                found[got[0]] = min(found.get(got[0], at), at)
    # An arena spans ARENA_SIZE from its base, which is less than a pool below its first pool.
    return _union([(at, at + arena) for at in found.values()])


def _union(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def is_go(pid: int, exe: str) -> bool:
    """Whether the executable has Go's build information section (its section names' table)."""
    try:
        with open(in_root(pid, exe.removesuffix(" (deleted)")), "rb") as fh:
            head = fh.read(64)
            if head[:4] != b"\x7fELF" or head[4] != 2:
                return False
            shoff, = struct.unpack_from("<Q", head, 40)
            shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 58)
            fh.seek(shoff + shstrndx * shentsize)
            sh = fh.read(shentsize)
            off, size = struct.unpack_from("<QQ", sh, 24)
            fh.seek(off)
            names = fh.read(min(size, 1 << 16))
    except (OSError, struct.error):
        return False
    return b"\0.go.buildinfo\0" in names


def go_heap(maps: list[Mapping]) -> list[tuple[int, int]]:
    """Go's heap arenas: runs of adjacent anonymous mappings (reserved and committed) that begin and
    end on a 64 MiB boundary, Go's heapArenaBytes; their writable mappings hold the heap and the
    goroutines' stacks. (Go placed them at 0x00c0 << 32 up to 1.2x, at a random base since; glibc's
    thread heaps are 64 MiB too, and are the walk's, not the program's.)"""
    arena = 64 << 20
    runs = _runs(maps)
    return [(m.lo, m.hi) for r in runs if r[0].lo % arena == 0 and r[-1].hi % arena == 0
            for m in r if m.writable]


def _runs(maps: list[Mapping]) -> list[list[Mapping]]:
    """Adjacent anonymous mappings (reserved and committed alike), run by run."""
    runs: list[list[Mapping]] = []
    for m in maps:
        if not m.is_anon:
            continue
        if runs and runs[-1][-1].hi == m.lo:
            runs[-1].append(m)
        else:
            runs.append([m])
    return runs


def perf_counters(path: str) -> dict[str, int]:
    """HotSpot's hsperfdata file (the one it maps, /tmp/hsperfdata_USER/PID): its long counters."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(1 << 20)
    except OSError:
        return {}
    if data[:4] != b"\xca\xfe\xc0\xc0" or len(data) < 32:
        return {}
    e = "<" if data[4] == 1 else ">"
    entry, n = struct.unpack_from(e + "ii", data, 24)
    out = {}
    for _ in range(max(0, min(n, 10000))):
        if entry + 20 > len(data):
            break
        length, name_off, vector, kind, _, _, _, data_off = struct.unpack_from(e + "iiibbbbi", data, entry)
        if length <= 0:
            break
        end = data.find(b"\0", entry + name_off)
        name = data[entry + name_off:end].decode("ascii", "replace")
        if kind == ord("J") and vector == 0 and entry + data_off + 8 <= len(data):
            out[name] = struct.unpack_from(e + "q", data, entry + data_off)[0]
        entry += length
    return out


def java_heap(pid: int, maps: list[Mapping], kind_of: dict[int, str]) -> list[tuple[int, int]]:
    """HotSpot reserves its Java heap as one range of the heap's largest size, committed (rw) or
    not (PROT_NONE) inside: the run of adjacent anonymous mappings that spans the largest size its
    perf counters give (the generations' maxCapacity, or their sum, as the collector counts them)."""
    perf = next((m.path for m in maps if re.search(r"/hsperfdata_[^/]+/\d+$", m.path)), None)
    c = perf_counters(in_root(pid, perf)) if perf else {}
    # G1 counts a few bytes beyond its regions ("8" for an empty space): the heap is whole MiB.
    young, old = (c.get(f"sun.gc.generation.{g}.maxCapacity", 0) for g in (0, 1))
    mib = 1 << 20
    sizes = {(x + mib // 2) // mib * mib for x in (young + old, old, young) if x >= mib}
    # The program's own mappings only: glibc's heaps are the walk's, and 64 MiB apart.
    anon = [m for m in maps if m.is_anon and (kind_of.get(m.lo) == "own_maps" or not m.writable)]
    best: list[Mapping] = []
    for i, first in enumerate(anon):
        for size in sizes:
            # A window from a mapping's start that ends where a mapping ends: the reservation, its
            # uncommitted parts PROT_NONE or (G1, after an uncommit) not mapped at all.
            inside = [m for m in anon[i:] if m.hi <= first.lo + size]
            if inside and inside[-1].hi == first.lo + size and sum(m.size for m in inside) > sum(m.size for m in best):
                best = inside
    return [(m.lo, m.hi) for m in best if m.writable]


def name(pid: int, exe: str, maps: list[Mapping], kind_of: dict[int, str], mem: Memory,
         resident_in) -> dict[str, tuple[str, int]]:
    """The runtimes' heaps in the program's own mappings (and, for Go, in the mappings its threads'
    stack pointers are in: a goroutine's stack is in Go's heap), as resident bytes by name (NAMES),
    each with the kind of mapping it was counted in before."""
    own = [m for m in maps if kind_of.get(m.lo) == "own_maps" and m.is_anon]
    ranges: dict[str, list[tuple[int, int]]] = {}
    version = cpython_version(maps, exe)
    if version is not None and own:
        ranges["cpython_arenas"] = cpython_arenas(mem, own, version)
    if is_go(pid, exe):
        ranges["go_heap"] = go_heap(maps)
    if any(os.path.basename(m.path) == "libjvm.so" for m in maps):
        ranges["java_heap"] = java_heap(pid, maps, kind_of)
    out: dict[str, tuple[str, int]] = {}
    for key, rs in ranges.items():
        took: dict[str, int] = {}
        for lo, hi in rs:
            for m in maps:
                kind = kind_of.get(m.lo)
                if kind not in ("own_maps", "stacks") or (kind == "stacks" and key != "go_heap") or not m.is_anon:
                    continue
                a, b = max(lo, m.lo), min(hi, m.hi)
                if a < b:
                    took[kind] = took.get(kind, 0) + resident_in(a, b)
        for kind, n in took.items():
            if n:
                out[key if kind == "own_maps" else f"{key}:{kind}"] = (kind, n)
    return out
