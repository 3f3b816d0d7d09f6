"""`alloclab inspect --attach`: the allocator's own books, read by calling its statistics interface
inside the process, for a program that offers no channel of its own: jemalloc's `mallctl` (the
epoch, then each name of the catalog's [allocators.jemalloc.books]), gperftools'
`MallocExtension_GetNumericProperty` (its C interface, each name of [allocators.tcmalloc.books]),
mimalloc's `mi_process_info`. The figures are split as a fingerprint run's books are
(channels.books_split, fingerprint_books.split).

The function's address is the allocator library's own ELF symbol (pyelftools) plus the library's
load bias in /proc/PID/maps. A first short stop copies each thread's registers and the top of its
stack, so that their call-frame tables are decoded while the process runs; then each try stops
every thread (ptrace.Freezer), checks that none is inside the allocator (attach_guard.py), and only
then makes the calls on one thread (remote_call.py), restores it, and lets every thread go. A try
that finds a thread inside lets the process run for BETWEEN_S and tries again, at most TRIES
times over TRY_FOR_S; then it refuses, having called nothing. (A thread that does little but
allocate is inside its allocator at most stops: mimalloc's fast paths are all of a tight loop.)"""

from __future__ import annotations

import os
import statistics
import time

from alloclab.catalog.allocators import load_catalog
from alloclab.measure.inspect import procfs, refusals
from alloclab.measure.inspect.attach_guard import Guard, Inside
from alloclab.measure.inspect.channels import books_split
from alloclab.measure.inspect.memory import Memory
from alloclab.measure.inspect.procfs import Mapping, in_root
from alloclab.measure.inspect.ptrace import Freezer, Stop
from alloclab.measure.inspect.remote_call import CallFaulted, NoRoom, Out, RemoteCall
from alloclab.store.inspect_model import Snapshot

TRIES, TRY_FOR_S = 200, 2.0   # at most this many stops, for at most this long
BETWEEN_S = 0.005            # the process runs this long between two tries
ROOM = 32 << 10              # below a thread's stack pointer, for the call's frame and the function's own
SIGSEGV_BIT = 1 << 10        # SIGSEGV (11) in /proc's signal masks
WORD = 8


def _library(maps: list[Mapping], allocator: str) -> str | None:
    """The path of the allocator's shared library in the process (its soname, or a versioned file)."""
    names = set()
    for a in load_catalog().allocators.values():
        if (a.same_as or a.name) == allocator or a.name == allocator:
            names |= set(a.libraries)
    for m in maps:
        base = os.path.basename(m.path)
        if m.path.startswith("/") and any(base == n or base.startswith(n + ".") for n in names):
            return m.path
    return None


def _symbol(pid: int, maps: list[Mapping], library: str, name: str) -> int | None:
    """The run-time address of a function the library defines: its dynamic symbol plus the load bias."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    try:
        with open(in_root(pid, library), "rb") as fh:
            elf = ELFFile(fh)
            dynsym = elf.get_section_by_name(".dynsym")
            syms = dynsym.get_symbol_by_name(name) if dynsym is not None else None
            sym = next((s for s in syms or [] if s["st_shndx"] != "SHN_UNDEF" and s["st_info"]["type"] == "STT_FUNC"),
                       None)
            first_load = next(s["p_vaddr"] for s in elf.iter_segments() if s["p_type"] == "PT_LOAD")
            dyn = elf["e_type"] == "ET_DYN"
    except (OSError, ELFError, StopIteration):
        return None
    if sym is None:
        return None
    first = next((m for m in maps if m.path == library and m.offset == 0), None)
    if first is None:
        return None
    base = first.lo - (first_load & ~0xFFF) if dyn else 0
    return base + sym["st_value"]


def _preconditions(snap: Snapshot, pid: int, maps: list[Mapping]) -> None:
    """What makes a call impossible to make or to return from cleanly: refused before any stop."""
    if snap.traced_by:
        raise refusals.attach_refused(pid, f"it is already traced by process {snap.traced_by} (a debugger, strace): "
                                           f"a process has one tracer, and the call needs alloclab to be it",
                                      "detach the other tracer first, or inspect without --attach")
    if maps and maps[0].lo == 0:
        raise refusals.attach_refused(pid, "it maps address 0, where the call is made to return (a fault there is how "
                                           "alloclab knows the function returned)", "inspect it without --attach")
    st = procfs.status(pid)
    if "shstk" in st.get("x86_Thread_features", ""):
        raise refusals.attach_refused(pid, "it runs with a shadow stack (CET), which refuses a return to an address "
                                           "its call did not push", "inspect it without --attach")
    if int(st.get("SigIgn", "0"), 16) & SIGSEGV_BIT:
        raise refusals.attach_refused(pid, "it ignores SIGSEGV: the kernel would reset that disposition when the "
                                           "call's return faults, as it is made to", "inspect it without --attach")


def _choose(pid: int, stop: Stop, freezer: Freezer, stacks: list[Mapping]) -> tuple[int, int] | None:
    """The thread to make the call on, and the bottom of its stack's mapping: the main thread where
    it can, else another. It must have stopped at the interrupt (not with a signal of its own on its
    way), not block SIGSEGV (the kernel would unblock it and reset its handler when the return
    faults), and have ROOM below its stack pointer."""
    for tid in sorted(stop.stopped, key=lambda t: t != pid):
        r = stop.regs.get(tid)
        if r is None or freezer.pending(tid):
            continue
        try:
            blocked = int(_task_status(pid, tid).get("SigBlk", "0"), 16)
        except procfs.ProcessGone:
            continue
        if blocked & SIGSEGV_BIT:
            continue
        m = next((m for m in stacks if m.lo <= r.sp < m.hi), None)
        if m is not None and (r.sp - m.lo >= ROOM or m.path == "[stack]"):
            return tid, m.lo
    return None


def _task_status(pid: int, tid: int) -> dict[str, str]:
    out = {}
    try:
        with open(f"/proc/{pid}/task/{tid}/status") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                out[key] = value.strip()
    except (FileNotFoundError, ProcessLookupError):
        raise procfs.ProcessGone(tid) from None
    return out


# --- the calls, one interface each ----------------------------------------------------------------

def _word(b: bytes) -> int:
    return int.from_bytes(b[:WORD], "little")


def _mallctl(rc: RemoteCall, fn: int, names: list[str]) -> dict[str, int]:
    # The statistics are a snapshot that jemalloc refreshes when the epoch is written.
    rax, _ = rc.call(fn, [b"epoch\0", 0, 0, (1).to_bytes(8, "little"), 8])
    out = {}
    if rax & 0xFFFFFFFF:
        return out
    for name in names:
        rax, (value, length) = rc.call(fn, [name.encode() + b"\0", Out(WORD), Out(WORD, WORD.to_bytes(8, "little")),
                                            0, 0])
        out[name] = _word(value) if rax & 0xFFFFFFFF == 0 and _word(length) == WORD else -1
    return out


def _property(rc: RemoteCall, fn: int, names: list[str]) -> dict[str, int]:
    out = {}
    for name in names:
        rax, (value,) = rc.call(fn, [name.encode() + b"\0", Out(WORD)])
        out[name] = _word(value) if rax & 0xFFFFFFFF else -1   # it returns whether it knows the name
    return out


MI_FIELDS = ("elapsed_msecs", "user_msecs", "system_msecs", "current_rss", "peak_rss", "commit", "peak_commit",
             "page_faults")


def _mi_process_info(rc: RemoteCall, fn: int, names: list[str]) -> dict[str, int]:
    _, outs = rc.call(fn, [Out(WORD) for _ in MI_FIELDS])   # eight pointers: the last two on the stack
    return {k: _word(v) for k, v in zip(MI_FIELDS, outs)}


CALLS = {"mallctl": _mallctl, "property": _property, "mi_process_info": _mi_process_info}


def _function(interface: str) -> str:
    """The function each interface's books are read through: the catalog's `entry`."""
    return load_catalog().books(interface).entry


def _live(interface: str) -> str:
    """The name of its live bytes (the role `allocated`), where the interface is keyed by name."""
    return next(iter(load_catalog().books(interface).role("allocated")), "")


def read(snap: Snapshot, pid: int, maps: list[Mapping], note=None) -> None:
    """The split from the allocator's own books, called for inside the process; a refusal
    (AlloclabError) where it cannot be done safely, with nothing called."""
    allocator = load_catalog().allocators.get(snap.allocator)
    books = allocator.books if allocator is not None else None
    interface = books.interface if books is not None else None
    if interface not in CALLS:
        raise refusals.attach_refused(pid, f"its allocator ({snap.allocator}) has no statistics interface alloclab "
                                           f"calls", "inspect it without --attach")
    library = _library(maps, snap.allocator)
    if library is None:
        raise refusals.attach_refused(pid, f"{snap.allocator} is built into its program ({snap.allocator_how}), not "
                                           f"loaded as the shared library whose symbols and code range the call and "
                                           f"its guards need", "inspect it without --attach, or through a channel "
                                                               "of the program's own")
    fn = _symbol(pid, maps, library, _function(interface))
    if fn is None:
        raise refusals.attach_refused(pid, f"{library} does not define {_function(interface)}",
                                      "inspect it without --attach")
    _preconditions(snap, pid, maps)
    mem = Memory(pid, use_pagemap=False)
    freezer = Freezer(pid)
    started = time.perf_counter()
    try:
        guard = Guard(pid, maps, library, mem)
        with freezer.paused() as stop:
            scouted = guard.scout(stop)
        guard.warm(scouted)
        figures, last, tries, sps, thread, calls = None, [], 0, [], 0, 0
        while figures is None and tries < TRIES and (not tries or time.perf_counter() - started < TRY_FOR_S):
            if tries:
                time.sleep(BETWEEN_S)
            tries += 1
            rc = None
            with freezer.paused() as stop:
                last = guard.check(stop)
                if not last:
                    stacks = procfs.ranges(pid)
                    chosen = _choose(pid, stop, freezer, stacks)
                    if chosen is None:
                        last = [Inside(0, "no stopped thread can take the call (each blocks SIGSEGV, has a signal "
                                          "on its way, or has no room on its stack)")]
                        continue
                    thread = chosen[0]
                    sps = [r.sp for r in stop.regs.values()]
                    with RemoteCall(pid, thread, freezer, chosen[1], note) as rc:
                        figures = CALLS[interface](rc, fn, books.names())
                        calls = rc.calls
            if rc is not None:
                rc.resend()
    except NoRoom:
        raise refusals.attach_refused(pid, "the chosen thread's stack had no room for the call's frame",
                                      "inspect it without --attach") from None
    except CallFaulted as exc:
        raise refusals.call_faulted(pid, _function(interface), str(exc)) from None
    finally:
        mem.close()
    snap.stopped = True
    snap.pauses = len(freezer.pauses)
    snap.pause_max_ms = round(1000 * max(freezer.pauses, default=0.0), 2)
    snap.pause_median_ms = round(1000 * statistics.median(freezer.pauses), 2) if freezer.pauses else 0.0
    snap.pause_total_ms = round(1000 * sum(freezer.pauses), 2)
    if figures is None:
        raise refusals.attach_inside(pid, os.path.basename(library), tries, time.perf_counter() - started,
                                     [(i.tid, i.where) for i in last])
    _answer(snap, pid, interface, library, figures, sps, thread, calls, tries, guard.scanned)


def _answer(snap: Snapshot, pid: int, interface: str, library: str, figures: dict[str, int], sps: list[int],
            thread: int, calls: int, tries: int, scanned: int) -> None:
    # smaps read now, right after the call: the allocator's figures and its mappings of one instant.
    maps = procfs.mappings(pid)
    snap.rollup = procfs.rollup(pid)
    snap.rss, snap.pss = snap.rollup.get("Rss", 0), snap.rollup.get("Pss", 0)
    books_split(snap, pid, maps, interface, figures, figures.get(_live(interface), None), sps)
    name = _function(interface)
    snap.channel = {"kind": f"--attach: {name}", "library": library, "thread": thread, "calls": calls,
                    "tries": tries, "figures": figures}
    snap.source = f"{name} called inside the process (--attach, {os.path.basename(library)})"
    snap.residency = f"smaps ({snap.allocator}'s mappings)"
    snap.notes.append(f"--attach: {calls} calls of {name} on thread {thread}, at the {_nth(tries)} stop that found "
                      f"no thread inside {os.path.basename(library)}; its registers and stack bytes were put back")
    if scanned:
        snap.notes.append(f"{scanned} thread stacks could not be unwound to their end and were scanned for return "
                          f"addresses instead")
    if interface == "mi_process_info":
        snap.notes.append("mimalloc 2.0's mi_process_info gives its committed bytes, not its live ones: what its "
                          "mappings hold is shown as held")


def _nth(n: int) -> str:
    return {1: "first", 2: "second", 3: "third"}.get(n, f"{n}th")
