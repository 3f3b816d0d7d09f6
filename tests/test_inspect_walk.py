"""The heap walk's logic on heaps laid out here, byte by byte as glibc lays them out (pure logic: the
walk of real processes' heaps is checked against malloc_info in test_inspect_oracle_e2e.py): a
chunk's PREV_INUSE bit settles the chunk before it, runs of equal chunks go by numpy and give the
same answer as one at a time, a free chunk's size is checked against its successor's prev_size, and
a chunk that fails the checks is skipped to the next place where valid chunks follow one another,
counted as unread. Also the residency of byte ranges over pages, and safe-linking's links."""

from __future__ import annotations

import struct

import numpy as np

from alloclab.measure.inspect.arena import reveal
from alloclab.measure.inspect.memory import PAGE, Slice, resident_bytes
from alloclab.measure.inspect.walk import HeapWalk

BASE = 0x555555554000


def heap(chunks: list[tuple[int, bool]], top: int = 4096) -> tuple[bytearray, int, list[int]]:
    """Chunks (size, in use) from BASE, then a top of `top` bytes; each chunk's PREV_INUSE bit says
    whether the one before it is in use, and a free chunk's successor repeats its size."""
    total = sum(s for s, _ in chunks) + top
    data = bytearray(total + PAGE - total % PAGE)
    at, prev_used, prev_size, starts = 0, True, 0, []
    for size, used in chunks + [(top, True)]:
        struct.pack_into("<QQ", data, at, 0 if prev_used else prev_size, size | (1 if prev_used else 0))
        starts.append(BASE + at)
        at += size
        prev_used, prev_size = used, size
    return data, BASE + total - top, starts


def walk(data: bytearray, stop: int, swapped=None) -> HeapWalk:
    w = HeapWalk(BASE, stop)
    pages = len(data) // PAGE
    w.feed(Slice(BASE, BASE + len(data), data, np.zeros(pages, dtype=bool) if swapped is None else swapped))
    top_word = struct.unpack_from("<Q", data, stop - BASE + 8)[0]
    w.finish_at_top(top_word)
    return w


def test_in_use_and_free_chunks_are_told_by_their_successors_bit():
    data, top, starts = heap([(48, True), (1024, False), (64, True), (32, True), (512, False), (80, True)])
    w = walk(data, top)
    at, size = w.free_chunks()
    assert sorted(zip(at.tolist(), size.tolist())) == [(starts[1], 1024), (starts[4], 512)]
    assert (w.in_use, w.in_use_bytes) == (4, 48 + 64 + 32 + 80)
    assert w.unread == 0 and w.done


def test_a_run_of_equal_chunks_gives_what_one_at_a_time_gives():
    rng = np.random.default_rng(1)
    layout = [(112, bool(u)) for u in rng.random(5000) > 0.3] + [(48, True)] + [(112, True)] * 300
    # no two free chunks side by side: glibc would have merged them
    layout = [(s, u or (i > 0 and not layout[i - 1][1])) for i, (s, u) in enumerate(layout)]
    data, top, starts = heap(layout)
    w = walk(data, top)
    free = [(a, s) for a, (s, u) in zip(starts, layout) if not u]
    at, size = w.free_chunks()
    assert sorted(zip(at.tolist(), size.tolist())) == free
    assert w.in_use == sum(u for _, u in layout) and w.in_use_bytes == sum(s for s, u in layout if u)


def test_a_free_chunk_whose_successor_disagrees_is_unread():
    data, top, starts = heap([(64, True), (256, False), (64, True), (64, True)])
    struct.pack_into("<Q", data, starts[2] - BASE, 999)   # prev_size of the chunk after the free one
    w = walk(data, top)
    assert w.unread == 256 and len(w.free_chunks()[0]) == 0


def test_a_broken_header_is_skipped_to_where_valid_chunks_resume_and_counted_unread():
    layout = [(64, True)] * 4 + [(96, True)] * 20
    data, top, starts = heap(layout)
    struct.pack_into("<Q", data, starts[3] - BASE + 8, 0x7)   # a size that cannot be
    w = walk(data, top)
    assert w.unread > 0 and w.done
    # What follows the break is walked again: all but the broken chunk (and the one its header settles).
    assert w.in_use >= len(layout) - 3
    assert w.unread_spans and w.unread_spans[0][0] == starts[3]


def test_a_swapped_page_is_never_read_and_its_chunks_are_unread():
    layout = [(512, True)] * 24
    data, top, starts = heap(layout)
    swapped = np.zeros(len(data) // PAGE, dtype=bool)
    swapped[1] = True
    for i in range(PAGE, 2 * PAGE):   # what a swapped page reads as: nothing
        data[i] = 0
    w = walk(data, top, swapped)
    assert w.unread >= PAGE - 512 and w.done


def test_fenceposts_end_a_heap():
    data, _, starts = heap([(64, True), (64, True)], top=64)
    # a fencepost pair where the top would be: 16 | PREV_INUSE, then 0 | PREV_INUSE
    end = starts[2] - BASE
    struct.pack_into("<QQQQ", data, end, 0, 16 | 1, 0, 1)
    w = HeapWalk(BASE, BASE + end + 64)
    w.feed(Slice(BASE, BASE + len(data), data, np.zeros(len(data) // PAGE, dtype=bool)))
    assert w.fencepost and w.done and w.in_use == 2


def test_resident_bytes_count_only_present_pages_and_their_parts():
    present = np.array([1, 0, 1, 1], dtype=bool)
    lo = np.array([0, 100, PAGE - 10, 0])
    hi = np.array([PAGE, 200, 2 * PAGE + 10, 4 * PAGE])
    got = resident_bytes(present, 0, lo, hi).tolist()
    assert got == [PAGE, 100, 10 + 10, 3 * PAGE]


def test_safe_linking_reveals_what_glibc_protected():
    pos, target = 0x5555_5555_9ab0, 0x5555_5555_9c40
    protected = (pos >> 12) ^ target   # glibc's PROTECT_PTR
    assert reveal(pos, protected) == target
    assert reveal(pos, pos >> 12) == 0   # the end of a list
