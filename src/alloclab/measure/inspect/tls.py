"""Each thread's tcache and arena, read from its thread-local variables.

glibc keeps `tcache` and `thread_arena` in libc's block of static TLS, at the same distance below
the thread pointer in every thread. The distance is found once, in the main thread, whose tcache
is the first chunk of the main heap: the word in its TLS that holds that chunk's address, with
`thread_arena` (at the offset the debug symbols give, else the nearest word within 64 bytes)
holding &main_arena. Then each stopped thread's registers give its own."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from alloclab.measure.inspect.memory import PAGE, SWAPPED, Memory, Unreadable

TLS_WINDOW = 64 << 10     # how far below the main thread's pointer libc's TLS block may start


@dataclass
class ThreadVars:
    tcache: dict[int, int]          # thread id -> its tcache struct's chunk (0: none yet)
    arena: dict[int, int]           # thread id -> its arena (0: none yet)
    how: str


def _window(mem: Memory, tp: int) -> tuple[int, np.ndarray]:
    """The words below the thread pointer that can be read, page by page (the block may start in a
    page that is mapped while the one below it is not)."""
    lo = tp - TLS_WINDOW
    top, base = (tp & ~(PAGE - 1)) + PAGE, lo & ~(PAGE - 1)
    try:
        e = mem.entries(base, top)
        if e is None or not (e & np.uint64(SWAPPED)).any():
            return base, np.frombuffer(mem.read(base, top - base), dtype=np.uint64)
    except Unreadable:
        pass   # the window starts below the mapping: page by page, down from the thread pointer
    pages = []
    at = tp & ~(PAGE - 1)
    while at >= lo:
        if mem.swapped(at):
            break
        try:
            pages.append(mem.read(at, PAGE))
        except Unreadable:
            break
        at -= PAGE
    if not pages:
        return tp, np.zeros(0, dtype=np.uint64)
    start = at + PAGE
    return start, np.frombuffer(b"".join(reversed(pages)), dtype=np.uint64)


def thread_vars(mem: Memory, regs: dict, main_tid: int, main_tcache_chunk: int, main_arena: int,
                offsets: dict[str, int]) -> ThreadVars | None:
    """`offsets`: the symbols' TLS offsets of `tcache` and `thread_arena`, where known."""
    main = regs.get(main_tid)
    if main is None or not main_tcache_chunk:
        return None
    tp = main.thread_pointer
    start, words = _window(mem, tp)
    user = main_tcache_chunk + 16
    hits = np.flatnonzero(words == np.uint64(user)).tolist()
    pairs = []
    for j in hits:
        if "tcache" in offsets and "thread_arena" in offsets:
            k = j + (offsets["thread_arena"] - offsets["tcache"]) // 8
            if 0 <= k < len(words) and int(words[k]) == main_arena:
                pairs.append((j, k))
        else:
            near = [k for k in range(max(0, j - 8), min(len(words), j + 9)) if int(words[k]) == main_arena]
            if near:
                pairs.append((j, min(near, key=lambda k: abs(k - j))))
    if len(pairs) != 1:
        return None
    j, k = pairs[0]
    d_tcache, d_arena = tp - (start + 8 * j), tp - (start + 8 * k)
    out = ThreadVars({}, {}, "the threads' own tcache variables (thread pointer, "
                     + ("debug symbols' TLS offsets)" if "tcache" in offsets else "offset found in the main thread)"))
    for tid, r in regs.items():
        try:
            t = mem.word(r.thread_pointer - d_tcache)
            a = mem.word(r.thread_pointer - d_arena)
        except Unreadable:
            continue
        out.tcache[tid] = t - 16 if t else 0
        out.arena[tid] = a
    return out
