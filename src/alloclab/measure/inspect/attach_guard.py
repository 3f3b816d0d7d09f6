"""Whether a stop of the process may call its allocator: every thread stopped, and none inside the
allocator's frames.

A call into the allocator while a thread is inside it could wait forever on a lock that thread
holds, or, on that very thread, run the allocator inside itself. So at each stop every thread's
instruction pointer and the return address of each of its frames (unwind.py: the objects' own
call-frame information) are checked against the allocator library's executable mappings. Where a
chain cannot be followed to its outermost frame, the rest of that stack is scanned instead, word by
word up to SCAN_BYTES: a word in the allocator's code right after a call instruction is taken for a
return address into it (conservatively: a stale one refuses the stop, never the other way round).
A thread that did not stop (uninterruptible sleep) refuses the stop as well."""

from __future__ import annotations

import os
from dataclasses import dataclass

from alloclab.measure.inspect import unwind
from alloclab.measure.inspect.memory import Memory, Unreadable
from alloclab.measure.inspect.procfs import Mapping, ranges, threads
from alloclab.measure.inspect.ptrace import Stop

SCAN_BYTES = 32 << 10
SCOUT_BYTES = 256 << 10      # of each stack, copied at the scouting stop to unwind after it


@dataclass
class Inside:
    tid: int
    where: str          # in words: "its instruction pointer is in libjemalloc.so.2 (0x...)"


def _call_before(text: bytes, off: int) -> bool:
    """Whether the bytes just before `off` end with a call instruction: `call rel32` (e8), or an
    indirect `call` (ff /2, any addressing form, an optional REX prefix before it)."""
    if off >= 5 and text[off - 5] == 0xE8:
        return True
    for n in range(2, 8):
        at = off - n
        if at < 0:
            break
        if text[at] != 0xFF:
            continue
        modrm = text[at + 1]
        if (modrm >> 3) & 7 != 2:
            continue
        mod, rm = modrm >> 6, modrm & 7
        length = 2
        if mod != 3 and rm == 4:
            length += 1
            if mod == 0 and text[at + 2] & 7 == 5:
                length += 4
        if mod == 0 and rm == 5:
            length += 4
        elif mod == 1:
            length += 1
        elif mod == 2:
            length += 4
        if length == n:
            return True
    return False


class Guard:
    """The allocator library's code (its executable mappings, read once before any stop) and the
    process's objects to unwind through."""

    def __init__(self, pid: int, maps: list[Mapping], library: str, mem: Memory):
        self.pid, self.mem, self.library = pid, mem, os.path.basename(library)
        self.text = [(m.lo, m.hi) for m in maps if m.path == library and "x" in m.perms]
        self.code = {lo: mem.read(lo, hi - lo) for lo, hi in self.text}
        self.mods = unwind.modules(pid, maps, mem.read)
        self.scanned = 0             # threads whose chain could not be followed and were scanned

    def _in_text(self, pc: int) -> int | None:
        return next((lo for lo, hi in self.text if lo <= pc < hi), None)

    def _word(self, at: int) -> int:
        try:
            return int.from_bytes(self.mem.read(at, 8), "little")
        except Unreadable:
            raise LookupError(at) from None

    def scout(self, stop: Stop) -> list[tuple]:
        """In a first, short stop: each thread's registers and the top of its stack, copied, for
        warm() to unwind once the process runs again."""
        out = []
        stacks = ranges(self.pid)
        for tid in stop.stopped:
            r = stop.regs.get(tid)
            stack = next(((m.lo, m.hi) for m in stacks if r and m.lo <= r.sp < m.hi), None)
            if stack is None:
                continue
            try:
                out.append((r, stack, self.mem.read(r.sp, min(stack[1], r.sp + SCOUT_BYTES) - r.sp)))
            except Unreadable:
                continue
        return out

    def warm(self, scouted: list[tuple]) -> None:
        """Unwinds the scouted copies, outside any stop: the functions' call-frame tables are
        decoded now (a few ms each), so that the stop that decides decodes few if any."""
        for r, stack, data in scouted:
            def word(at: int, base=r.sp, data=data) -> int:
                if not base <= at <= base + len(data) - 8:
                    raise LookupError(at)
                return int.from_bytes(data[at - base:at - base + 8], "little")
            unwind.unwind(self.mods, r.ip, r.sp, r.bp, word, stack)

    def check(self, stop: Stop) -> list[Inside]:
        """The threads that keep this stop from calling the allocator (none: it may)."""
        out = [Inside(t, "it did not stop in time (uninterruptible sleep?)") for t in stop.running]
        out += [Inside(t, "it began as the others stopped, and runs") for t in threads(self.pid)
                if t not in stop.stopped and t not in stop.running]
        stacks = ranges(self.pid)
        for tid in stop.stopped:
            r = stop.regs.get(tid)
            if r is None:
                out.append(Inside(tid, "its registers could not be read"))
                continue
            stack = next(((m.lo, m.hi) for m in stacks if m.lo <= r.sp < m.hi), None)
            if stack is None:
                out.append(Inside(tid, f"its stack pointer {r.sp:#x} is in no mapping"))
                continue
            chain = unwind.unwind(self.mods, r.ip, r.sp, r.bp, self._word, stack)
            found = self._frames(tid, chain)
            if found is None and not chain.complete:
                self.scanned += 1
                found = self._scan(tid, chain.sp, stack[1], chain.stopped_at)
            if found is not None:
                out.append(found)
        return out

    def _frames(self, tid: int, chain: unwind.Chain) -> Inside | None:
        for k, pc in enumerate(chain.pcs):
            if self._in_text(pc if k == 0 else pc - 1) is not None:
                where = "its instruction pointer" if k == 0 else f"the return address of its frame {k}"
                return Inside(tid, f"{where} is in {self.library} ({pc:#x})")
        return None

    def _scan(self, tid: int, sp: int, stack_hi: int, why: str) -> Inside | None:
        hi = min(stack_hi, sp + SCAN_BYTES)
        try:
            data = self.mem.read(sp & ~7, hi - (sp & ~7))
        except Unreadable:
            return Inside(tid, f"its stack could not be read ({why})")
        for i in range(0, len(data) - 7, 8):
            w = int.from_bytes(data[i:i + 8], "little")
            lo = self._in_text(w)
            if lo is not None and _call_before(self.code[lo], w - lo):
                return Inside(tid, f"a word on its stack, {(sp & ~7) + i - sp} bytes above where its frames could "
                                   f"be followed ({why}), returns into {self.library} ({w:#x})")
        return None
