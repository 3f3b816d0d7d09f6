"""Bounded pauses: work done while the process is stopped, in slices of at most SLICE_S, with the
process let go between them. Each stop is the Freezer's (ptrace.py), detached on every path."""

from __future__ import annotations

import time
from contextlib import ExitStack

from alloclab.measure.inspect.ptrace import Freezer, Stop

SLICE_S = 0.01       # at most about this long stopped per slice (a heap slice ends early past it)
SLICE_BYTES = 8 << 20    # a heap slice: read in one stop (about 3-8 ms here)


class Pacer:
    """`with Pacer(freezer) as p:` stops the process; `p.tick()` between small reads lets it go and
    stops it again once SLICE_S has passed. `p.stop` is the current stop (threads, registers)."""

    def __init__(self, freezer: Freezer):
        self.freezer = freezer
        self._stack: ExitStack | None = None
        self._since = 0.0
        self.stop: Stop | None = None

    def __enter__(self) -> "Pacer":
        self._pause()
        return self

    def __exit__(self, *exc) -> None:
        self._release()

    def _pause(self) -> None:
        self._stack = ExitStack()
        try:
            self.stop = self._stack.enter_context(self.freezer.paused())
        except BaseException:
            self._stack.close()
            self._stack = None
            raise
        self._since = time.perf_counter()

    def _release(self) -> None:
        if self._stack is not None:
            stack, self._stack = self._stack, None
            stack.close()

    def tick(self) -> None:
        if time.perf_counter() - self._since > SLICE_S:
            self._release()
            self._pause()
