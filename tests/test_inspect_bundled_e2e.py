"""`alloclab inspect` on a program whose own allocations go to a copy of an allocator built into it
(the Rust mimalloc crate): it names the copy, not "glibc's own malloc", counts its anonymous maps as
held, and names the copy's own setting that gives them back, which a restart with it confirms. It
read "glibc, no other allocator is loaded" and "No memory rule fires" of 552 MiB at rest before."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from inspect_helpers import inspection
from native_programs import rust_program

pytestmark = pytest.mark.e2e

ARGS = ["8", "200", "48"]   # 8 threads, 200 rounds of windows of 48 buffers of 4 KiB-1.5 MiB


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line.split()[1] for line in f if line.startswith("Threads:")))


def _at_rest(prog, env: dict | None = None) -> subprocess.Popen:
    """The program started with 20 s of rest, returned once its worker threads have ended (it rests)."""
    p = subprocess.Popen([str(prog), *ARGS, "20000"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         env={"PATH": "/usr/bin:/bin", **(env or {})})
    deadline = time.monotonic() + 60
    started = False
    while time.monotonic() < deadline:
        n = _threads(p.pid)
        started = started or n > 1
        if started and n == 1:
            return p
        time.sleep(0.02)
    p.kill()
    raise AssertionError("the program's threads did not end within 60 s")


def _anonymous_kb(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        return int(next(line.split()[1] for line in f if line.startswith("Anonymous:")))


def test_a_bundled_mimalloc_is_named_and_its_own_setting_gives_back_what_it_holds(cli):
    prog = rust_program("rust-mimalloc")
    p = _at_rest(prog)
    try:
        (ins,) = inspection(cli("inspect", str(p.pid), "-f", "json"))
        held = _anonymous_kb(p.pid)
    finally:
        p.kill()
        p.wait()
    snap, answer = ins["snapshot"], ins["answer"]
    assert snap["allocator"] == "mimalloc-bundled" and "mi_free" in snap["allocator_how"], snap["allocator_how"]
    assert "glibc's malloc, the C library's" in snap["allocator_how"]
    fired = {f["rule"]: f for f in answer["fired"]}
    assert list(fired) == ["mimalloc-bundled-held-rest"], answer
    (setting,) = fired["mimalloc-bundled-held-rest"]["settings"]
    assert setting["spec"] == "mimalloc-bundled:MIMALLOC_PURGE_DELAY=0", setting
    assert setting["env_line"].startswith("MIMALLOC_PURGE_DELAY=0 "), setting
    # Restarted with it, at the same point of rest: most of what it held is back with the kernel.
    q = _at_rest(prog, {"MIMALLOC_PURGE_DELAY": "0"})
    try:
        with_it = _anonymous_kb(q.pid)
    finally:
        q.kill()
        q.wait()
    assert held >= 64 << 10 and with_it <= held / 4, (held, with_it)
