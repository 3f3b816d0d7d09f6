"""Stopping a process briefly, from outside, without its parent seeing it.

Each slice of reading seizes every thread (PTRACE_SEIZE: no SIGSTOP is sent, so the parent's
waitpid sees nothing), interrupts it (PTRACE_INTERRUPT), waits until each one is stopped, and
detaches them all when the slice is read, on every path: an exception, Ctrl-C. Between slices the
process runs untraced, so that a signal it gets meanwhile is delivered at once rather than waiting
on alloclab. A signal that arrived while a thread was stopping is handed back at its detach.
A thread that cannot stop in time (uninterruptible sleep) is waited for before it is let go:
PTRACE_DETACH needs a stopped tracee. ctypes only: nothing is compiled on the inspected host."""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from alloclab.measure.inspect.procfs import ProcessGone, threads

PTRACE_GETREGS, PTRACE_DETACH, PTRACE_SEIZE, PTRACE_INTERRUPT = 12, 17, 0x4206, 0x4207
PTRACE_CONT, PTRACE_SETREGS, PTRACE_GETSIGINFO, PTRACE_SETSIGINFO = 7, 13, 0x4202, 0x4203
PTRACE_GETREGSET, PTRACE_SETREGSET = 0x4204, 0x4205
NT_PRFPREG, NT_X86_XSTATE = 2, 0x202
PTRACE_EVENT_STOP = 128
WALL = 0x40000000            # __WALL: wait for threads as well as processes
STOP_WAIT_S = 1.0            # how long a thread may take to stop before the slice reads it running
SPIN_S = 0.002               # polling for a stop without sleeping, first
# x86_64's struct user_regs_struct: 27 registers; the stack pointer and the thread pointer (TLS).
REGS_WORDS, RSP, FS_BASE = 27, 19, 21
RBP, RIP = 4, 16
XSTATE_MAX = 1 << 16         # the largest XSAVE area a kernel hands out (AMX's is about 11 KiB)
SIGINFO_BYTES = 128

_libc = ctypes.CDLL(None, use_errno=True)
_libc.ptrace.argtypes = (ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p)
_libc.ptrace.restype = ctypes.c_long


class NotPermitted(Exception):
    pass


def _ptrace(request: int, tid: int, addr=None, data=None) -> int:
    ctypes.set_errno(0)
    r = _libc.ptrace(request, tid, addr, data)
    if r == -1:
        return -ctypes.get_errno()
    return r


@dataclass
class Registers:
    sp: int
    thread_pointer: int
    ip: int = 0
    bp: int = 0


def get_regs(tid: int) -> list[int]:
    """A stopped thread's 27 general registers (user_regs_struct), as unsigned words."""
    buf = (ctypes.c_ulonglong * REGS_WORDS)()
    r = _ptrace(PTRACE_GETREGS, tid, None, ctypes.addressof(buf))
    if r < 0:
        raise OSError(-r, os.strerror(-r))
    return list(buf)


def set_regs(tid: int, words: list[int]) -> None:
    buf = (ctypes.c_ulonglong * REGS_WORDS)(*[w & (2 ** 64 - 1) for w in words])
    r = _ptrace(PTRACE_SETREGS, tid, None, ctypes.addressof(buf))
    if r < 0:
        raise OSError(-r, os.strerror(-r))


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def get_fpstate(tid: int) -> tuple[int, bytes]:
    """The thread's floating-point and vector registers, whole: the XSAVE area (x87, SSE, AVX and
    AVX-512 state), else the FXSAVE one where the kernel offers no XSAVE regset."""
    for note in (NT_X86_XSTATE, NT_PRFPREG):
        buf = ctypes.create_string_buffer(XSTATE_MAX)
        io = _Iovec(ctypes.addressof(buf), XSTATE_MAX)
        if _ptrace(PTRACE_GETREGSET, tid, note, ctypes.addressof(io)) == 0:
            return note, buf.raw[:io.len]
    raise OSError(errno.EIO, "no floating-point register set")


def set_fpstate(tid: int, state: tuple[int, bytes]) -> None:
    note, data = state
    buf = ctypes.create_string_buffer(data, len(data))
    io = _Iovec(ctypes.addressof(buf), len(data))
    r = _ptrace(PTRACE_SETREGSET, tid, note, ctypes.addressof(io))
    if r < 0:
        raise OSError(-r, os.strerror(-r))


def get_siginfo(tid: int) -> bytes:
    buf = ctypes.create_string_buffer(SIGINFO_BYTES)
    return buf.raw if _ptrace(PTRACE_GETSIGINFO, tid, None, ctypes.addressof(buf)) == 0 else b""


def set_siginfo(tid: int, info: bytes) -> bool:
    buf = ctypes.create_string_buffer(info, SIGINFO_BYTES)
    return _ptrace(PTRACE_SETSIGINFO, tid, None, ctypes.addressof(buf)) == 0


def cont(tid: int, sig: int = 0) -> None:
    """Let one stopped thread run on (with `sig` delivered; 0: whatever stopped it is not)."""
    r = _ptrace(PTRACE_CONT, tid, None, sig)
    if r < 0:
        raise OSError(-r, os.strerror(-r))


@dataclass
class Stop:
    """One stop of the process: which threads stopped, and each one's stack and thread pointers."""
    stopped: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)   # could not be stopped in time: read while running
    regs: dict[int, Registers] = field(default_factory=dict)


class Freezer:
    """Stops the process `pid` for the length of a `with freezer.paused():` block, and records each
    pause. With `enabled` false (the process is traced by someone else already) nothing is stopped."""

    def __init__(self, pid: int, enabled: bool = True):
        self.pid, self.enabled = pid, enabled
        self.pauses: list[float] = []
        self.regs_ok = platform.machine() == "x86_64"
        self._pending: dict[int, int] = {}
        self._seized: list[int] = []
        self._unstopped: set[int] = set()

    @contextmanager
    def paused(self):
        if not self.enabled:
            yield Stop()
            return
        t0 = time.perf_counter()
        try:
            yield self._stop()
        finally:
            self._go()
            self.pauses.append(time.perf_counter() - t0)

    def _seize(self, tid: int) -> bool:
        r = _ptrace(PTRACE_SEIZE, tid)
        if r == -errno.ESRCH:
            return False   # the thread ended meanwhile
        if r == -errno.EPERM:
            raise NotPermitted(tid)
        if r < 0:
            raise OSError(-r, os.strerror(-r))
        self._seized.append(tid)
        if _ptrace(PTRACE_INTERRUPT, tid) < 0:
            return False
        return True

    def _wait(self, tid: int, deadline: float) -> bool:
        """Until the thread reports its stop: True once stopped, False if it ended or the time ran out.
        It spins first: an interrupted thread stops within microseconds, and a sleep would give the
        CPU away while the process is held (on a busy machine, for a whole time slice or more)."""
        spin_until = time.perf_counter() + SPIN_S
        while True:
            try:
                got, status = os.waitpid(tid, os.WNOHANG | WALL)
            except ChildProcessError:
                return False
            if got == tid:
                if os.WIFSTOPPED(status):
                    if status >> 16 != PTRACE_EVENT_STOP:
                        self._pending[tid] = os.WSTOPSIG(status)   # a signal on its way: handed back at detach
                    return True
                self._seized.remove(tid)   # exited
                return False
            now = time.perf_counter()
            if now > deadline:
                return False
            if now > spin_until:
                time.sleep(0.0002)

    def _stop(self) -> Stop:
        stop = Stop()
        seen: set[int] = set()
        for _ in range(4):   # a thread made just before the stop is seized on the next pass
            tids = [t for t in threads(self.pid) if t not in seen]
            if not tids:
                break
            seen.update(tids)
            fresh = [t for t in tids if self._seize(t)]
            deadline = time.perf_counter() + STOP_WAIT_S
            for t in fresh:
                (stop.stopped if self._wait(t, deadline) else stop.running).append(t)
        if self.pid not in stop.stopped and self.pid not in stop.running:
            if not os.path.exists(f"/proc/{self.pid}"):
                raise ProcessGone(self.pid)
        self._unstopped = set(stop.running)
        if self.regs_ok:
            for t in stop.stopped:
                buf = (ctypes.c_ulonglong * REGS_WORDS)()
                if _ptrace(PTRACE_GETREGS, t, None, ctypes.addressof(buf)) == 0:
                    stop.regs[t] = Registers(buf[RSP], buf[FS_BASE], buf[RIP], buf[RBP])
        return stop

    def pending(self, tid: int) -> int:
        """The signal a thread stopped with (0: it stopped at the interrupt): handed back at detach."""
        return self._pending.get(tid, 0)

    def hand_back(self, tid: int, sig: int) -> None:
        """A signal to deliver to the thread as it is detached (one that arrived while it was held)."""
        self._pending[tid] = sig

    def release(self, tids: list[int]) -> None:
        """Detaches these threads now (each with its signal), the others staying stopped."""
        for tid in tids:
            if tid in self._seized:
                if tid in self._unstopped:
                    self._wait(tid, time.perf_counter() + 30)
                _ptrace(PTRACE_DETACH, tid, None, self._pending.pop(tid, 0))
                self._seized.remove(tid)

    def _go(self) -> None:
        for tid in list(self._seized):
            if tid in self._unstopped:
                self._wait(tid, time.perf_counter() + 30)   # PTRACE_DETACH needs it stopped
            _ptrace(PTRACE_DETACH, tid, None, self._pending.pop(tid, 0))
        self._seized.clear()
        self._pending.clear()
        self._unstopped = set()
