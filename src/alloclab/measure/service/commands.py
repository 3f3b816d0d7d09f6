"""What every child of a service experiment shares: the run_as user, a clean environment, free
ports, deferred interrupts, and one child command (setup, client, probe, teardown) run to its end."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import psutil

from alloclab.errors import AlloclabError
from alloclab.measure.run import file_tail, kill_tree
from alloclab.catalog.variants import ALLOCATOR_ENV
from alloclab.measure.service.proctree import SAMPLE_S


class ServiceFailed(Exception):
    """The server did not start, died, or misbehaved; the run fails with this message and log tail."""

    def __init__(self, message: str, log_tail: str = ""):
        super().__init__(message)
        self.log_tail = log_tail


# --- who runs what ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Identity:
    """The user that setup, server, clients and teardown run as (run_as, when alloclab is root)."""

    wrapper: tuple[str, ...] = ()
    user: str | None = None
    uid: int | None = None
    gid: int | None = None
    home: str | None = None

    @classmethod
    def for_run_as(cls, run_as: str | None) -> "Identity":
        if not run_as or os.geteuid() != 0:
            return cls()  # not root: everything runs as the current user, which servers accept
        try:
            pw = pwd.getpwnam(run_as)
        except KeyError:
            raise AlloclabError(
                f"run_as names the user '{run_as}', which does not exist on this machine. Create it "
                f"(`useradd --system {run_as}`, or install the server package, which creates it) or change "
                f"run_as in the experiment file.") from None
        setpriv = shutil.which("setpriv")
        if not setpriv:
            raise AlloclabError("Running commands as another user needs setpriv, which is missing. Install it "
                                "with `apt-get install -y util-linux` (as root).")
        return cls((setpriv, f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--init-groups", "--"),
                   run_as, pw.pw_uid, pw.pw_gid, pw.pw_dir)

    def own(self, path: Path) -> None:
        if self.uid is not None:
            os.chown(path, self.uid, self.gid)

    def env(self, env: dict[str, str]) -> dict[str, str]:
        if self.user is None:
            return env
        return env | {"HOME": self.home or "/", "USER": self.user, "LOGNAME": self.user}

    def argv(self, argv: list[str], extra_env: dict[str, str] | None = None) -> list[str]:
        """argv as the run_as user; extra_env is handed to the program alone (not the wrapper)."""
        if not self.wrapper:
            return argv
        settings = [f"{k}={v}" for k, v in (extra_env or {}).items()]
        return [*self.wrapper, *([_env_program(), *settings] if settings else []), *argv]

    def launchers(self) -> set[str]:
        """The programs argv() puts in front of a command, which exec into it: ours, not the user's."""
        return {self.wrapper[0], _env_program()} if self.wrapper else set()


def _env_program() -> str:
    return shutil.which("env") or "/usr/bin/env"


def clean_env(env: dict[str, str], variant_env: dict[str, str]) -> dict[str, str]:
    """The environment of everything that is not the program under test: no allocator, no LD_DEBUG."""
    return {k: v for k, v in env.items()
            if not ALLOCATOR_ENV.match(k) and not k.startswith("LD_DEBUG") and k not in variant_env}


# --- ports -----------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def port_holder(port: int) -> str:
    try:
        for c in psutil.net_connections(kind="tcp"):
            if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid:
                try:
                    return f"{psutil.Process(c.pid).name()} (pid {c.pid})"
                except psutil.Error:
                    return f"pid {c.pid}"
    except (psutil.Error, OSError):
        pass
    return "another program"


def tcp_accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


# --- signals ---------------------------------------------------------------------------------------

@contextlib.contextmanager
def deferred_interrupts(reraise: bool = True):
    """Let a teardown finish: a Ctrl-C or SIGTERM during it is held until it is done."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    handler = lambda signum, frame: got.append(signum)  # noqa: E731
    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if got and reraise:
            raise KeyboardInterrupt


def _still_running(procs) -> list[int]:
    """Pids of these processes that still run (psutil checks the pid was not reused since)."""
    out = []
    for p in procs:
        with contextlib.suppress(psutil.Error):
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
    return out


# --- one child command (setup, client, probe, teardown) --------------------------------------------

def start_session(argv: list[str], **kwargs) -> subprocess.Popen:
    """subprocess.Popen in a session of its own, whose child is never left behind by a Ctrl-C: one that
    lands after the exec but before Popen returns (it waits on the exec's pipe) loses the Popen object
    with the child running (a Ceph client's fio wrapper outlived alloclab so). Any child of ours that
    was not there before is then stopped, its session with it."""
    me = psutil.Process()
    before = {c.pid for c in me.children()}
    try:
        return subprocess.Popen(argv, start_new_session=True, close_fds=True, **kwargs)
    except BaseException:
        for c in me.children():
            if c.pid not in before:
                kill_tree(c.pid, [c.pid], grace_s=0.5)
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(c.pid, 0)
        raise


@dataclass
class Finished:
    code: int | None
    output: str
    wall_s: float
    timed_out: bool = False


def run_command(argv: list[str], env: dict[str, str], cwd: Path, timeout: float | None, out: Path,
                tick: Callable[[], None] | None = None, tick_s: float = SAMPLE_S) -> Finished:
    """Run one command in its own session, output to `out`; `tick` is called while it runs.

    Ctrl-C (KeyboardInterrupt) kills its process group and propagates."""
    with open(out, "wb") as fh:
        t0 = time.perf_counter()
        try:
            proc = start_session(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT)
        except OSError as exc:
            raise ServiceFailed(f"could not start {argv[0]}: {exc.strerror}") from None
    seen: dict[int, psutil.Process] = {}
    timed_out = False
    try:
        while proc.poll() is None:
            with contextlib.suppress(psutil.Error):
                for c in psutil.Process(proc.pid).children(recursive=True):
                    seen.setdefault(c.pid, c)
            if tick:
                tick()
            if timeout is not None and time.perf_counter() - t0 > timeout:
                timed_out = True
                break
            try:
                proc.wait(tick_s)
            except subprocess.TimeoutExpired:
                pass
    except BaseException:
        kill_tree(proc.pid, [proc.pid, *seen], grace_s=0.5)
        proc.wait()
        raise
    wall = time.perf_counter() - t0
    leftovers = _still_running(seen.values())
    if timed_out or leftovers:
        kill_tree(proc.pid, [proc.pid, *seen], grace_s=0.5)
    proc.wait()
    return Finished(None if timed_out else proc.returncode, file_tail(out), wall, timed_out)
