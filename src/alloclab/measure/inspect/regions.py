"""Whose each mapping is, from outside: the allocator's (glibc's heaps and mapped chunks, given by
the walk; for another allocator every anonymous mapping that is not a stack), stacks (the main one,
and each thread's: the mapping its stack pointer is in, else the anonymous mapping right above a
guard page), the libraries' written pages (their mappings' anonymous pages, and the .bss past each
object's file, from its ELF headers), and the program's own anonymous mappings. Their anonymous
bytes are smaps'; a .bss that the kernel merged with a neighbour is split off by its pages."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from alloclab.measure.inspect.memory import PAGE
from alloclab.measure.inspect.procfs import Mapping, in_root

KINDS = ("allocator", "stacks", "libraries", "own_maps")


@dataclass
class Regions:
    anon: int = 0
    by_kind: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    heap: int = 0               # [heap]: the brk heap's anonymous bytes
    kind_of: dict[int, str] = field(default_factory=dict)   # mapping start -> kind
    bss: dict[int, tuple[int, int]] = field(default_factory=dict)   # mapping start -> .bss range in it

    def categories(self) -> dict[str, int]:
        """What smaps alone shows, in the issue's words: heap, anonymous maps, stacks, file-backed."""
        return {"heap": self.heap, "anonymous maps": self.by_kind["allocator"] + self.by_kind["own_maps"] - self.heap,
                "stacks": self.by_kind["stacks"], "file-backed": self.by_kind["libraries"]}


def _load_segments(path: str) -> tuple[int, list[tuple[int, int, int, int]]] | None:
    """An ELF file's type and its PT_LOAD segments (flags, vaddr, filesz, memsz), from its headers
    alone (64-bit little-endian; anything else is left out)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
            if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return None
            e_type, = struct.unpack_from("<H", head, 16)
            phoff, = struct.unpack_from("<Q", head, 32)
            phentsize, phnum = struct.unpack_from("<HH", head, 54)
            fh.seek(phoff)
            table = fh.read(phentsize * phnum)
    except OSError:
        return None
    out = []
    for i in range(phnum):
        p_type, p_flags, _, p_vaddr, _, p_filesz, p_memsz, _ = struct.unpack_from("<IIQQQQQQ", table, i * phentsize)
        if p_type == 1:   # PT_LOAD
            out.append((p_flags, p_vaddr, p_filesz, p_memsz))
    return e_type, out


def _bss_ranges(pid: int, maps: list[Mapping]) -> list[tuple[int, int]]:
    """The .bss of every mapped ELF object past its file's pages: [lo, hi), page-rounded."""
    out = []
    for path in dict.fromkeys(m.path for m in maps if m.path.startswith("/")):
        first = next((m for m in maps if m.path == path and m.offset == 0), None)
        found = _load_segments(in_root(pid, path)) if first is not None else None
        if not found or not found[1]:
            continue
        e_type, loads = found
        base = first.lo - (loads[0][1] & ~(PAGE - 1)) if e_type == 3 else 0   # ET_DYN: where it was put
        for flags, vaddr, filesz, memsz in loads:
            if flags & 2 and memsz > filesz:   # PF_W
                lo = (base + vaddr + filesz + PAGE - 1) & ~(PAGE - 1)
                hi = (base + vaddr + memsz + PAGE - 1) & ~(PAGE - 1)
                if hi > lo:
                    out.append((lo, hi))
    return out


def stack_of(maps: list[Mapping], sps: list[int]) -> set[int]:
    """The starts of the mappings the stack pointers are in; without pointers, each anonymous
    writable mapping that sits right above a guard page (glibc's thread stacks)."""
    out = {m.lo for m in maps if m.path == "[stack]"}
    if sps:
        for sp in sps:
            m = next((m for m in maps if m.lo <= sp < m.hi), None)
            if m is not None:
                out.add(m.lo)
        return out
    for below, m in zip(maps, maps[1:]):
        if below.hi == m.lo and below.perms.startswith("---") and below.is_anon and below.size <= 1 << 20 \
                and m.is_anon and m.writable:
            out.add(m.lo)
    return out


def classify(pid: int, maps: list[Mapping], allocator: list[tuple[int, int]] | None, sps: list[int],
             resident_in=None) -> Regions:
    """`allocator`: the address ranges the walk found glibc's memory in; None: every
    anonymous mapping that is not a stack or a .bss is the allocator's (another allocator's maps
    cannot be told from the program's from outside). `resident_in(lo, hi)`: resident bytes of a
    range (pagemap), to split a .bss off a merged mapping."""
    r = Regions()
    stacks = stack_of(maps, sps)
    bss = _bss_ranges(pid, maps)
    for m in maps:
        r.anon += m.anon
        if m.path == "[heap]":
            r.heap += m.anon
        if m.is_file:
            kind = "libraries"
        elif m.lo in stacks:
            kind = "stacks"
        elif not m.is_anon and m.path != "[heap]":
            kind = "libraries" if m.anon else "special"
        elif allocator is None:
            kind = "allocator"
        else:
            kind = "allocator" if any(lo < m.hi and m.lo < hi for lo, hi in allocator) else "own_maps"
        part = 0
        if kind in ("allocator", "own_maps") and m.anon:
            for lo, hi in bss:
                if lo < m.hi and hi > m.lo:
                    a, b = max(lo, m.lo), min(hi, m.hi)
                    r.bss[m.lo] = (a, b)
                    part = min(m.anon, resident_in(a, b) if resident_in else (b - a))
        r.kind_of[m.lo] = kind
        if kind != "special":
            r.by_kind["libraries"] += part
            r.by_kind[kind] += m.anon - part
    return r
