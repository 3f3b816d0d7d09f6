"""glibc's mapped chunks (blocks above the mmap threshold), found from the maps: an anonymous
mapping whose first words are a chunk header with IS_MMAPPED set, prev_size 0 and a size that
ends on a page boundary inside the mapping. Adjacent mapped chunks merged into one mapping by the
kernel are followed one after another."""

from __future__ import annotations

from dataclasses import dataclass, field

from alloclab.measure.inspect.memory import PAGE, Memory, Unreadable
from alloclab.measure.inspect.procfs import Mapping

IS_MMAPPED, FLAGS = 2, 7


@dataclass
class Mapped:
    chunks: list[tuple[int, int]] = field(default_factory=list)   # (chunk address, size)
    mappings: set[int] = field(default_factory=set)                # starts of the mappings holding them

    @property
    def bytes(self) -> int:
        return sum(s for _, s in self.chunks)


def find(mem: Memory, maps: list[Mapping], skip: set[int], bss: dict[int, tuple[int, int]], tick) -> Mapped:
    out = Mapped()
    for m in maps:
        if not (m.is_anon and m.writable) or m.lo in skip:
            continue
        at = m.lo
        if m.lo in bss and bss[m.lo][0] == m.lo:
            at = bss[m.lo][1]   # a .bss merged in front: the chunks start past it
        while at + 16 <= m.hi:
            tick()
            if mem.swapped(at):
                break
            try:
                prev_size, size_word = (int.from_bytes(b, "little") for b in
                                        (lambda d: (d[:8], d[8:]))(mem.read(at, 16)))
            except Unreadable:
                break
            size = size_word & ~FLAGS
            if not size_word & IS_MMAPPED or prev_size or size < PAGE or size % PAGE or at + size > m.hi:
                break
            out.chunks.append((at, size))
            out.mappings.add(m.lo)
            at += size
    return out
