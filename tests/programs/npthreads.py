"""Worker threads that each take a request, allocate a zeroed result array of 1-12 MiB, fill the
rows the request touches (an eighth of it), reduce it and keep a small summary."""
import sys, threading
import numpy as np

def worker(tasks: int, seed: int, out: list, i: int) -> None:
    rng = np.random.default_rng(seed)
    kept = []
    for t in range(tasks):
        n = int(rng.integers(1, 13)) * (1 << 20) // 8
        a = np.zeros(n)                      # calloc: fresh pages need no clearing
        k = n // 16
        a[:k] = np.arange(k, dtype=np.float64)
        kept.append(float(a[:k].sum()))
        del a
    out[i] = sum(kept)

threads, tasks = (int(x) for x in (sys.argv[1:] + ["4", "400"])[:2])
out = [0.0] * threads
ts = [threading.Thread(target=worker, args=(tasks, s, out, s)) for s in range(threads)]
for t in ts: t.start()
for t in ts: t.join()
print("total", round(sum(out)))
