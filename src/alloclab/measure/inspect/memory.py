"""Reading another process's memory: /proc/PID/mem in slices, and which pages are resident or
swapped out from /proc/PID/pagemap.

A page that pagemap shows swapped out is never read (reading it would bring it back in, the very
memory the user wants to know about); a page never touched is not read either (its bytes are zero,
and reading it would map the zero page into the process). Both come back as zeros with a mask of
the swapped ones, which the walk counts as unread. Without pagemap (a kernel or container that
hides it) residency comes from smaps, per mapping, and the caller says so."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from alloclab.measure.inspect.procfs import ProcessGone

PAGE = os.sysconf("SC_PAGE_SIZE")
PRESENT, SWAPPED = 1 << 63, 1 << 62
READ_STEP = 1 << 20   # a paced slice is read this much at a time


class Unreadable(Exception):
    """An address that is not mapped (any more)."""


@dataclass
class Slice:
    """Bytes of [lo, hi), zero where a page was not read; `swapped`: per page, read as unknown."""
    lo: int
    hi: int
    data: bytearray
    swapped: np.ndarray

    def unknown(self, at: int, n: int = 16) -> bool:
        """Whether any of [at, at+n) lies on a page that was not read because it is swapped out."""
        a, b = (at - self.lo) // PAGE, (at + n - 1 - self.lo) // PAGE
        return bool(self.swapped[a:b + 1].any())


class Memory:
    def __init__(self, pid: int, use_pagemap: bool = True):
        self.pid = pid
        self.reads = 0
        self.bytes_read = 0
        try:
            self.fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, ProcessLookupError):
            raise ProcessGone(pid) from None
        self.pagemap = None
        if use_pagemap:
            try:
                self.pagemap = os.open(f"/proc/{pid}/pagemap", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                self.pagemap = None

    def close(self) -> None:
        for fd in (self.fd, self.pagemap):
            if fd is not None:
                os.close(fd)

    def _alive(self) -> None:
        if not os.path.exists(f"/proc/{self.pid}/mem"):
            raise ProcessGone(self.pid)

    def read(self, at: int, n: int) -> bytes:
        """n bytes at `at` (small reads: structures, list links). Unreadable where unmapped."""
        try:
            data = os.pread(self.fd, n, at)
        except ProcessLookupError:
            raise ProcessGone(self.pid) from None
        except OSError:
            self._alive()
            raise Unreadable(at) from None
        self.reads += 1
        self.bytes_read += len(data)
        if len(data) != n:
            self._alive()
            if not data:
                raise ProcessGone(self.pid)
            raise Unreadable(at)
        return data

    def word(self, at: int) -> int:
        return int.from_bytes(self.read(at, 8), "little")

    def swapped(self, at: int) -> bool:
        """Whether pagemap shows the page of `at` swapped out (then it is not read)."""
        e = self.entries(at & ~(PAGE - 1), (at & ~(PAGE - 1)) + PAGE)
        return e is not None and bool(int(e[0]) & SWAPPED)

    def entries(self, lo: int, hi: int) -> np.ndarray | None:
        """pagemap's entry of each page of [lo, hi) (page-aligned); None without pagemap."""
        if self.pagemap is None:
            return None
        n = (hi - lo) // PAGE
        try:
            raw = os.pread(self.pagemap, 8 * n, (lo // PAGE) * 8)
        except ProcessLookupError:
            raise ProcessGone(self.pid) from None
        except OSError:
            self._alive()
            raise Unreadable(lo) from None
        if len(raw) != 8 * n:
            self._alive()
            raise Unreadable(lo)
        return np.frombuffer(raw, dtype=np.uint64)

    def slice(self, lo: int, hi: int, entries: np.ndarray | None, buffer: bytearray | None = None,
              until: float | None = None) -> Slice:
        """[lo, hi) (page-aligned): the present pages read, in runs; swapped and untouched ones not.
        `buffer`: at least hi - lo bytes to read into, made before the stop (making 16 MiB, page
        faults and all, took longer than reading them). `until` (perf_counter): read in steps of
        READ_STEP and end the slice early once it has passed, so that a stop stays short even
        when the machine is busy; the slice then ends where the reading stopped."""
        if until is not None and hi - lo > READ_STEP:
            return self._paced(lo, hi, entries, buffer, until)
        n = (hi - lo) // PAGE
        data = buffer if buffer is not None and len(buffer) >= hi - lo else bytearray(hi - lo)
        if len(data) != hi - lo:
            data = memoryview(data)[:hi - lo]
        if entries is None:
            # No pagemap: read it all (the caller refuses mappings smaps shows partly swapped out).
            swapped = np.zeros(n, dtype=bool)
            present = np.ones(n, dtype=bool)
        else:
            present = (entries & np.uint64(PRESENT)) != 0
            swapped = (entries & np.uint64(SWAPPED)) != 0
        edges = np.flatnonzero(np.diff(np.concatenate(([0], present.view(np.int8), [0]))))
        view = memoryview(data)
        if buffer is not None and not present.all():
            np.frombuffer(view, dtype=np.uint8)[:] = 0   # a reused buffer: the pages not read are zero
        for a, b in zip(edges[::2].tolist(), edges[1::2].tolist()):
            want = (b - a) * PAGE
            try:
                got = os.preadv(self.fd, [view[a * PAGE:b * PAGE]], lo + a * PAGE)
            except ProcessLookupError:
                raise ProcessGone(self.pid) from None
            except OSError:
                self._alive()
                raise Unreadable(lo + a * PAGE) from None
            self.reads += 1
            self.bytes_read += got
            if got != want:
                self._alive()
                raise Unreadable(lo + a * PAGE + got)
        return Slice(lo, hi, data, swapped)


    def _paced(self, lo: int, hi: int, entries, buffer, until: float) -> Slice:
        import time
        at = lo
        parts: list[Slice] = []
        while at < hi:
            end = min(hi, at + READ_STEP)
            sub = None if entries is None else entries[(at - lo) // PAGE:(end - lo) // PAGE]
            view = None if buffer is None else memoryview(buffer)[at - lo:end - lo]
            parts.append(self.slice(at, end, sub, view))
            at = end
            if time.perf_counter() > until:
                break
        data = memoryview(buffer)[:at - lo] if buffer is not None else b"".join(bytes(p.data) for p in parts)
        return Slice(lo, at, data, np.concatenate([p.swapped for p in parts]))


def resident_bytes(present: np.ndarray, base: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The bytes of each [lo, hi) that lie on resident pages, given `present` per page from `base`
    (page-aligned). Vectorized: the heaps hold millions of chunks."""
    lo = np.asarray(lo, dtype=np.int64) - base
    hi = np.asarray(hi, dtype=np.int64) - base
    keep = hi > lo
    out = np.zeros(lo.shape, dtype=np.int64)
    if not keep.any():
        return out
    lo, hi = lo[keep], hi[keep]
    p = present.astype(np.int64)
    c = np.concatenate(([0], np.cumsum(p)))
    a, b = lo // PAGE, (hi - 1) // PAGE
    same = a == b
    first = np.where(same, (hi - lo) * p[a], ((a + 1) * PAGE - lo) * p[a])
    last = np.where(same, 0, (hi - b * PAGE) * p[b])
    middle = np.where(same, 0, (c[b] - c[np.minimum(a + 1, b)]) * PAGE)
    out[keep] = first + last + middle
    return out
