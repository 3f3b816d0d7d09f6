"""A threaded Python worker: THREADS threads take turns on a batch each, made of bytes objects too
large for Python's own small-object allocator (malloc serves them); each keeps one result of its
batch. Under glibc every thread allocates from an arena of its own, where what it freed stays.
Usage: pyturns.py [THREADS] [ROUNDS] [KIB_PER_BATCH]; prints the results' digest and its VmRSS
and anonymous RSS at the end."""

import hashlib
import sys
import threading

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 16
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
kib = int(sys.argv[3]) if len(sys.argv) > 3 else 8192
turn = threading.Condition()
state = {"next": 0}
kept = []


def work(me: int) -> None:
    for r in range(rounds):
        with turn:
            turn.wait_for(lambda: state["next"] == me + r * threads)
        batch = [bytes([(me + i) % 251]) * (600 + (i * 37) % 1400) for i in range(kib * 1024 // 1300)]
        kept.append((me, r, hashlib.md5(b"".join(batch[::97])).hexdigest()[:8], len(batch)))
        del batch
        with turn:
            state["next"] += 1
            turn.notify_all()


ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
for t in ts:
    t.start()
for t in ts:
    t.join()
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
print("batches", len(kept), "digest", hashlib.sha256(repr(sorted(kept)).encode()).hexdigest()[:16])
print(f"rss_kb {status['VmRSS'].split()[0]} anon_kb {status['RssAnon'].split()[0]}")
