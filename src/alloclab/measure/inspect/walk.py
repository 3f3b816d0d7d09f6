"""A glibc heap, chunk by chunk, from copies of its pages read in slices.

A chunk's header holds its size and, in its lowest bit (PREV_INUSE), whether the chunk before it is
in use; so each header read settles the chunk before it, and the walk streams: a slice ends
wherever it ends, and the walk picks up from the chunk it stopped at. A free chunk's successor
repeats its size in prev_size: a free chunk whose successor disagrees, a size that is not a
multiple of 16, below the smallest chunk or past the heap's end fails glibc's own checks, and the
walk skips to the next place where a run of valid chunks starts (or to the next chunk it knows:
the top, a cached chunk), counting what it skipped as unread. The chunks in the tcache and the
fastbins look in use from the heap (their successor's PREV_INUSE stays set): they are told apart
from their lists (arena.py), not here.

Speed: a heap of millions of equal chunks (a program's objects of one size) is a run; the run's
headers sit at a fixed stride, and numpy reads all their sizes and bits at once. Other chunks go one
at a time."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from alloclab.measure.inspect.memory import Slice

PREV_INUSE, IS_MMAPPED = 1, 2
FLAGS = 7
RESYNC_CHAIN = 8          # valid chunks in a row that make a place to resume at
RESYNC_SCAN = 1 << 20     # how far past a bad header to look for one


@dataclass
class HeapWalk:
    """The walk of one heap: chunks from `start` up to `stop` (the arena's top, or the heap's end
    where the arena's top is in another heap of it). `anchors`: chunk starts known from elsewhere."""
    start: int
    stop: int
    min_chunk: int = 32
    tcache_struct: int = 656
    anchors: list[int] = field(default_factory=list)
    pos: int = 0
    prev: int = -1              # the chunk before pos, not settled yet (-1: none, or not trusted)
    prev_size: int = 0
    in_use: int = 0             # chunks, and their bytes, headers included
    in_use_bytes: int = 0
    free_at: list[np.ndarray] = field(default_factory=list)    # free chunks: starts and sizes
    free_size: list[np.ndarray] = field(default_factory=list)
    tcache_like: list[int] = field(default_factory=list)       # in-use chunks of a tcache struct's size
    # In-use chunks by power-of-two class of their size (class c: [2^(c-1), 2^c)): count, bytes.
    used_count: np.ndarray = field(default_factory=lambda: np.zeros(64, dtype=np.int64))
    used_bytes: np.ndarray = field(default_factory=lambda: np.zeros(64, dtype=np.int64))
    unread: int = 0
    unread_spans: list[tuple[int, int]] = field(default_factory=list)
    fencepost: bool = False     # ended at glibc's fenceposts (a heap followed by another)
    done: bool = False

    def __post_init__(self) -> None:
        self.pos = self.start
        self.anchors = sorted(a for a in self.anchors if self.start < a <= self.stop)

    # --- results --------------------------------------------------------------------------------

    def free_chunks(self) -> tuple[np.ndarray, np.ndarray]:
        if not self.free_at:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return np.concatenate(self.free_at), np.concatenate(self.free_size)

    # --- settling chunks ------------------------------------------------------------------------

    def _settle(self, at: int, size: int, used: bool) -> None:
        if used:
            self.in_use += 1
            self.in_use_bytes += size
            c = int(size).bit_length()
            self.used_count[c] += 1
            self.used_bytes[c] += size
            if size == self.tcache_struct and len(self.tcache_like) < 100_000:
                self.tcache_like.append(at)
        else:
            self.free_at.append(np.array([at], dtype=np.int64))
            self.free_size.append(np.array([size], dtype=np.int64))

    def _skip(self, to: int) -> None:
        if to > self.pos:
            self.unread += to - self.pos
            self.unread_spans.append((self.pos, to))
        self.pos, self.prev = to, -1

    def finish_at_top(self, top_word: int | None) -> None:
        """The top's own header settles the last chunk; without it the last chunk stays unread."""
        if self.prev >= 0:
            if top_word is None:
                self.unread += self.prev_size
            else:
                self._settle(self.prev, self.prev_size, bool(top_word & PREV_INUSE))
        self.prev = -1
        self.done = True

    # --- the walk ---------------------------------------------------------------------------------

    def _valid(self, words, base: int, hi: int, at: int) -> int:
        """The size of a valid chunk header at `at`, else 0."""
        i = (at - base) >> 3
        if at + 16 > hi:
            return 0
        size_word = int(words[i + 1])
        size = size_word & ~FLAGS
        if size_word & IS_MMAPPED or size < self.min_chunk or size & 15 or at + size > self.stop:
            return 0
        return size

    def _resync(self, sl: Slice, words, bad: int) -> None:
        """From a chunk that fails the checks: the next place where RESYNC_CHAIN valid chunks follow
        one another (or reach the top), else the next known chunk."""
        limit = min(sl.hi - 16, bad + RESYNC_SCAN)
        nxt_anchor = next((a for a in self.anchors if a > bad), self.stop)
        at = bad + 16
        while at < limit and at < nxt_anchor:
            p, ok = at, 0
            while ok < RESYNC_CHAIN and p < self.stop:
                s = 0 if sl.unknown(p) else self._valid(words, sl.lo, sl.hi, p)
                if not s:
                    break
                p += s
                ok += 1
            if ok == RESYNC_CHAIN or (ok and p == self.stop):
                self._skip(at)
                return
            at += 16
        self._skip(nxt_anchor)

    def feed(self, sl: Slice) -> None:
        """Walks as far as this slice's copy reaches."""
        words = np.frombuffer(sl.data, dtype=np.uint64)
        lo, hi = sl.lo, sl.hi
        w = memoryview(sl.data).cast("Q")
        while not self.done and self.pos < self.stop and self.pos + 16 <= hi and self.pos >= lo:
            pos = self.pos
            if sl.unknown(pos):
                self._resync(sl, w, pos)
                continue
            i = (pos - lo) >> 3
            size_word = w[i + 1]
            size = size_word & ~FLAGS
            # A fencepost pair (16 | P, then 0 | P): the end of this heap's chunks.
            if size == 16 and pos + 32 <= hi and w[i + 3] & ~FLAGS == 0:
                if self.prev >= 0:
                    self._settle(self.prev, self.prev_size, bool(size_word & PREV_INUSE))
                self.prev, self.fencepost, self.done = -1, True, True
                self.pos = pos + 32
                return
            if size_word & IS_MMAPPED or size < self.min_chunk or size & 15 or pos + size > self.stop:
                self._resync(sl, w, pos)
                continue
            if self.prev >= 0:
                used = bool(size_word & PREV_INUSE)
                if not used and w[i] != self.prev_size:   # glibc: "corrupted size vs. prev_size"
                    self.unread += self.prev_size
                else:
                    self._settle(self.prev, self.prev_size, used)
            if size == self.prev_size and self.prev >= 0:
                self._run(words, lo, hi, pos, size)
                continue
            self.prev, self.prev_size = pos, size
            self.pos = pos + size

    def _run(self, words: np.ndarray, lo: int, hi: int, pos: int, size: int) -> None:
        """From pos, chunks of `size` for as long as they last (within the slice and the heap):
        their sizes and PREV_INUSE bits at one stride. The chunk at pos itself is the run's first."""
        stride = size >> 3
        fit = min((hi - 16 - pos) // size + 1, (self.stop - pos) // size)
        i0 = ((pos - lo) >> 3) + 1
        k = fit
        probe = 16
        while True:
            n = min(probe, fit)
            seg = words[i0:i0 + stride * n:stride]
            bad = np.flatnonzero((seg & np.uint64(~FLAGS & 0xFFFFFFFFFFFFFFFF)) != np.uint64(size))
            if len(bad):
                k = int(bad[0])
                break
            if n == fit:
                k = fit
                break
            probe *= 16
        if k <= 1:
            self.prev, self.prev_size, self.pos = pos, size, pos + size
            return
        # Chunks pos .. pos+(k-1)*size; the bit of chunk j settles chunk j-1 (j = 1..k-1).
        seg = words[i0:i0 + stride * k:stride]
        bits = (seg[1:] & np.uint64(PREV_INUSE)).astype(bool)
        used = int(bits.sum())
        self.in_use += used
        self.in_use_bytes += used * size
        c = int(size).bit_length()
        self.used_count[c] += used
        self.used_bytes[c] += used * size
        starts = pos + size * np.arange(k - 1, dtype=np.int64)
        free = np.flatnonzero(~bits)
        if len(free):
            # glibc's check: a free chunk's successor repeats its size.
            echo = words[i0 - 1 + stride * (free + 1)]
            ok = echo == np.uint64(size)
            self.unread += int((~ok).sum()) * size
            self.free_at.append(starts[free[ok]])
            self.free_size.append(np.full(int(ok.sum()), size, dtype=np.int64))
        if size == self.tcache_struct and len(self.tcache_like) < 100_000:
            self.tcache_like += starts[bits].tolist()[:100_000]
        last = pos + size * (k - 1)
        self.prev, self.prev_size, self.pos = last, size, last + size
