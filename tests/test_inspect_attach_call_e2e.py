"""The call --attach makes (measure/inspect/remote_call.py), on a real process (tests/programs/
attachee.c under glibc's malloc: the mechanism is the allocator's no more than a debugger's `call`):
  - made on a thread stopped in the middle of a floating-point loop that keeps its state in vector
    registers, a libc function that returns a double (strtod: it writes xmm0) leaves the loop's sums
    agreeing to the bit, and the thread's stack as it was: its registers, its vector state and the
    bytes below its stack pointer were all put back;
  - a call that takes 300 ms (usleep) is waited for to its return, while real-time signals keep
    coming: each one sent is delivered once, those that stopped the calling thread handed back after
    it was restored, and the other threads let go meanwhile (the call could have waited on them)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from inspect_helpers import pause_argv

pytestmark = [pytest.mark.e2e]


@pytest.fixture(scope="module")
def attachee(build):
    return build("attachee", "-lpthread", "-ldl")


def _libc_function(pid: int, name: str) -> int:
    from alloclab.measure.inspect import procfs
    from alloclab.measure.inspect.attach import _symbol
    maps = procfs.mappings(pid)
    libc = next(m.path for m in maps if os.path.basename(m.path).startswith("libc.so"))
    fn = _symbol(pid, maps, libc, name)
    assert fn is not None, name
    return fn


def _thread_named(pid: int, name: str) -> int:
    for tid in sorted(int(t) for t in os.listdir(f"/proc/{pid}/task")):
        with open(f"/proc/{pid}/task/{tid}/comm") as fh:
            if fh.read().strip() == name:
                return tid
    raise AssertionError(f"no thread {name}")


def _stack_of(pid: int, tid: int, freezer) -> tuple[int, int]:
    from alloclab.measure.inspect import procfs
    with freezer.paused() as stop:
        sp = stop.regs[tid].sp
    m = next(m for m in procfs.ranges(pid) if m.lo <= sp < m.hi)
    return m.lo, m.hi


def _read(pid: int, lo: int, hi: int) -> bytes:
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        mem.seek(lo)
        return mem.read(hi - lo)


def test_a_call_on_a_thread_in_the_middle_of_its_work_leaves_its_registers_and_stack(attachee):
    from alloclab.measure.inspect.ptrace import Freezer
    from alloclab.measure.inspect.remote_call import RemoteCall
    plain = pause_argv([str(attachee), "spin", "8"])
    expected, _, _ = plain.go()
    p = pause_argv([str(attachee), "spin", "8"])
    try:
        strtod, spin = _libc_function(p.pid, "strtod"), _thread_named(p.pid, "spin")
        freezer = Freezer(p.pid)
        lo, hi = _stack_of(p.pid, spin, freezer)
        before = _read(p.pid, lo, hi)
        with freezer.paused() as stop:
            assert spin in stop.stopped
            with RemoteCall(p.pid, spin, freezer, lo) as rc:
                for _ in range(3):
                    rc.call(strtod, [b"2.5\0", 0])   # its answer is in xmm0, where the loop keeps a sum
        assert rc.calls == 3 and not rc.signals
        assert _read(p.pid, lo, hi) == before
    finally:
        out, err, rc_ = p.go()
    assert rc_ == 0 and out == expected, err
    assert "spin: sums agree" in err, err


def test_a_long_call_is_waited_for_and_the_signals_meanwhile_are_handed_back(attachee):
    from alloclab.measure.inspect.ptrace import Freezer
    from alloclab.measure.inspect.remote_call import RemoteCall
    plain = pause_argv([str(attachee), "hold", "8"])
    expected, _, _ = plain.go()
    p = pause_argv([str(attachee), "hold", "8"])
    sent, stop_sending = [0], threading.Event()

    def send() -> None:
        while not stop_sending.is_set():
            os.kill(p.pid, signal.SIGRTMIN + 1)
            sent[0] += 1
            time.sleep(0.01)

    try:
        usleep = _libc_function(p.pid, "usleep")
        freezer = Freezer(p.pid)
        lo, _ = _stack_of(p.pid, p.pid, freezer)
        sender = threading.Thread(target=send)
        with freezer.paused():
            with RemoteCall(p.pid, p.pid, freezer, lo) as rc:
                sender.start()
                t0 = time.perf_counter()
                rax, _ = rc.call(usleep, [300_000])
                took = time.perf_counter() - t0
                stop_sending.set()
                sender.join()
                caught = len(rc.signals)
        rc.resend()
        assert rax == 0 and took >= 0.3, (rax, took)
        assert caught > 0 and rc.released, (caught, rc.released)   # the calling thread was the one left running
        time.sleep(0.2)
    finally:
        stop_sending.set()
        out, err, code = p.go()
    assert code == 0 and out == expected, err
    assert f"signals: {sent[0]}\n" in err, (sent, caught, err)
