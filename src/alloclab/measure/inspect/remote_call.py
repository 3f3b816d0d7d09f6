"""A function of the process called from outside, on one of its stopped threads, as a debugger's
`call` does: nothing compiled, nothing written but to that thread's stack, everything put back.

  - Saved first: the thread's general registers, its whole floating-point and vector state (the
    XSAVE area: the function may use SSE or AVX registers the thread was using), and every byte of
    its stack from SCRATCH below the call's frame up to its stack pointer.
  - The arguments (strings, out-buffers) are written below the stack pointer, past the 128-byte red
    zone its own code may still be using, 16-byte aligned; the stack arguments and the return
    address below them, so that the function starts with its stack aligned as the ABI says.
  - The return address is 0: the function's `ret` faults there, a SIGSEGV that the tracer sees as a
    signal-delivery stop (the program's own SIGSEGV handler never runs, and nothing is written
    into its code). The call has returned when the thread stops so, at address 0 with the stack
    pointer just above the return address.
  - A thread stopped inside a system call would have the kernel restart that call on top of ours
    (it rewinds the instruction pointer): orig_rax = -1 says there is none. Restored with the
    thread's own registers, the interrupted call is restarted as it would have been.
  - Once started, a call is never abandoned: it is waited for until it returns. A signal that
    arrives meanwhile stops the thread; it is kept (with its siginfo) and handed back once the
    thread is restored: the first as the thread is let go, any others sent again after. Where the
    call waits on something another stopped thread holds, those threads are let go after
    RELEASE_AFTER_S so that it can go on. alloclab's own Ctrl-C and SIGTERM wait until the thread
    is restored.
  - Then the registers, the vector state and the stack bytes the call changed are put back."""

from __future__ import annotations

import ctypes
import os
import signal
import time
from dataclasses import dataclass

from alloclab.measure.inspect import ptrace as pt
from alloclab.measure.inspect.memory import PAGE
from alloclab.measure.inspect.procfs import ProcessGone, threads

RED_ZONE = 128
SCRATCH = 64 << 10           # the stack below the frame that the function may use, saved and put back
RELEASE_AFTER_S = 0.25       # a call not back by then may wait on another thread: the others are let go
WARN_EVERY_S = 5.0
RAX, RCX, RDX, RSI, RDI, ORIG_RAX, EFLAGS, R8, R9 = 10, 11, 12, 13, 14, 15, 18, 9, 8
ARG_REGS = (RDI, RSI, RDX, RCX, R8, R9)
TF, DF = 0x100, 0x400        # single-step and direction flags: both clear at a call, as the ABI says
ALLOCLAB_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


class CallFaulted(Exception):
    """The function itself faulted (a signal at another place than the return address)."""


class NoRoom(Exception):
    """The thread's stack has no room below its pointer for the call's frame (nothing was written)."""


@dataclass
class Out:
    """An out-buffer of n bytes on the stack (its first bytes `init`, else zeros); its bytes after
    the call are in the result."""
    n: int = 8
    init: bytes = b""

    def data(self) -> bytes:
        return self.init[:self.n].ljust(self.n, b"\0")


def _tgsigqueueinfo(pid: int, tid: int, sig: int, info: bytes) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(info, pt.SIGINFO_BYTES)
    return libc.syscall(297, pid, tid, sig, buf) == 0   # rt_tgsigqueueinfo on x86_64


class RemoteCall:
    """`with RemoteCall(pid, tid, freezer, stack_lo, progress) as rc: rc.call(fn, args)`: calls made
    on thread `tid`, which the freezer holds stopped at an interrupt; everything put back at exit."""

    def __init__(self, pid: int, tid: int, freezer: pt.Freezer, stack_lo: int, progress=None):
        self.pid, self.tid, self.freezer, self.progress = pid, tid, freezer, progress
        self.stack_lo = stack_lo
        self.signals: list[tuple[int, bytes]] = []
        self.released = False
        self.calls = 0

    # --- saving and putting back -----------------------------------------------------------------

    def __enter__(self) -> "RemoteCall":
        self._mask = signal.pthread_sigmask(signal.SIG_BLOCK, ALLOCLAB_SIGNALS)
        try:
            self.fd = os.open(f"/proc/{self.pid}/mem", os.O_RDWR | os.O_CLOEXEC)
        except (FileNotFoundError, ProcessLookupError):
            signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
            raise ProcessGone(self.pid) from None
        try:
            self.regs = pt.get_regs(self.tid)
            self.fp = pt.get_fpstate(self.tid)
            sp = self.regs[pt.RSP]
            self.top = (sp - RED_ZONE) & ~15
            self.lo = max(self.stack_lo, (self.top - SCRATCH) & ~(PAGE - 1))
            self.saved = self._read(self.lo, sp - self.lo)
        except BaseException:
            self._close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._put_back()
        except OSError:
            if os.path.exists(f"/proc/{self.pid}/task/{self.tid}"):
                raise
            # The thread is gone (the process was killed meanwhile): nothing is left to put back.
        finally:
            self._close()

    def _put_back(self) -> None:
        pt.set_regs(self.tid, self.regs)
        pt.set_fpstate(self.tid, self.fp)
        now = self._read(self.lo, len(self.saved))
        for at in range(0, len(now), PAGE):
            if now[at:at + PAGE] != self.saved[at:at + PAGE]:
                os.pwrite(self.fd, self.saved[at:at + PAGE], self.lo + at)
        if self.signals and not self.freezer.pending(self.tid):
            sig, info = self.signals.pop(0)
            if info:
                pt.set_siginfo(self.tid, info)
            self.freezer.hand_back(self.tid, sig)

    def _close(self) -> None:
        os.close(self.fd)
        signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)

    def resend(self) -> None:
        """The signals that arrived during the calls beyond the one handed back at the detach: sent
        again, with their siginfo where the kernel allows it (a user's signal), else as tgkill's."""
        for sig, info in self.signals:
            if not (info and _tgsigqueueinfo(self.pid, self.tid, sig, info)):
                _tgkill(self.pid, self.tid, sig)
        self.signals.clear()

    def _read(self, at: int, n: int) -> bytes:
        """n bytes of the thread's stack. A page never touched (neither present nor swapped, from
        pagemap) reads as zeros without a read, which would map the zero page into the process."""
        out = bytearray(n)
        present = self._touched(at, n)
        for k, off in enumerate(range(0, n, PAGE)):
            if not present[k]:
                continue
            try:
                data = os.pread(self.fd, min(PAGE, n - off), at + off)
            except OSError:
                continue
            out[off:off + len(data)] = data
        return bytes(out)

    def _touched(self, at: int, n: int) -> list[bool]:
        pages = (n + PAGE - 1) // PAGE
        try:
            fd = os.open(f"/proc/{self.pid}/pagemap", os.O_RDONLY | os.O_CLOEXEC)
            try:
                raw = os.pread(fd, 8 * pages, (at // PAGE) * 8)
            finally:
                os.close(fd)
        except OSError:
            return [True] * pages
        words = [int.from_bytes(raw[i:i + 8], "little") for i in range(0, len(raw), 8)]
        return [bool(w >> 62) for w in words] + [True] * (pages - len(words))   # present or swapped

    # --- one call ------------------------------------------------------------------------------------

    def call(self, fn: int, args: list) -> tuple[int, list[bytes]]:
        """fn(args): each an int, bytes (a string: written to the stack, its address passed) or an
        Out (an out-buffer's address). Returns rax and each Out's bytes after the call."""
        at, where = self.top, []
        values = []
        for a in args:
            if isinstance(a, (bytes, Out)):
                data = a if isinstance(a, bytes) else a.data()
                at = (at - len(data)) & ~15
                where.append((at, len(data), isinstance(a, Out)))
                values.append(at)
            else:
                values.append(a)
        data_lo = at
        stack_args = values[len(ARG_REGS):]
        sp = ((data_lo - 8 * len(stack_args)) & ~15) - 8   # at entry (sp + 8) is 16-byte aligned
        if sp - self.lo < PAGE:
            raise NoRoom(self.tid)
        frame = bytearray(self.top - sp)
        frame[8:8 + 8 * len(stack_args)] = b"".join(v.to_bytes(8, "little") for v in stack_args)
        for (a, (w, n, _)) in zip([a for a in args if isinstance(a, (bytes, Out))], where):
            frame[w - sp:w - sp + n] = a if isinstance(a, bytes) else a.data()
        os.pwrite(self.fd, bytes(frame), sp)
        regs = list(self.regs)
        for reg, v in zip(ARG_REGS, values):
            regs[reg] = v
        regs[pt.RIP], regs[pt.RSP], regs[RAX], regs[ORIG_RAX] = fn, sp, 0, -1
        regs[EFLAGS] &= ~(TF | DF)
        pt.set_regs(self.tid, regs)
        pt.cont(self.tid, 0)
        self.calls += 1
        rax = self._until_returned(sp)
        outs = [os.pread(self.fd, n, w) for w, n, is_out in where if is_out]
        return rax, outs

    def _until_returned(self, sp: int) -> int:
        started = time.perf_counter()
        warn_at = started + WARN_EVERY_S
        while True:
            try:
                got, status = os.waitpid(self.tid, os.WNOHANG | pt.WALL)
            except ChildProcessError:
                raise ProcessGone(self.pid) from None
            if got != self.tid:
                now = time.perf_counter()
                if not self.released and now - started > RELEASE_AFTER_S:
                    # It may wait on a lock another stopped thread holds: let them go on.
                    self.freezer.release([t for t in threads(self.pid) if t != self.tid])
                    self.released = True
                if now > warn_at and self.progress:
                    self.progress(f"waiting for the call in thread {self.tid} of process {self.pid} to return "
                                  f"({now - started:.0f} s): a call once started is never abandoned")
                    warn_at = now + WARN_EVERY_S
                time.sleep(0.0001 if now - started < 0.01 else 0.002)
                continue
            if not os.WIFSTOPPED(status):
                raise ProcessGone(self.pid)
            sig = os.WSTOPSIG(status)
            if status >> 16:       # an event stop (group-stop, interrupt): not the call's
                pt.cont(self.tid, 0)
                continue
            if sig == signal.SIGSEGV:
                regs = pt.get_regs(self.tid)
                if regs[pt.RIP] == 0 and regs[pt.RSP] == sp + 8:
                    return regs[RAX]
                raise CallFaulted(f"SIGSEGV at {regs[pt.RIP]:#x}")
            if sig in (signal.SIGILL, signal.SIGBUS, signal.SIGFPE, signal.SIGTRAP, signal.SIGSYS):
                raise CallFaulted(f"{signal.Signals(sig).name} at {pt.get_regs(self.tid)[pt.RIP]:#x}")
            self.signals.append((sig, pt.get_siginfo(self.tid)))   # kept, handed back once restored
            pt.cont(self.tid, 0)


def _tgkill(pid: int, tid: int, sig: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall(234, pid, tid, sig)   # tgkill on x86_64; a thread gone meanwhile has no use for it
