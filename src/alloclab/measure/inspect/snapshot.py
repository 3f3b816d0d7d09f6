"""One inspection of one process, start to Snapshot: refusals first (no such process, not
permitted, static, musl, an unknown glibc layout), then the reading that fits its allocator: the
glibc walk, a program's own channel (channels.py), or smaps alone; every stop is undone on every
path, and a process that exits meanwhile is a refusal, not a partial answer."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone

from alloclab.catalog import glibc_layout
from alloclab.catalog.allocators import load_catalog
from alloclab.measure.inspect import glibc, libc as libc_mod, procfs, refusals
from alloclab.measure.inspect.glibc_read import NotGlibcHeap
from alloclab.measure.inspect.memory import Memory
from alloclab.measure.inspect.ptrace import Freezer, NotPermitted
from alloclab.measure.inspect.procfs import ProcessGone
from alloclab.measure.inspect.regions import classify
from alloclab.measure.inspect.serving import serving
from alloclab.store.fingerprint_model import MemorySplit
from alloclab.store.inspect_model import Snapshot


@dataclass(frozen=True)
class Options:
    symbols: bool = True          # read main_arena and mp_ from the debug symbols where installed
    pagemap: bool = True          # residency from pagemap (else smaps, per mapping)
    channel: str | None = None    # a program's own channel (channels.py); default: its recipe's
    attach: bool = False          # where no channel answers: call the allocator's statistics inside (attach.py)
    note: Callable[[str], None] | None = field(default=None, compare=False)   # a word to the user meanwhile


def _begin(pid: int) -> None:
    if pid <= 0 or not os.path.isdir(f"/proc/{pid}"):
        raise refusals.no_such_process(pid)
    try:
        st = procfs.status(pid)
    except ProcessGone:
        raise refusals.no_such_process(pid) from None
    if st.get("State", "").startswith("Z"):
        raise refusals.gone(pid, "its status (it is a zombie, waiting for its parent)")


def smaps_only(snap: Snapshot, pid: int, maps, why: str) -> None:
    regions = classify(pid, maps, None, [])
    snap.smaps = regions.categories()
    other = {"stacks": regions.by_kind["stacks"], "libraries": regions.by_kind["libraries"], "interposer": 0,
             "own_maps": regions.by_kind["own_maps"]}
    parts = {"held": regions.by_kind["allocator"], "other": sum(other.values())}
    snap.split = MemorySplit("inspect", None, regions.anon, parts, other, regions.anon - sum(parts.values()),
                             {"anon": regions.anon, "allocator_maps": regions.by_kind["allocator"], **other}, 0)
    snap.source = "smaps alone"
    snap.notes.append(why)


def _no_books(allocator: str) -> bool:
    """The catalog knows the allocator and names no books of it (tbbmalloc's interface gives none)."""
    a = load_catalog().allocators.get(allocator)
    return a is not None and a.books is None


def program_names(exe: str, cmdline: list[str]) -> list[str]:
    """The names a process goes by: its executable's file, and the first word of its argv[0] (Debian's
    redis-server is a link to redis-check-rdb, and rewrites its argv[0] as "redis-server HOST:PORT")."""
    names = [os.path.basename(exe.removesuffix(" (deleted)"))]
    if cmdline and cmdline[0].split():
        names.append(os.path.basename(cmdline[0].split()[0]))
    return names


def _recipe_channel(snap: Snapshot) -> str | None:
    """The channel a recipe names for this program (workloads/recipes/*.toml, [inspect])."""
    from alloclab.workloads.experiment_file import inspect_recipe
    for name in program_names(snap.exe, snap.cmdline):
        found = inspect_recipe(name)
        if found:
            return found[1]
    return None


def inspect(pid: int, options: Options = Options(), t0: float | None = None) -> Snapshot:
    _begin(pid)
    started = time.perf_counter()
    snap = Snapshot(pid=pid, when=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    t_s=round(time.monotonic() - t0, 3) if t0 is not None else 0.0)
    what = "memory maps"
    mem = None
    try:
        snap.cmdline, snap.exe = procfs.cmdline(pid), procfs.exe(pid)
        st = procfs.status(pid)
        snap.traced_by = int(st.get("TracerPid", "0") or 0)
        snap.threads = int(st.get("Threads", "1") or 1)
        from alloclab.measure.inspect.cpus import usable
        n, snap.cpus_how = usable(pid)
        snap.cpus = n or 0
        maps = procfs.mappings(pid)
        snap.rollup = procfs.rollup(pid)
        snap.rss, snap.pss = snap.rollup.get("Rss", 0), snap.rollup.get("Pss", 0)
        snap.allocator, snap.allocator_how = serving(pid, maps)
        if snap.allocator != "glibc":
            from alloclab.measure.inspect import channels
            channel = options.channel or _recipe_channel(snap)
            bundled = getattr(load_catalog().allocators.get(snap.allocator), "bundled", "")
            if bundled:
                smaps_only(snap, pid, maps, f"the {bundled} built into the program keeps its books inside it, "
                                            f"under its own names, where no call from outside reaches: shown here is "
                                            f"what smaps says, its anonymous maps as held (glibc's few, serving the C "
                                            f"library, among them)")
            elif channel and channels.read(snap, pid, maps, channel):
                pass
            elif options.attach:
                from alloclab.measure.inspect import attach
                what = "allocator's books"
                attach.read(snap, pid, maps, options.note)
            elif _no_books(snap.allocator):
                smaps_only(snap, pid, maps, f"{snap.allocator} keeps no books alloclab can read (the catalog "
                                            f"names none for it): shown here is what smaps says, the "
                                            f"allocator's maps as held")
            else:
                smaps_only(snap, pid, maps, f"{snap.allocator}'s own split needs a call inside the process: a "
                                            f"channel of the program's own (a recipe's, e.g. redis' MEMORY "
                                            f"MALLOC-STATS) or --attach; shown here is what smaps says, the "
                                            f"allocator's maps as held")
        else:
            if options.attach:
                snap.notes.append("--attach was not needed: glibc's heaps are read from outside, with no call")
            lc = libc_mod.find(pid, maps)
            snap.libc, snap.glibc = lc.path, lc.version
            layout = glibc_layout.layout(lc.version or "", lc.arch)
            if layout is None:
                raise refusals.unknown_layout(pid, lc.path, lc.version, lc.arch, glibc_layout.known())
            if options.symbols:
                libc_mod.read_symbols(pid, lc)
            what = "memory"
            mem = Memory(pid, use_pagemap=options.pagemap)
            snap.residency = "pagemap" if mem.pagemap is not None else "smaps"
            if mem.pagemap is None:
                snap.notes.append("no pagemap: residency is each mapping's share of smaps' anonymous bytes, and a "
                                  "heap smaps shows partly swapped out is not walked")
                swapped = [m for m in maps if m.swap and m.is_anon]
                if swapped:
                    raise refusals.swapped_without_pagemap(pid)
            freezer = Freezer(pid, enabled=snap.traced_by == 0)
            if snap.traced_by:
                snap.notes.append(f"already traced by process {snap.traced_by}: read while running, without a stop")
            try:
                glibc.read(snap, pid, maps, lc, layout, mem, freezer)
            except NotGlibcHeap:
                smaps_only(snap, pid, maps, "glibc's main_arena was not found (neither by symbols nor by content)")
            snap.stopped = freezer.enabled
            snap.pauses = len(freezer.pauses)
            snap.pause_max_ms = round(1000 * max(freezer.pauses, default=0.0), 2)
            snap.pause_median_ms = round(1000 * statistics.median(freezer.pauses), 2) if freezer.pauses else 0.0
            snap.pause_total_ms = round(1000 * sum(freezer.pauses), 2)
    except ProcessGone:
        raise refusals.gone(pid, f"its {what}") from None
    except (PermissionError, NotPermitted):
        if not os.path.isdir(f"/proc/{pid}"):
            raise refusals.gone(pid, f"its {what}") from None
        raise refusals.not_permitted(pid, what) from None
    finally:
        if mem is not None:
            mem.close()
    if not os.path.isdir(f"/proc/{pid}"):
        raise refusals.gone(pid, f"its {what}")
    snap.read_s = round(time.perf_counter() - started, 3)
    return snap
