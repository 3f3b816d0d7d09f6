"""A CPython process to inspect while it pauses (`alloclab inspect`'s tests): N (300,000) small
objects kept, in pymalloc's arenas, beside MIB (16) MiB of a private anonymous mapping of its own (the
mmap module), written through, which is not pymalloc's. It says "paused" on stderr, waits for a line
on stdin, then prints how many it kept."""

import mmap
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 300_000
mib = int(sys.argv[2]) if len(sys.argv) > 2 else 16
objs = [(i, str(i), [i]) for i in range(n)]
own = mmap.mmap(-1, mib << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
own.write(b"\x01" * (mib << 20))
sys.stderr.write("paused\n")
sys.stderr.flush()
sys.stdin.readline()
print(len(objs), own[0])
