"""A Python data worker (the pandas/Dask pattern): it loads arrays of 1-12 MiB one after another,
reduces each to a small summary it keeps, and frees the array. Under glibc the first freed array
raises the mmap threshold, the next ones come from the heap, and its top stays mapped.
Usage: datawork.py [BATCHES] [SECONDS_IDLE]; prints the summaries' digest, and its VmRSS and anonymous RSS
at the end."""

import hashlib
import sys
import time

import numpy as np

batches = int(sys.argv[1]) if len(sys.argv) > 1 else 60
idle = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
rng = np.random.default_rng(7)
summaries = []
for i in range(batches):
    n = int(rng.integers(1, 13)) << 17           # 1-12 MiB of float64
    a = rng.standard_normal(n)
    b = np.sort(a[: n // 4])                      # a temporary of a quarter the size
    summaries.append((i, float(a.mean()), float(a.std()), float(b[len(b) // 2])))
    del a, b
time.sleep(idle)
digest = hashlib.sha256(repr([(i, round(m, 9), round(s, 9), round(q, 9)) for i, m, s, q in summaries]).encode())
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
print(f"summaries {len(summaries)} digest {digest.hexdigest()[:16]}")
print(f"rss_kb {status['VmRSS'].split()[0]} anon_kb {status['RssAnon'].split()[0]}")
