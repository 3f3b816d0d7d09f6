"""A threaded CPython service's hot path: THREADS threads each decompress ITEMS zlib payloads of
0.2-2.3 MiB (the bytes objects are malloc'd by zlib's C code, not by CPython's object allocator),
keep the last WINDOW results as a reply cache would, and checksum them; then the threads end and the
process rests with nothing held.

Why this class: glibc gives each thread an arena, and after the first free of a chunk above the mmap
threshold that threshold rises, so later payloads of that size come from the arenas' heaps, which
keep what is freed; an allocator with size classes and thread caches is faster here and holds less.

KIND "counter" (the default) builds payloads with a counter in every record, "runs" from one
repeated record: zlib inflates those at memory speed, and the share of time in page faults grows.

Usage: python3 zthreads.py [THREADS=8] [ITEMS=60] [WINDOW=3] [KIND=counter|runs]
"""

import sys
import threading
import zlib


def payloads(kind: str, count: int = 12) -> list[bytes]:
    out = []
    for i in range(count):
        size = 200_000 + i * (2_100_000 // (count - 1))
        if kind == "runs":
            # Long runs inflate at memory speed, so the allocator's page faults weigh as in a service
            # whose replies are mostly repeated records.
            piece = (b"alloclab-payload;" * (size // 17 + 1))[:size]
        else:
            # Compressible but not trivially: a repeated pattern with a counter in it.
            piece = b"".join(b"%08d:alloclab-payload;" % j for j in range(size // 22 + 1))[:size]
        out.append(zlib.compress(piece, 1))
    return out


def worker(blobs: list[bytes], items: int, window: int, seed: int, sums: list[int]) -> None:
    kept: list[bytes] = []
    total = 0
    for i in range(items):
        data = zlib.decompress(blobs[(seed * 7 + i * 5) % len(blobs)])
        kept.append(data)
        if len(kept) > window:
            kept.pop(0)
        total += zlib.crc32(data[:4096])
    sums[seed] = total


def main() -> None:
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    items = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    window = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    blobs = payloads(sys.argv[4] if len(sys.argv) > 4 else "counter")
    sums = [0] * threads
    ts = [threading.Thread(target=worker, args=(blobs, items, window, k, sums)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(f"checksum {sum(sums) & 0xffffffff:08x}")
    # What the process holds at rest, as a hand measurement reads it (bench/zthreads_hand.py).
    with open("/proc/self/status") as f:
        anon = next(line.split()[1] for line in f if line.startswith("RssAnon:"))
    print(f"rest_anon_kb {anon}", file=sys.stderr)


if __name__ == "__main__":
    main()
