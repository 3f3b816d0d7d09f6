"""The persistent launcher: one small static process per thread that starts every run.

Starting the launcher afresh for each run (an exec of its own, a result file written and read)
cost about as much as a whole run of /bin/true; kept running, it only spawns. What a run gets is
unchanged: it is started by the same small static program (so ru_maxrss is the program's own
and LD_PRELOAD never touches the launcher), in a session of its own, stdin /dev/null, stdout and
stderr to files, timed and accounted by the kernel around spawn/exec/wait4. Protocol: see
launcher/spawn.c (`--serve`).

One launcher per thread and per process: a forked child (a fleet worker's process pool) or a
second thread starts its own rather than sharing pipes. A launcher that stops answering (its child
stuck beyond a kill) is killed and replaced at the next run.
"""

from __future__ import annotations

import atexit
import functools
import math
import os
import select
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from alloclab.errors import AlloclabError
from alloclab.workloads import build as cbuild

_local = threading.local()
FS_ENCODING = sys.getfilesystemencoding()


class SpawnError(OSError):
    pass


class Spawner:
    def __init__(self, prefix: tuple[str, ...] = (), env: dict[str, str] | None = None) -> None:
        """`prefix`: what the launcher itself runs under (a recorder of every run it starts:
        measure/fingerprint_syscalls.py's SharedRecorder), with `env`; none by default."""
        self.prefix = tuple(prefix)
        # A recorder in front gets a session of its own: the terminal's Ctrl-C is alloclab's to
        # handle (the launcher ignores it), and perf would stop recording on it.
        self.proc = subprocess.Popen([*prefix, str(launcher()), "--serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True,
                                     env=env or {}, bufsize=0, start_new_session=bool(prefix))
        # Under a recorder: every child it forked, in order (0: forked, but its exec failed), so
        # that the recording can be split by run (fingerprint_syscalls.split_by_run).
        self.launched: list[int] | None = [] if prefix else None
        self.broken = False
        self.owner = os.getpid()
        self._buf = b""
        self.poller = select.poll()
        self.poller.register(self.proc.stdout.fileno(), select.POLLIN)
        atexit.register(self.close)

    def alive(self) -> bool:
        """Ours, and not yet seen to end. No waitpid per run: a launcher that died since is found
        when the next request cannot be written (run_once then starts a fresh one)."""
        if self.prefix:   # a recorder's: few runs, and one gone must not be handed the next
            return self.owner == os.getpid() and not self.broken and self.proc.poll() is None
        return self.owner == os.getpid() and self.proc.returncode is None

    def start(self, argv: list[str], env: dict[str, str], cwd: str | None, out: str, err: str) -> None:
        """Ask for argv to be forked; its pid is the first line of the reply (see Child)."""
        fields = [out, err, cwd or "", str(len(argv)), *argv, *map("=".join, env.items())]
        payload = ("\0".join(fields) + "\0").encode(FS_ENCODING, "surrogateescape")   # as os.fsencode
        try:
            self.proc.stdin.write(struct.pack("=I", len(payload)) + payload)
        except (BrokenPipeError, OSError) as exc:
            raise SpawnError(f"the launcher is gone: {exc}") from None

    def readline(self, timeout_s: float | None) -> str | None:
        """The next reply line, or None if none came within timeout_s."""
        deadline = None if timeout_s is None else time.perf_counter() + timeout_s
        while b"\n" not in self._buf:
            wait = -1 if deadline is None else max(0, math.ceil((deadline - time.perf_counter()) * 1000))
            if not self.poller.poll(wait):
                if deadline is not None and time.perf_counter() >= deadline:
                    return None
                continue
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                raise SpawnError("the launcher exited")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode()

    def close(self) -> None:
        if self.owner != os.getpid() or self.proc.poll() is not None:
            return
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.kill()

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass


@functools.cache
def launcher() -> Path:
    """The static fork/exec/wait4 launcher (see launcher/spawn.c for why it exists)."""
    src = cbuild.package_file("measure", "launcher", "spawn.c")
    try:
        return cbuild.build("alloclab-spawn", [src], ["-static"])
    except AlloclabError as exc:
        raise AlloclabError(
            "Cannot build alloclab's static launcher; a static libc is needed (Debian: libc6-dev). "
            f"Install it with `apt-get install -y gcc libc6-dev`. Details: {exc}") from None


def current() -> Spawner:
    """This thread's launcher, started on first use."""
    s = getattr(_local, "spawner", None)
    if s is None or not s.alive():
        s = _local.spawner = Spawner()
    return s


def discard(s: Spawner) -> None:
    """Kill a launcher that did not answer; the next run starts a fresh one. A launcher under a
    recorder is only marked: its owner stops it (killing it would lose the recording) and runs
    the rest without it."""
    if s.prefix:
        s.broken = True
        return
    s.kill()
    if getattr(_local, "spawner", None) is s:
        _local.spawner = None


class Child:
    """A run asked of the launcher: its pid comes first, then its result; wait for them in this
    thread, sampling in between. A run that ends within the first wait costs one wake-up."""

    def __init__(self, srv: Spawner):
        self.spawner = srv
        self.pid: int | None = None
        self.done = False
        self.line: str | None = None
        self.t_end: float | None = None

    def wait(self, timeout_s: float | None) -> bool:
        """True once the program has exited, waiting at most timeout_s (None: as long as it takes)."""
        deadline = None if timeout_s is None else time.perf_counter() + timeout_s
        while not self.done:
            left = None if deadline is None else max(0.0, deadline - time.perf_counter())
            line = self.spawner.readline(left)
            if line is None:
                return False
            if self.pid is None:
                self._take_pid(line)
            else:
                self.line, self.t_end, self.done = line, time.perf_counter(), True
        return True

    def started(self) -> int:
        """The program's pid (the leader of its own process group), waiting for its start if need
        be; 0 when it could not be started (the answer is then in `line`)."""
        while self.pid is None:
            self._take_pid(self.spawner.readline(None))
        return self.pid

    def _take_pid(self, line: str) -> None:
        kind, _, value = line.partition(" ")
        if kind == "pid":
            self.pid = int(value)
        elif kind == "noexec":   # no program ran: the answer is the whole result (pid stays 0)
            self.pid, self.line, self.t_end, self.done = 0, line, time.perf_counter(), True
        elif kind == "fail":
            raise SpawnError(int(value), os.strerror(int(value)))
        else:
            raise SpawnError(f"the launcher answered {line!r}")
        if (launched := getattr(self.spawner, "launched", None)) is not None:
            launched.append(self.pid)
