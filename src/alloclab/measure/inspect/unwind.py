"""A stopped thread's call chain, read from outside: its instruction pointer and the return address
of each frame above it, unwound as a debugger does without debug symbols, by the call-frame
information every x86_64 object carries for C++ exceptions (`.eh_frame`, found through the binary
search table of `.eh_frame_hdr`). pyelftools decodes one FDE at a time; nothing is compiled.

A frame's rule gives its canonical frame address (CFA: a register plus an offset, or for a signal
frame the stack pointer saved in the kernel's ucontext), where its return address is, and where
the caller's rbp was saved. Where the chain cannot be followed (code without unwind information: a
JIT's, a PLT stub's expression, a stack that does not check out) the unwinder says so, and the
caller falls back to scanning the stack's words (attach_guard.py)."""

from __future__ import annotations

import functools
import io
import os
import struct
from dataclasses import dataclass, field

import numpy as np

from alloclab.measure.inspect.procfs import Mapping, in_root

RSP, RBP, RA = 7, 6, 16         # DWARF's numbers of x86_64's rsp, rbp and the return address column
MAX_FRAMES = 256
DW_OP_DEREF, DW_OP_BREG0, DW_OP_BREG31 = 0x06, 0x70, 0x8F


@dataclass
class Chain:
    pcs: list[int] = field(default_factory=list)   # the instruction pointer, then each return address
    complete: bool = False       # reached the outermost frame (its return address undefined)
    stopped_at: str = ""         # why it ended early, where it did
    sp: int = 0                  # the stack pointer of the frame where it ended


class _Rows:
    """One object's .eh_frame: the row of the call-frame table that covers an address."""

    def __init__(self, data: bytes):
        from elftools.dwarf.callframe import CallFrameInfo
        from elftools.dwarf.structs import DWARFStructs
        from elftools.elf.elffile import ELFFile
        elf = ELFFile(io.BytesIO(data))
        hdr, eh = elf.get_section_by_name(".eh_frame_hdr"), elf.get_section_by_name(".eh_frame")
        self.ok = hdr is not None and eh is not None
        self.segments = [(s["p_vaddr"], s["p_offset"]) for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
        self.dyn = elf["e_type"] == "ET_DYN"
        if not self.ok:
            return
        raw = hdr.data()
        version, _, count_enc, table_enc = raw[:4]
        # datarel|sdata4 for the table, udata4 for the count: what every linker writes.
        if version != 1 or table_enc != 0x3B or count_enc != 0x03:
            self.ok = False
            return
        count, = struct.unpack_from("<I", raw, 8)
        table = np.frombuffer(raw, dtype="<i4", count=2 * count, offset=12).reshape(-1, 2).astype(np.int64)
        self.starts = table[:, 0] + hdr["sh_addr"]
        self.fdes = table[:, 1] + hdr["sh_addr"] - eh["sh_addr"]
        self.cfi = CallFrameInfo(io.BytesIO(eh.data()), eh["sh_size"], eh["sh_addr"],
                                 DWARFStructs(little_endian=True, dwarf_format=32, address_size=8), for_eh_frame=True)

    def row(self, vaddr: int):
        """(the row, whether its CIE marks a signal frame) for a link-time address; None outside."""
        if not self.ok:
            return None
        i = int(np.searchsorted(self.starts, vaddr, side="right")) - 1
        if i < 0:
            return None
        start, end, table, signal_frame = self._fde(i)
        if not start <= vaddr < end:
            return None
        rows = [r for r in table if r["pc"] <= vaddr]
        return (rows[-1] if rows else None), signal_frame

    @functools.lru_cache(maxsize=4096)
    def _fde(self, i: int):
        """The i-th function's table, decoded once (a few ms each: done where it can be, before a
        stop, by warm())."""
        # pyelftools parses a whole section at a time in its public interface; one entry is enough.
        fde = self.cfi._parse_entry_at(int(self.fdes[i]))
        start = fde.header["initial_location"]
        return (start, start + fde.header["address_range"], fde.get_decoded().table,
                b"S" in bytes(fde.cie.header.get("augmentation", b"")))


@functools.lru_cache(maxsize=64)
def _rows_of_file(path: str, size: int, mtime: float) -> _Rows | None:
    try:
        with open(path, "rb") as fh:
            return _Rows(fh.read())
    except Exception:   # noqa: BLE001 - an object whose ELF cannot be read has no rows: the chain stops there
        return None


@dataclass
class Module:
    path: str
    ranges: list[tuple[int, int]]     # its executable mappings
    base: int                         # load bias: run-time address less link-time address
    rows: _Rows | None


def modules(pid: int, maps: list[Mapping], read) -> list[Module]:
    """Every object with executable mappings, with its load bias and call-frame rows; `read(at, n)`
    reads the process's memory (the vDSO has no file)."""
    out = []
    for path in dict.fromkeys(m.path for m in maps if "x" in m.perms and (m.path.startswith("/") or m.path == "[vdso]")):
        mine = [m for m in maps if m.path == path]
        ranges = [(m.lo, m.hi) for m in mine if "x" in m.perms]
        rows = None
        if path == "[vdso]":
            try:
                rows = _Rows(read(mine[0].lo, mine[-1].hi - mine[0].lo))
            except Exception:   # noqa: BLE001 - see _rows_of_file
                rows = None
            base = mine[0].lo
        else:
            file = in_root(pid, path.removesuffix(" (deleted)"))
            try:
                st = os.stat(file)
                rows = _rows_of_file(file, st.st_size, st.st_mtime)
            except OSError:
                rows = None
            first = next((m for m in mine if m.offset == 0), None)
            base = 0
            if rows is not None and rows.dyn and rows.segments and first is not None:
                base = first.lo - (rows.segments[0][0] & ~0xFFF)
        out.append(Module(path, ranges, base, rows))
    return out


def module_at(mods: list[Module], pc: int) -> Module | None:
    return next((m for m in mods if any(lo <= pc < hi for lo, hi in m.ranges)), None)


def _expr(ops, regs: dict[int, int], word) -> int | None:
    """The two DWARF expressions of x86_64's signal frames: `DW_OP_bregN off` (an address) and
    `DW_OP_bregN off; DW_OP_deref` (the word there). Anything else is not followed."""
    ops = list(ops)
    if not ops or not DW_OP_BREG0 <= ops[0] <= DW_OP_BREG31:
        return None
    reg = ops[0] - DW_OP_BREG0
    off, shift, i = 0, 0, 1
    while i < len(ops):
        b = ops[i]
        off |= (b & 0x7F) << shift
        shift += 7
        i += 1
        if not b & 0x80:
            if b & 0x40:
                off -= 1 << shift
            break
    if reg not in regs:
        return None
    at = regs[reg] + off
    rest = ops[i:]
    if not rest:
        return at
    return word(at) if rest == [DW_OP_DEREF] else None


def unwind(mods: list[Module], rip: int, rsp: int, rbp: int, word, stack: tuple[int, int]) -> Chain:
    """The chain from a stopped thread's registers. `word(at)` reads 8 bytes of its memory;
    `stack` is its stack's mapping: a frame address outside it ends the chain as unreadable."""
    chain = Chain([rip], sp=rsp)
    regs = {RSP: rsp, RBP: rbp}
    pc, exact = rip, True
    for _ in range(MAX_FRAMES):
        mod = module_at(mods, pc)
        if mod is None or mod.rows is None:
            chain.stopped_at = f"{pc:#x}: no object with unwind information"
            return chain
        found = mod.rows.row(pc - mod.base - (0 if exact else 1))
        if found is None or found[0] is None:
            chain.stopped_at = f"{pc:#x} in {os.path.basename(mod.path)}: no unwind row"
            return chain
        row, signal_frame = found
        cfa_rule = row["cfa"]
        try:
            if cfa_rule.expr is not None:
                cfa = _expr(cfa_rule.expr, regs, word)
            elif cfa_rule.reg in regs:
                cfa = regs[cfa_rule.reg] + cfa_rule.offset
            else:
                cfa = None
            if cfa is None or not stack[0] <= cfa <= stack[1]:
                chain.stopped_at = f"{pc:#x} in {os.path.basename(mod.path)}: its frame address is not followed"
                return chain
            ra_rule = row.get(RA)
            if ra_rule is None or ra_rule.type == "UNDEFINED":
                chain.complete = True
                return chain
            saved = {}
            for reg in (RA, RBP):
                r = row.get(reg)
                if r is None or r.type == "SAME_VALUE":
                    continue
                if r.type == "OFFSET":
                    saved[reg] = word(cfa + r.arg)
                elif r.type == "EXPRESSION":
                    at = _expr(r.arg, regs, word)
                    if at is None:
                        raise LookupError
                    saved[reg] = word(at)
                else:
                    raise LookupError
        except LookupError:
            chain.stopped_at = f"{pc:#x} in {os.path.basename(mod.path)}: a rule that is not followed"
            return chain
        if RA not in saved or saved[RA] == 0:
            chain.complete = True
            return chain
        if cfa <= regs[RSP] and not signal_frame:
            chain.stopped_at = f"{pc:#x}: the stack does not unwind upwards"
            return chain
        regs = {RSP: cfa, RBP: saved.get(RBP, regs[RBP])}
        pc, exact = saved[RA], signal_frame
        chain.pcs.append(pc)
        chain.sp = cfa
    chain.stopped_at = f"more than {MAX_FRAMES} frames"
    return chain
