"""`alloclab inspect --attach` on real processes under each installed allocator (a C program,
tests/programs/attachee.c, run with LD_PRELOAD of libjemalloc.so.2, libtcmalloc.so.4 and
libmimalloc.so.2, holding 32 MiB of blocks with every third freed, its heartbeat thread allocating
at each beat):
  - the allocator's statistics, called for inside the process, give a split whose parts add up to
    the anonymous RSS of smaps_rollup within max(5%, 2 MiB); afterwards the process is neither
    stopped nor traced, its main stack holds the bytes it held before, and it prints byte for byte
    what it prints uninspected;
  - a thread that allocates without a pause is waited out (the stops that find it inside the
    allocator are let go), and one held inside the allocator is refused, with nothing called;
  - without --attach nothing is called: jemalloc's statistics epoch, which --attach's first call
    advances, has not moved, its stack is as it was, and the answer says the split needs --attach;
  - measured alone, the heartbeat is never held above 100 ms."""

from __future__ import annotations

import os
import re
import time

import pytest

from conftest import require_allocator
from inspect_helpers import inspection, pause_argv, worst_gap_ms

pytestmark = [pytest.mark.e2e]

MiB = 1 << 20
LIBRARIES = {"jemalloc": "libjemalloc.so.2", "tcmalloc": "libtcmalloc.so.4", "mimalloc": "libmimalloc.so.2"}
FUNCTIONS = {"jemalloc": "mallctl", "tcmalloc": "MallocExtension_GetNumericProperty", "mimalloc": "mi_process_info"}


@pytest.fixture(scope="module")
def attachee(build):
    return build("attachee", "-lpthread", "-ldl")


def _start(program, allocator: str, mode: str):
    require_allocator(allocator)
    return pause_argv([str(program), mode, "32"], env={**os.environ, "LD_PRELOAD": LIBRARIES[allocator]})


def _plain(program, allocator: str, mode: str = "hold") -> bytes:
    out, _, rc = _start(program, allocator, mode).go()
    assert rc == 0
    return out


def _status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as fh:
        return dict(line.rstrip("\n").split(":\t", 1) for line in fh if ":\t" in line)


def _anon(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("Anonymous:"))


def _main_stack(pid: int) -> bytes:
    """The main thread's whole stack mapping, as /proc/PID/mem reads it, once it waits in read(2)
    for its line: then nothing of its own changes it."""
    deadline = time.monotonic() + 10
    while open(f"/proc/{pid}/syscall").read().split()[0] != "0":   # read(2) on x86_64
        assert time.monotonic() < deadline, "the program does not wait for its line"
        time.sleep(0.01)
    with open(f"/proc/{pid}/maps") as fh:
        lo, hi = next(tuple(int(x, 16) for x in line.split()[0].split("-")) for line in fh if "[stack]" in line)
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        mem.seek(lo)
        return mem.read(hi - lo)


def _left_running(p) -> None:
    st = _status(p.pid)
    assert st["TracerPid"] == "0" and st["State"][0] in "SR", st


def _epoch(err: str) -> int | None:
    m = re.search(r"jemalloc epoch: (\d+)", err)
    return int(m.group(1)) if m else None


@pytest.mark.slow
@pytest.mark.parametrize("allocator", sorted(LIBRARIES))
def test_attach_splits_the_allocators_books_and_leaves_the_process_as_it_was(attachee, cli, allocator):
    expected = _plain(attachee, allocator)
    p = _start(attachee, allocator, "hold")
    try:
        stack = _main_stack(p.pid)
        proc = cli("inspect", str(p.pid), "--attach", "-f", "json")
        anon = _anon(p.pid)
        _left_running(p)
        assert _main_stack(p.pid) == stack   # the call's frame was written there, and put back
    finally:
        out, err, rc = p.go()
    got = inspection(proc)
    assert "--attach: for tcmalloc, jemalloc or mimalloc" in " ".join(proc.stderr.split())   # the warning
    assert rc == 0 and out == expected, err
    assert "signals: 0" in err
    snap = got[0]["snapshot"]
    assert snap["allocator"] == allocator and FUNCTIONS[allocator] in snap["source"], snap["source"]
    assert snap["stopped"] and snap["pauses"] >= 2 and snap["channel"]["calls"] >= 1, snap["channel"]
    parts, total = snap["split"]["parts"], sum(snap["split"]["parts"].values())
    print(f"\n{allocator}: parts {total:,} against smaps_rollup {anon:,} ({100 * (total - anon) / anon:+.2f}%), "
          f"unexplained {snap['split']['unexplained']:,}, {snap['pauses']} stops, longest {snap['pause_max_ms']} ms, "
          f"{snap['channel']['tries']} tries, read in {snap['read_s']} s; {parts}; {worst_gap_ms(err)} ms held")
    assert abs(total - anon) <= max(0.05 * anon, 2 * MiB), (total, anon, snap["split"])
    assert abs(snap["split"]["unexplained"]) <= max(0.05 * anon, 2 * MiB), snap["split"]
    figures = snap["channel"]["figures"]
    if allocator == "jemalloc":
        assert _epoch(err) == 2   # one write of "epoch": --attach's
        assert parts["live"] > 16 * MiB and parts["free_inside"] > MiB, parts
        assert figures["stats.allocated"] > 16 * MiB and figures["arenas.page"] == 4096, figures
    elif allocator == "tcmalloc":
        assert parts["live"] > 16 * MiB and parts["caches"] > 0, parts
        assert figures["generic.heap_size"] >= figures["generic.current_allocated_bytes"] > 16 * MiB, figures
    else:
        assert parts["held"] > 16 * MiB and figures["commit"] > 16 * MiB, (parts, figures)


@pytest.mark.slow
@pytest.mark.parametrize("allocator", sorted(LIBRARIES))
def test_attach_waits_out_a_thread_that_allocates_without_a_pause(attachee, cli, allocator):
    expected = _plain(attachee, allocator, "busy")
    p = _start(attachee, allocator, "busy")
    try:
        got = inspection(cli("inspect", str(p.pid), "--attach", "-f", "json"))
        _left_running(p)
    finally:
        out, err, rc = p.go()
    assert rc == 0 and out == expected, err
    snap = got[0]["snapshot"]
    print(f"\n{allocator}, a thread allocating without a pause: called at try {snap['channel']['tries']}, "
          f"{snap['pauses']} stops, longest {snap['pause_max_ms']} ms")
    assert snap["channel"]["tries"] >= 1 and snap["split"]["parts"], snap["channel"]


@pytest.mark.parametrize("allocator", sorted(LIBRARIES))
def test_attach_refuses_while_a_thread_is_held_inside_the_allocator(attachee, cli, allocator):
    expected = _plain(attachee, allocator, "stuck")
    p = _start(attachee, allocator, "stuck")
    try:
        stack = _main_stack(p.pid)
        proc = cli("inspect", str(p.pid), "--attach")
        _left_running(p)
        assert _main_stack(p.pid) == stack
    finally:
        out, err, rc = p.go()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    text = " ".join(proc.stderr.split())
    assert "Traceback" not in text and "did not call into process" in text, text
    assert re.search(r"a thread was inside lib(jemalloc|tcmalloc|mimalloc)", text) and "the return address" in text, text
    assert rc == 0 and out == expected, err
    if allocator == "jemalloc":
        assert _epoch(err) == 1   # nothing was called


def test_without_attach_nothing_is_called(attachee, cli):
    expected = _plain(attachee, "jemalloc")
    p = _start(attachee, "jemalloc", "hold")
    try:
        stack = _main_stack(p.pid)
        got = inspection(cli("inspect", str(p.pid), "-f", "json"))
        _left_running(p)
        assert _main_stack(p.pid) == stack
    finally:
        out, err, rc = p.go()
    assert rc == 0 and out == expected, err
    assert _epoch(err) == 1, err   # jemalloc's epoch was never written
    snap = got[0]["snapshot"]
    assert snap["source"] == "smaps alone" and not snap["stopped"] and snap["pauses"] == 0, snap
    assert any("needs a call inside the process" in n and "--attach" in n for n in snap["notes"]), snap["notes"]


@pytest.mark.serial
@pytest.mark.slow
def test_attach_holds_no_thread_above_100_ms(attachee, cli):
    # Measured alone (a busy machine makes every stop longer): each allocator's process, its
    # heartbeat held at most 100 ms (its longest beat less its waits for a CPU).
    for allocator in sorted(LIBRARIES):
        p = _start(attachee, allocator, "hold")
        try:
            got = inspection(cli("inspect", str(p.pid), "--attach", "-f", "json"))
        finally:
            _, err, rc = p.go()
        assert rc == 0 and got[0]["snapshot"]["channel"]["calls"] >= 1
        assert worst_gap_ms(err) <= 100, (allocator, err, got[0]["snapshot"]["pause_max_ms"])
