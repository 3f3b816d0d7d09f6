"""gdb script (gdb -p PID -batch -x bench/pg_heapwalk.py, libc6-dbg installed): walk a PostgreSQL
backend's main heap, chunk by chunk from mp_.sbrk_base to the top chunk, and sum the in-use chunks
reaching above 20 MB by the memory context they belong to: a chunk that PostgreSQL malloc'd is an AllocSet
block, whose header's first word points at its context, whose name sits 56 bytes in (PostgreSQL 15,
x86-64). The chunks nearest the top are what keeps glibc from trimming the heap (issue 33)."""
import collections

import gdb

LOW = 20 << 20
inf = gdb.selected_inferior()


def u64(addr: int) -> int:
    return int.from_bytes(bytes(inf.read_memory(addr, 8)), "little")


def cstr(addr: int) -> str:
    try:
        return bytes(inf.read_memory(addr, 40)).split(b"\0")[0].decode(errors="replace")
    except gdb.MemoryError:
        return "?"


base = int(gdb.parse_and_eval("(unsigned long) mp_.sbrk_base"))
top = int(gdb.parse_and_eval("(unsigned long) main_arena.top"))
chunks, a = [], base
while a < top:
    size = u64(a + 8) & ~7
    if not size:
        break
    chunks.append((a, size, u64(a + size + 8) & 1 if a + size <= top else 1))
    a += size
print(f"heap: top chunk at +{(top - base) / 2**20:.1f} MB, {len(chunks)} chunks below it")
groups = collections.OrderedDict()
for a, size, inuse in chunks:
    if not inuse or a + size - base < LOW:
        continue
    name = "? (not an AllocSet block)"
    try:
        aset = u64(a + 16)
        if u64(aset + 24):
            name = cstr(u64(aset + 56))
    except gdb.MemoryError:
        pass
    g = groups.setdefault(name, [0, 0, a - base, 0])
    g[0], g[1], g[3] = g[0] + 1, g[1] + size, a - base
for name, (n, size, lo, hi) in groups.items():
    print(f"  {name[:32]:32s} {n:5d} chunks {size / 2**20:7.2f} MB from +{lo / 2**20:.1f} to +{hi / 2**20:.1f} MB")
free = [(a - base, s) for a, s, i in chunks if not i and a + s - base >= LOW]
print(f"  free chunks reaching above +20 MB: {sum(s for _, s in free) / 2**20:.1f} MB"
      + (f", the largest {max(s for _, s in free) / 2**20:.1f} MB" if free else ""))
