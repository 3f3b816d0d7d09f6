"""Worker threads that each take a request, allocate a zeroed result array of 1-12 MiB, fill
the rows this request touches (1/PART of it), reduce them and keep a small
summary.

argv: [THREADS (4)] [TASKS per thread (400)] [PART (16)]"""
import sys, threading
import numpy as np

def worker(tasks: int, part: int, seed: int, out: list, i: int) -> None:
    rng = np.random.default_rng(seed)
    kept = []
    for t in range(tasks):
        n = int(rng.integers(1, 13)) * (1 << 20) // 8
        a = np.zeros(n)                      # calloc: fresh pages need no clearing
        k = n // part
        a[:k] = np.arange(k, dtype=np.float64)
        kept.append(float(a[:k].sum()))
        del a
    out[i] = sum(kept)

threads, tasks, part = (int(x) for x in (sys.argv[1:] + ["4", "400", "16"][len(sys.argv) - 1:])[:3])
out = [0.0] * threads
ts = [threading.Thread(target=worker, args=(tasks, part, s, out, s)) for s in range(threads)]
for t in ts: t.start()
for t in ts: t.join()
print("total", round(sum(out)))
