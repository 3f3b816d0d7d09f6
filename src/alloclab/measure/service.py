"""Service mode: a server under the variant, a load client that is not, and the server's whole
process tree measured while the client drives it.

One `Session` per experiment file holds the working directory, runs setup and teardown once,
and starts servers; one executor per [[client]] (or per [[command]] in command mode) plugs into
the runner through `workload.Executor`.

How the server tree is accounted (service.lifetime = "run", the default):
  * The server is started by alloclab's static launcher, so the kernel's wait4() rusage of the
    server's main process includes every descendant it reaped: with PostgreSQL, the postmaster
    reaps every backend, so CPU (user, system, all threads), page faults and context switches of
    the whole tree come from the kernel, exactly.
  * A process that leaves the chain (its parent dies first and it is re-parented outside the
    tree) is not in that figure; for those, the last /proc sample of its CPU and faults is
    added. Processes that live less than one sampling interval outside the chain are missed.
  * RSS and PSS are summed over every process of the tree from /proc, RSS every 50 ms, PSS
    (from smaps_rollup) every 0.5 s and at the end; the final reading is taken after the
    client ends and `idle` seconds of rest, before the server is stopped.
  * With lifetime = "block" a server outlives the run, so its CPU, faults and memory for one
    run are /proc deltas over the run's window (client start to final reading).
  * A client's warm-up (before the load) and memory phases (after it) are in service_phases.py;
    the server's CPU and faults during them are taken out of the run's figures.
  * Every process seen is checked for the variant's library in /proc/PID/maps (wrappers such
    as setpriv that exec into the server are skipped), so a backend that escaped the preload
    shows up in RunResult.processes and fails verification.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import psutil

from alloclab.workloads import build as cbuild
from alloclab.measure import run as measure
from alloclab.measure import service_phases
from alloclab.workloads import phases
from alloclab.errors import AlloclabError
from alloclab.workloads.experiment_file import ExperimentFile, Load, MetricSpec, Step, substitute, substitute_argv
from alloclab.measure.run import RunInterrupted, RunResult, TreeSampler, kill_tree, run_once
from alloclab.workloads.command import resolve_command
from alloclab.workloads.metrics import MetricDef, extract, output_tail
from alloclab.measure.perfstat import wrap_perf_stat
from alloclab.catalog.variants import ALLOCATOR_ENV

SAMPLE_S = 0.05
PSS_EVERY_S = 0.5
LOG_TAIL_LINES = 20
BACKGROUND_STOP_S = 15.0   # a [[setup]] daemon gets this long to exit after SIGTERM
WRAPPERS = frozenset({"setpriv", "env", "runuser"})
_TICK = os.sysconf("SC_CLK_TCK")
_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


# A hook that puts a wrapper (perf record) in front of one server: given the server's own
# directory (writable by run_as), it returns the argv to insert before the server program.
ServerWrap = Callable[[Path], list[str]]


class ServiceFailed(Exception):
    """The server did not start, died, or misbehaved; the run fails with this message and log tail."""

    def __init__(self, message: str, log_tail: str = ""):
        super().__init__(message)
        self.log_tail = log_tail


# --- /proc -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ProcStat:
    ppid: int
    state: str
    user_s: float
    sys_s: float
    minflt: int
    majflt: int
    rss_kb: int
    # Of its children that it has reaped (wait4 rusage counts them in the parent from then on).
    child_user_s: float = 0.0
    child_sys_s: float = 0.0
    child_minflt: int = 0
    child_majflt: int = 0

    def minus(self, other: "ProcStat | None") -> tuple[float, float, int, int]:
        if other is None:
            return self.user_s, self.sys_s, self.minflt, self.majflt
        return (max(0.0, self.user_s - other.user_s), max(0.0, self.sys_s - other.sys_s),
                max(0, self.minflt - other.minflt), max(0, self.majflt - other.majflt))


def read_stat(pid: int) -> ProcStat | None:
    """CPU (all threads), faults, parent and RSS of one process from /proc/PID/stat."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode(errors="replace")
    except OSError:
        return None
    f = raw[raw.rfind(")") + 2:].split()
    # Fields after "(comm)", counted from 3 in proc(5): state ppid ... minflt(10) majflt(12) utime(14) stime(15) rss(24)
    return ProcStat(int(f[1]), f[0], int(f[11]) / _TICK, int(f[12]) / _TICK, int(f[7]), int(f[9]),
                    int(f[21]) * _PAGE_KB, int(f[13]) / _TICK, int(f[14]) / _TICK, int(f[8]), int(f[10]))


def read_pss_kb(pid: int) -> int | None:
    """PSS of one process; None if it is gone (or a zombie). PermissionError when not ours to read."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            for line in fh:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1])
    except PermissionError:
        raise
    except (OSError, ValueError, IndexError):
        return None
    return None


class ProcTree(TreeSampler):
    """TreeSampler plus per-process CPU, faults and PSS, with per-run windows."""

    def __init__(self, root_pid: int, mapped_marker: str | None):
        super().__init__(root_pid, mapped_marker)
        self.stat: dict[int, ProcStat] = {}
        self.max_proc_kb = 0
        self.pss_peak_kb = self.pss_last_kb = 0
        self.pss_ok = True
        self._pss_at = 0.0
        self.begin_window()

    def begin_window(self) -> None:
        self.win_stat = dict(self.stat)
        self.win_peak_kb = self.win_max_proc_kb = self.win_pss_peak_kb = 0
        self.win_series: list[tuple[float, int]] = []
        self.win_samples = 0

    def _note_process(self, proc: psutil.Process) -> None:
        # A wrapper (setpriv, env) execs into the server: judge the server, not the wrapper.
        try:
            if proc.name() in WRAPPERS:
                return
        except psutil.Error:
            return
        super()._note_process(proc)

    def sample(self, pss: bool = False) -> None:
        self._refresh_tree()
        total = 0
        for pid, proc in list(self.known.items()):
            st = read_stat(pid)
            if st is None:
                del self.known[pid]
                continue
            self.stat[pid] = st
            if st.state in ("Z", "X"):
                continue  # exited, not yet reaped: no memory, and no maps to judge
            total += st.rss_kb
            self.max_proc_kb = max(self.max_proc_kb, st.rss_kb)
            self.win_max_proc_kb = max(self.win_max_proc_kb, st.rss_kb)
            self._note_process(proc)
        self.samples += 1
        self.win_samples += 1
        if total:
            self.last_kb = total
            self.peak_kb = max(self.peak_kb, total)
            self.win_peak_kb = max(self.win_peak_kb, total)
            point = (round(time.perf_counter() - self.t0, 4), total)
            self.series.append(point)
            self.win_series.append(point)
        now = time.perf_counter()
        if pss or now - self._pss_at >= PSS_EVERY_S:
            self._pss_at = now
            self._sample_pss()

    def _sample_pss(self) -> None:
        total, read_any = 0, False
        for pid in list(self.known):
            st = self.stat.get(pid)
            if st is None or st.state in ("Z", "X"):
                continue
            try:
                kb = read_pss_kb(pid)
            except PermissionError:
                self.pss_ok = False  # not ours to read: report no PSS rather than a wrong one
                continue
            if kb is None:
                continue
            total += kb
            read_any = True
        if read_any:
            self.pss_last_kb = total
            self.pss_peak_kb = max(self.pss_peak_kb, total)
            self.win_pss_peak_kb = max(self.win_pss_peak_kb, total)

    def in_chain(self, pid: int) -> bool:
        """Was the process, when last seen, still the child of a tree process (so wait4 counts it)?"""
        st = self.stat.get(pid)
        return st is not None and (st.ppid == self.root_pid or st.ppid in self.stat)

    def orphan_usage(self) -> tuple[float, float, int, int]:
        u = s = 0.0
        mi = ma = 0
        for pid, st in self.stat.items():
            if not self.in_chain(pid):
                u, s, mi, ma = u + st.user_s, s + st.sys_s, mi + st.minflt, ma + st.majflt
        return u, s, mi, ma

    def sampled_cpu_s(self) -> float:
        return sum(st.user_s + st.sys_s for st in self.stat.values())

    def usage_so_far(self) -> tuple[float, float, int, int]:
        """CPU and faults of the tree up to now, read from /proc now: each live process's own plus
        those of the children it reaped, so a process that exited is counted once, in its parent."""
        u = s = 0.0
        mi = ma = 0
        for pid in list(self.known):
            st = read_stat(pid)
            if st is None:
                continue
            self.stat[pid] = st
            u, s = u + st.user_s + st.child_user_s, s + st.sys_s + st.child_sys_s
            mi, ma = mi + st.minflt + st.child_minflt, ma + st.majflt + st.child_majflt
        return u, s, mi, ma

    def window_usage(self) -> tuple[float, float, int, int]:
        u = s = 0.0
        mi = ma = 0
        for pid, st in self.stat.items():
            du, ds, dmi, dma = st.minus(self.win_stat.get(pid))
            u, s, mi, ma = u + du, s + ds, mi + dmi, ma + dma
        return u, s, mi, ma


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
        return [*self.wrapper, *([shutil.which("env") or "/usr/bin/env", *settings] if settings else []), *argv]


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


def _log_tail(*paths: Path, lines: int = LOG_TAIL_LINES) -> str:
    text = "\n".join(measure._tail(p, 64 * 1024).rstrip() for p in paths if p.exists())
    tail = [ln for ln in text.strip().splitlines() if ln.strip()][-lines:]
    return "\n".join(tail) if tail else "(the service wrote nothing)"


def _still_running(procs) -> list[int]:
    """Pids of these processes that still run (psutil checks the pid was not reused since)."""
    out = []
    for p in procs:
        with contextlib.suppress(psutil.Error):
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
    return out


# --- one child command (setup, client, probe, teardown) --------------------------------------------

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
            proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=fh,
                                    stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
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
    return Finished(None if timed_out else proc.returncode, measure._tail(out), wall, timed_out)


# --- one server ------------------------------------------------------------------------------------

class Server:
    """One server process tree, started by the launcher, with its probe and stop method."""

    def __init__(self, session: "Session", serial: int, port: int, data_dir: Path | None,
                 extra_env: dict[str, str], mapped_marker: str | None, wrap: ServerWrap | None = None):
        self.s = session
        self.wrap = wrap
        self.serial = serial
        self.port = port
        self.data_dir = data_dir
        self.dir = session.private / f"server-{serial}"
        self.dir.mkdir(parents=True)
        session.identity.own(self.dir)
        self.out, self.err, self.res = self.dir / "stdout", self.dir / "stderr", self.dir / "rusage"
        self.extra_env = dict(extra_env)
        self.ld_prefix: Path | None = None
        if "LD_DEBUG_OUTPUT" in self.extra_env:
            # The runner's directory may not be writable by run_as; the trace goes here and is copied back.
            self.ld_prefix = self.dir / "ld"
            self.extra_env["LD_DEBUG_OUTPUT"] = str(self.ld_prefix)
        self.mapped_marker = mapped_marker
        self.main_pid: int | None = None
        self.done = threading.Event()
        self.waited: dict = {}
        self.tree: ProcTree | None = None
        self.proc: subprocess.Popen | None = None

    def values(self) -> dict[str, object]:
        return self.s.values(port=self.port, data_dir=self.data_dir)

    def describe_probe(self) -> str:
        svc = self.s.ef.service
        if svc.ready == "tcp":
            return f"TCP port 127.0.0.1:{self.port} accepting connections"
        if svc.ready == "log":
            return f"a log line matching '{svc.ready_log}'"
        return f"the command `{' '.join(substitute_argv(svc.ready_command, self.values()))}` succeeding"

    def log_tail(self) -> str:
        return _log_tail(self.out, self.err)

    def alive(self) -> bool:
        return self.proc is not None and not self.done.is_set()

    # --- start ---------------------------------------------------------------------------------

    def start(self) -> None:
        svc = self.s.ef.service
        if port_in_use(self.port):
            raise AlloclabError(
                f"Port {self.port} on 127.0.0.1 is already in use by {port_holder(self.port)}, so the service of "
                f"'{self.s.ef.name}' cannot listen there. Stop that program, or remove `port` from [service] in "
                f"{self.s.ef.path} so that alloclab picks a free port.")
        argv = substitute_argv(svc.command, self.values())
        env = self.s.identity.env(self.s.base_clean)
        if self.wrap is not None:
            # The variant's settings go through `env` after the wrapper, so that they reach the
            # server alone (perf is not preloaded); the wrapper runs as run_as, like the server.
            settings = [f"{k}={v}" for k, v in self.extra_env.items()]
            argv = [*self.wrap(self.dir), shutil.which("env") or "/usr/bin/env", *settings, *argv]
            argv = self.s.identity.argv(argv)
        elif self.s.identity.wrapper:
            argv = self.s.identity.argv(argv, self.extra_env)
        else:
            env = env | self.extra_env
        launch = [str(cbuild.launcher()), str(self.res), *argv]
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            try:
                self.proc = subprocess.Popen(launch, env=env, cwd=self.s.workdir, stdin=subprocess.DEVNULL,
                                             stdout=out, stderr=err, start_new_session=True, close_fds=True)
            except OSError as exc:
                raise ServiceFailed(f"could not start the service {argv[0]}: {exc.strerror}") from None
        self.t0 = time.perf_counter()
        threading.Thread(target=self._wait, name=f"wait4-{self.proc.pid}", daemon=True).start()
        self.tree = ProcTree(self.proc.pid, self.mapped_marker)
        self._await_ready(svc.start_timeout)

    def _wait(self) -> None:
        _, status, usage = os.wait4(self.proc.pid, 0)
        self.waited.update(status=status, usage=usage)
        self.done.set()

    def sample(self, pss: bool = False) -> None:
        self.tree.sample(pss)
        if self.main_pid is None and self.tree.root is not None:
            with contextlib.suppress(psutil.Error):
                kids = self.tree.root.children()
                if kids and self.wrap is not None:
                    # Signals go to the server, which perf forks, not to perf: perf would pass on
                    # SIGTERM whatever the configured stop signal is.
                    kids = kids[0].children()
                if kids:
                    self.main_pid = kids[0].pid

    def _probe(self) -> bool:
        svc = self.s.ef.service
        if svc.ready == "tcp":
            return tcp_accepts(self.port)
        if svc.ready == "log":
            return re.search(svc.ready_log, measure._tail(self.out) + "\n" + measure._tail(self.err),
                             re.MULTILINE) is not None
        argv = self.s.identity.argv(substitute_argv(svc.ready_command, self.values()))
        return run_command(argv, self.s.clean_for_commands(), self.s.workdir, 5.0, self.dir / "probe").code == 0

    def _await_ready(self, timeout: float) -> None:
        deadline = self.t0 + timeout
        while True:
            self.sample()
            if self.done.is_set():
                raise ServiceFailed(f"the service exited ({self.exit_text()}) before it became ready "
                                    f"({self.describe_probe()})", self.log_tail())
            if self._probe():
                self.sample(pss=True)
                self._warn_if_exposed()
                return
            if time.perf_counter() > deadline:
                raise ServiceFailed(f"the service did not become ready within {timeout:g} s (waited for "
                                    f"{self.describe_probe()}); raise service.start_timeout if it is just slow",
                                    self.log_tail())
            self.done.wait(SAMPLE_S)

    def _warn_if_exposed(self) -> None:
        if self.s.warned_exposed:
            return
        pids = set(self.tree.known)
        exposed = []
        with contextlib.suppress(psutil.Error, OSError):
            for c in psutil.net_connections("inet"):
                if c.pid in pids and c.status == psutil.CONN_LISTEN and c.laddr and \
                        not ipaddress.ip_address(c.laddr.ip).is_loopback:
                    exposed.append(f"{c.laddr.ip}:{c.laddr.port}")
        if exposed:
            self.s.warned_exposed = True
            self.s.note(f"The service listens on {', '.join(sorted(set(exposed)))}, reachable from other machines. "
                        f"Bind it to 127.0.0.1 in {self.s.ef.path}: a benchmark server should not be exposed.")

    def exit_text(self) -> str:
        self.done.wait(1.0)
        status = self.waited.get("status")
        if status is not None and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 127:
            return "it could not be executed"
        fields = measure._tail(self.res).split()
        if len(fields) == 10:
            return f"status {fields[1]}" if fields[0] == "exit" else f"killed by signal {fields[1]}"
        return "status unknown"

    # --- stop ----------------------------------------------------------------------------------

    def stop(self, hurry: bool = False) -> None:
        """Stop it the configured way; what is left after stop_timeout (or at once when hurrying) is killed."""
        if self.proc is None:
            return
        svc = self.s.ef.service
        grace = min(svc.stop_timeout, 3.0) if hurry else svc.stop_timeout
        if not self.done.is_set():
            try:
                if svc.stop_command and not hurry:
                    argv = self.s.identity.argv(substitute_argv(svc.stop_command, self.values()))
                    run_command(argv, self.s.clean_for_commands(), self.s.workdir, grace, self.dir / "stop")
                else:
                    sig = signal.SIGTERM if svc.stop_command else svc.stop_signal
                    # Before the server's pid is known, the launcher passes the signal on.
                    os.kill(self.main_pid or self.proc.pid, sig)
            except (ProcessLookupError, ServiceFailed):
                pass
            t_end = time.perf_counter() + grace
            while not self.done.is_set() and time.perf_counter() < t_end:
                self.sample()
                self.done.wait(SAMPLE_S)
        if not self.done.is_set():
            kill_tree(self.proc.pid, self.tree.pids())
            self.done.wait(5.0)
        # Descendants that outlived the server are part of it: count their CPU, then stop them.
        leftovers = _still_running(self.tree.known.values())
        if leftovers:
            for pid in leftovers:
                st = read_stat(pid)
                if st is not None:
                    self.tree.stat[pid] = st
            kill_tree(self.proc.pid, leftovers, grace_s=0.5)
        self.proc.returncode = 0  # reaped by our waiter thread

    def copy_ld_debug(self, target: str | None) -> None:
        if not target or self.ld_prefix is None:
            return
        dest = Path(target)
        for f in self.dir.glob(self.ld_prefix.name + ".*"):
            with contextlib.suppress(OSError):
                shutil.copyfile(f, dest.parent / (dest.name + f.suffix))


# --- the experiment's session ----------------------------------------------------------------------

class Session:
    """Working directory, setup/teardown and servers of one experiment file."""

    def __init__(self, ef: ExperimentFile, params: dict[str, object], *, keep: bool = False,
                 note: Callable[[str], None] = lambda text: None, base_env: dict[str, str] | None = None):
        self.ef = ef
        self.params = params
        self.keep = keep
        self.note = note
        self.identity = Identity.for_run_as(ef.run_as)
        self.base_clean = clean_env(dict(base_env if base_env is not None else os.environ), {})
        self.workdir: Path | None = None
        self.private: Path | None = None
        self.prepared = False
        self.cleaned = False
        self.commands_checked = False
        self.warned_exposed = False
        self.block_cells: set[tuple] = set()   # (variant settings, client) served in this block
        self.servers: dict[tuple, Server] = {}
        self.serial = 0
        self.starting: Server | None = None   # the latest server created, until it is up
        self.setup_port: int | None = None
        self.file_env: dict[str, str] = {}   # experiment.env, once the working directory is known
        self.background: list[tuple[subprocess.Popen, dict[int, psutil.Process]]] = []

    # --- values --------------------------------------------------------------------------------

    def static_values(self) -> dict[str, object]:
        return {"recipe_dir": self.ef.recipe_dir, **self.params}

    def values(self, port: int | None = None, data_dir: Path | None = None) -> dict[str, object]:
        v = self.static_values() | {"workdir": self.workdir}
        if port is not None:
            v["port"] = port
        if self.ef.service and self.ef.service.data_dir:
            v["data_dir"] = data_dir or self.base_data_dir()
        return v

    def base_data_dir(self) -> Path | None:
        svc = self.ef.service
        return self.workdir / svc.data_dir if svc and svc.data_dir else None

    def clean_for_commands(self) -> dict[str, str]:
        return self.identity.env(self.base_clean)

    def resolve_program(self, argv0: str, where: tuple) -> Path:
        """The executable the variant applies to, checked (with every other command) before any run."""
        self.check_commands()
        try:
            text = substitute(argv0, self.static_values())
        except AlloclabError:
            raise AlloclabError(f"{self._place(where)}: the program of {_dotted(where)} ('{argv0}') may only use "
                                f"[params] and {{recipe_dir}} placeholders, so that alloclab can check it before "
                                f"any run. Give its path directly.") from None
        return resolve_command(text)

    def _place(self, where: tuple) -> str:
        line = self.ef.locator.line_of(where) if self.ef.locator else None
        return f"{self.ef.path}:{line}" if line else str(self.ef.path)

    def check_commands(self) -> None:
        """Every command's program exists, before the (possibly long) setup starts."""
        if self.commands_checked:
            return
        ef = self.ef
        entries: list[tuple[tuple, tuple[str, ...]]] = []
        entries += [(("setup", i, "command"), s.command) for i, s in enumerate(ef.setup)]
        entries += [(("teardown", i, "command"), s.command) for i, s in enumerate(ef.teardown)]
        key = "client" if ef.service else "command"
        entries += [((key, i, "command"), load.command) for i, load in enumerate(ef.loads)]
        for i, load in enumerate(ef.loads):
            entries += [((key, i, "warmup", j), cmd) for j, cmd in enumerate(load.warmup.commands if load.warmup else ())]
            entries += [((key, i, "phase", j, "command"), p.command) for j, p in enumerate(load.phases) if p.command]
        if ef.service:
            entries.append((("service", "command"), ef.service.command))
            if ef.service.ready_command:
                entries.append((("service", "ready", "command"), ef.service.ready_command))
            if ef.service.stop_command:
                entries.append((("service", "stop", "command"), ef.service.stop_command))
        for where, argv in entries:
            try:
                program = substitute(argv[0], self.static_values())
            except AlloclabError:
                continue  # a program made by the experiment itself, e.g. {workdir}/tool
            if shutil.which(program) is None:
                missing = [r for r in ef.requires if r.program == Path(program).name or r.program == program]
                fix = (f"Install it with `apt-get install -y {missing[0].package}` (as root)." if missing else
                       "Install it, or fix the command (alloclab runs it without a shell).")
                raise AlloclabError(f"{self._place(where)}: the program '{program}' of {_dotted(where)} was not "
                                    f"found. {fix}")
        self.commands_checked = True

    # --- once per experiment -------------------------------------------------------------------

    def prepare(self) -> None:
        if self.prepared and not self.cleaned:
            return
        if self.cleaned:
            # Used again after cleanup (profiling after the timed runs): a fresh working
            # directory, with setup run again, as for a new experiment.
            self.cleaned = False
            self.servers.clear()
            self.block_cells.clear()
            self.starting = None
            self.setup_port = None
        self.prepared = True
        self.check_commands()
        self.workdir = Path(tempfile.mkdtemp(prefix=f"alloclab-{re.sub(r'[^A-Za-z0-9_-]', '', self.ef.name)[:30]}-"))
        self.identity.own(self.workdir)
        self.private = self.workdir / ".alloclab"
        self.private.mkdir()
        self.identity.own(self.private)
        if self.keep:
            self.note(f"Working directory (kept): {self.workdir}")
        self.file_env = {k: substitute(v, self.values()) for k, v in self.ef.env.items()}
        self.base_clean = self.base_clean | self.file_env
        self._check_reachable()
        for name, content in self.ef.files.items():
            path = self.workdir / name
            path.write_text(substitute(content, self.values(port=self._setup_port())))
            self.identity.own(path)
        self._run_setup()
        svc = self.ef.service
        if svc and svc.data_dir:
            if not self.base_data_dir().exists():
                raise AlloclabError(f"{self.ef.path}: service.data_dir '{svc.data_dir}' does not exist after setup "
                                    f"({self.base_data_dir()}). Create it in a [[setup]] step, or remove data_dir.")
            if svc.reset_data and svc.lifetime == "run":
                self._copy_tree(self.base_data_dir(), self.private / "pristine")

    def _setup_port(self) -> int:
        if self.setup_port is None:
            svc = self.ef.service
            self.setup_port = (svc.port or free_port()) if svc else 0
        return self.setup_port

    def _check_reachable(self) -> None:
        if not self.identity.wrapper:
            return
        probe = self.identity.argv(["test", "-w", str(self.workdir)])
        if subprocess.run(probe, env=self.clean_for_commands(), capture_output=True).returncode != 0:
            raise AlloclabError(
                f"The user {self.identity.user} (run_as) cannot write to the working directory {self.workdir}: "
                f"a parent directory is not searchable by it. Point TMPDIR at a directory it can reach, e.g. "
                f"`TMPDIR=/var/tmp alloclab run ...`.")

    def _copy_tree(self, src: Path, dst: Path) -> None:
        if dst.exists():
            shutil.rmtree(dst)
        # cp -a keeps owners and modes (PostgreSQL insists on both); argv only, no shell.
        proc = subprocess.run(["cp", "-a", "--reflink=auto", "--", str(src), str(dst)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise AlloclabError(f"Copying the data directory {src} to {dst} failed: {proc.stderr.strip()}. "
                                f"Check the free space in {dst.parent}.")

    def _run_setup(self) -> None:
        steps = self.ef.setup
        server: Server | None = None
        try:
            for i, step in enumerate(steps):
                if step.with_service and server is None:
                    server = self._new_server(self._setup_port(), self.base_data_dir(), {}, None)
                    try:
                        server.start()
                    except ServiceFailed as exc:
                        raise AlloclabError(
                            f"{self.ef.path}: the service started for setup step {i + 1} {exc}. Log tail:\n"
                            + _indent(exc.log_tail)) from None
                if not step.with_service and server is not None:
                    server.stop()
                    server = None
                if step.background:
                    self._start_background(i, step)
                    continue
                self._run_step("setup", i, step, server.port if server else self._setup_port())
        finally:
            if server is not None:
                with deferred_interrupts(reraise=False):
                    server.stop(hurry=True)

    def _run_step(self, kind: str, i: int, step: Step, port: int | None) -> None:
        values = self.values(port=port or None)
        argv = substitute_argv(step.command, values)
        out = self.private / f"{kind}-{i}.log"
        try:
            done = run_command(self.identity.argv(argv), self.clean_for_commands(), self.workdir, step.timeout, out)
        except ServiceFailed as exc:
            raise AlloclabError(f"{self._step_place(kind, i)}: {exc}. Fix the command.") from None
        if done.code != 0:
            why = f"timed out after {step.timeout:g} s" if done.timed_out else f"exited with status {done.code}"
            raise AlloclabError(f"{self._step_place(kind, i)}: the {kind} step `{' '.join(argv)}` {why}. Fix the "
                                f"step (or raise its timeout). Output tail:\n" + output_tail(done.output))

    def _start_background(self, i: int, step: Step) -> None:
        argv = self.identity.argv(substitute_argv(step.command, self.values(port=self._setup_port() or None)))
        with open(self.private / f"setup-{i}.log", "wb") as out:
            try:
                proc = subprocess.Popen(argv, env=self.clean_for_commands(), cwd=self.workdir,
                                        stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                        start_new_session=True, close_fds=True)
            except OSError as exc:
                raise AlloclabError(f"{self._step_place('setup', i)}: could not start {argv[0]}: {exc.strerror}. "
                                    f"Fix the command.") from None
        self.background.append((proc, {}))
        time.sleep(SAMPLE_S)
        if proc.poll() is not None:
            raise AlloclabError(f"{self._step_place('setup', i)}: the background step `{' '.join(argv)}` exited "
                                f"at once (status {proc.returncode}); it must keep running. Output tail:\n"
                                + output_tail(measure._tail(self.private / f'setup-{i}.log')))

    def _stop_background(self) -> None:
        """Newest first (a daemon may depend on an older one): SIGTERM, then whatever is left is killed."""
        while self.background:
            proc, seen = self.background.pop()
            with contextlib.suppress(psutil.Error):
                for c in psutil.Process(proc.pid).children(recursive=True):
                    seen.setdefault(c.pid, c)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(BACKGROUND_STOP_S)
            except subprocess.TimeoutExpired:
                pass
            kill_tree(proc.pid, [proc.pid, *seen], grace_s=0.5)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5.0)

    def _step_place(self, kind: str, i: int) -> str:
        return self._place((kind, i))

    def cleanup(self) -> None:
        if self.cleaned:
            return
        self.cleaned = True
        with deferred_interrupts(reraise=False):
            self.stop_all(hurry=True)
            self._stop_background()
            if self.prepared and self.workdir is not None:
                for i, step in enumerate(self.ef.teardown):
                    try:
                        self._run_step("teardown", i, step, self.setup_port)
                    except (AlloclabError, KeyboardInterrupt) as exc:
                        self.note(f"teardown step {i + 1} failed: {exc}")
            if self.workdir is not None and not self.keep:
                shutil.rmtree(self.workdir, ignore_errors=True)
                if self.workdir.exists():  # files of another owner that rmtree could not remove
                    subprocess.run(["rm", "-rf", "--", str(self.workdir)], capture_output=True)

    # --- servers -------------------------------------------------------------------------------

    def _new_server(self, port: int, data_dir: Path | None, extra_env: dict[str, str],
                    mapped_marker: str | None, wrap: ServerWrap | None = None) -> Server:
        self.serial += 1
        self.starting = Server(self, self.serial, port, data_dir, extra_env, mapped_marker, wrap)
        return self.starting

    def start_server(self, extra_env: dict[str, str], mapped_marker: str | None,
                     wrap: ServerWrap | None = None) -> Server:
        svc = self.ef.service
        port = svc.port or free_port()
        data_dir = self.base_data_dir()
        if data_dir is not None and svc.lifetime == "block":
            # Servers of several variants are up side by side: each gets a copy of the data.
            data_dir = self.workdir / f"{svc.data_dir}-{self.serial + 1}"
            self._copy_tree(self.base_data_dir(), data_dir)
        elif data_dir is not None and svc.reset_data:
            self._copy_tree(self.private / "pristine", data_dir)
        server = self._new_server(port, data_dir, extra_env, mapped_marker, wrap)
        server.start()
        self.starting = None
        return server

    def server_for(self, variant_key: tuple, verifying: bool, load_idx: int, extra_env: dict[str, str],
                   mapped_marker: str | None) -> tuple[Server, bool]:
        """The server for this run, and whether it is shared (lifetime = "block")."""
        if self.ef.service.lifetime == "run":
            return self.start_server(extra_env, mapped_marker), False
        cell = (variant_key, load_idx)
        if cell in self.block_cells:
            # Every block runs each (client, variant) once: a repeat means a new block began.
            self.stop_all()
            self.block_cells.clear()
        self.block_cells.add(cell)
        key = (variant_key, verifying)
        server = self.servers.get(key)
        if server is not None and not server.alive():
            self.retire(server)
            server = None
        if server is None:
            server = self.start_server(extra_env, mapped_marker)
            self.servers[key] = server
        return server, True

    def retire(self, server: Server, hurry: bool = False) -> None:
        for k, v in list(self.servers.items()):
            if v is server:
                del self.servers[k]
        server.stop(hurry=hurry)
        svc = self.ef.service
        if svc.lifetime == "block" and server.data_dir is not None and server.data_dir != self.base_data_dir():
            shutil.rmtree(server.data_dir, ignore_errors=True)

    def stop_all(self, hurry: bool = False) -> None:
        for server in list(self.servers.values()):
            self.retire(server, hurry=hurry)


def _plus(a: tuple, b: tuple) -> tuple:
    return tuple(x + y for x, y in zip(a, b))


def _minus(a: tuple, b: tuple) -> tuple:
    return tuple(max(0, x - y) for x, y in zip(a, b))


def _dotted(where: tuple) -> str:
    return ".".join(str(p) for p in where)


def _indent(text: str) -> str:
    return "\n".join("    " + ln for ln in text.splitlines())


# --- derived metrics and what the runner reads ---------------------------------------------------------

def derived_values(specs: tuple[MetricSpec, ...], text: str, run: RunResult | None = None,
                   more: dict[str, float] | None = None) -> dict[str, float]:
    """Ratio metrics; a numerator `@cpu_s` (etc.) is that measure of `run`, the process under the variant."""
    measured = {} if run is None else {"cpu_s": run.user_s + run.sys_s, "user_s": run.user_s,
                                       "sys_s": run.sys_s, "wall_s": run.wall_s}
    measured |= more or {}
    out: dict[str, float] = {}
    for m in specs:
        if not m.derived:
            continue
        if m.ratio[0].startswith("@"):
            num = measured.get(m.ratio[0][1:])
        else:
            num = extract(MetricDef("n", "", True, "regex", m.ratio[0]), text)
        den = extract(MetricDef("d", "", True, "regex", m.ratio[1]), text)
        if num is not None and den:
            out[m.name] = num / den * m.scale
    return out


def summary_line(values: dict) -> str:
    """A JSON line of our own at the end of stdout; the runner reads `alloclab.NAME` metrics from it."""
    return json.dumps({"alloclab": {k: (round(v, 6) if isinstance(v, float) else v) for k, v in values.items()}})


SERVICE_METRICS = (
    MetricDef("peak_pss_mb", "MiB", False, "json", "alloclab.peak_pss_mb"),
    MetricDef("final_pss_mb", "MiB", False, "json", "alloclab.final_pss_mb"),
)


def _loader_lines(server: Server) -> str:
    text = measure._tail(server.err) + "\n" + measure._tail(server.out)
    return "\n".join(ln for ln in text.splitlines() if "ld.so" in ln)


# --- executors ------------------------------------------------------------------------------------

@dataclass
class ServiceExecutor:
    """One [[client]] against the experiment's service; the variant applies to the server only."""

    session: Session
    index: int

    @property
    def load(self) -> Load:
        return self.session.ef.loads[self.index]

    def program(self) -> Path:
        return self.session.resolve_program(self.session.ef.service.command[0], ("service", "command"))

    def prepare(self) -> None:
        self.session.prepare()

    def cleanup(self) -> None:
        self.session.cleanup()

    def execute(self, env, variant_env, workdir, *, timeout_s, mapped_marker, perf_file,
                server_wrap: ServerWrap | None = None) -> RunResult:
        """One run; with server_wrap, the server is started under that wrapper for this run alone
        (a fresh server even with lifetime = "block", stopped after the run)."""
        s = self.session
        clean = clean_env(env, variant_env)
        extra = {k: v for k, v in env.items() if clean.get(k) != v}
        server: Server | None = None
        shared = False
        result = RunResult("ok", 0.0)
        try:
            try:
                if server_wrap is not None:
                    server = s.start_server(extra, mapped_marker, server_wrap)
                else:
                    server, shared = s.server_for(tuple(sorted(variant_env.items())), "LD_DEBUG" in env,
                                                  self.index, extra, mapped_marker)
            except ServiceFailed as exc:
                failed = s.starting
                if failed is not None:
                    with deferred_interrupts():
                        s.retire(failed, hurry=True)
                    failed.copy_ld_debug(env.get("LD_DEBUG_OUTPUT"))
                    result.processes = list(failed.tree.seen.values()) if failed.tree else []
                result.status, result.error, result.stderr = "failed", str(exc), exc.log_tail
                return result
            return self._measure(server, shared, env, workdir, timeout_s, result)
        except KeyboardInterrupt:
            with deferred_interrupts(reraise=False):
                for srv in {id(x): x for x in (server, s.starting) if x is not None}.values():
                    s.retire(srv, hurry=True)
            result.status, result.error = "interrupted", "interrupted by Ctrl-C; the server and client were stopped"
            raise RunInterrupted(result) from None

    def _measure(self, server: Server, shared: bool, env: dict, workdir: Path, timeout_s: float | None,
                 result: RunResult) -> RunResult:
        s, load = self.session, self.load
        tree = server.tree
        ready_kb = tree.last_kb
        # The server's CPU and faults during the warm-up and the phases, taken out of the run's.
        warm_excl = phase_excl = (0.0, 0.0, 0, 0)
        failure: str | None = None
        stage = "while the client ran"
        if load.warmup is not None:
            before = tree.usage_so_far()
            try:
                service_phases.run_warmup(server, load, run_command, s.clean_for_commands(), s.workdir)
            except (service_phases.PhaseFailed, ServiceFailed) as exc:
                failure, stage = str(exc), "during the warm-up"
            warm_excl = _minus(tree.usage_so_far(), before)
        tree.begin_window()
        argv = s.identity.argv(substitute_argv(load.command, server.values()))
        timeout = timeout_s if timeout_s is not None else load.timeout
        t_load = time.perf_counter() - tree.t0
        if failure is not None:
            done = Finished(None, failure, 0.0)
        else:
            try:
                done = run_command(argv, s.clean_for_commands(), s.workdir, timeout, workdir / "client",
                                   tick=server.sample)
            except ServiceFailed as exc:  # the client could not be executed at all
                done = Finished(None, f"{exc}", 0.0)
        result.wall_s = done.wall_s
        client_ok = done.code == 0
        died = server.done.is_set()
        if client_ok and not died and s.ef.service.idle:
            t_end = time.perf_counter() + s.ef.service.idle
            while time.perf_counter() < t_end and not server.done.is_set():
                server.sample()
                server.done.wait(SAMPLE_S)
            died = server.done.is_set()
        if not died:
            server.sample(pss=True)
        final_kb, final_pss = tree.last_kb, tree.pss_last_kb
        # The server's CPU while the client ran (and the idle after), without its start-up and stop.
        load_cpu_s = sum(tree.window_usage()[:2])
        phase_info: dict = {}
        if load.phases and client_ok and not died:
            stage = "during the memory phases"
            before = tree.usage_so_far()
            load_reading = service_phases.Reading("load", t_load, time.perf_counter() - tree.t0, final_kb,
                                                  final_pss if tree.pss_ok else None)
            try:
                readings = service_phases.run_phases(server, load, run_command, s.clean_for_commands(),
                                                     s.workdir, SAMPLE_S)
                phase_info = service_phases.phase_summary(ready_kb, load_reading, readings)
            except (service_phases.PhaseFailed, ServiceFailed) as exc:
                failure = str(exc)
            phase_excl = _minus(tree.usage_so_far(), before)
            died = server.done.is_set()
        with deferred_interrupts():
            if not shared:
                server.stop()
            elif died:
                s.retire(server)
        server.copy_ld_debug(env.get("LD_DEBUG_OUTPUT"))
        # A shared server's figures are a window that opens after the warm-up already.
        excluded = phase_excl if shared else _plus(warm_excl, phase_excl)
        self._account(server, shared, result, final_kb, excluded)
        summary: dict = {"server_processes": len(tree.stat),
                         "cpu_sampled_s": max(0.0, tree.sampled_cpu_s() - excluded[0] - excluded[1]),
                         "cpu_source": "proc-window" if shared else "wait4+orphans", "server_port": server.port,
                         "server_serial": server.serial}
        if load.warmup is not None or load.phases:
            summary["excluded_cpu_s"] = excluded[0] + excluded[1]
        if tree.pss_ok:
            summary["peak_pss_mb"] = (tree.win_pss_peak_kb if shared else tree.pss_peak_kb) / 1024
            summary["final_pss_mb"] = final_pss / 1024
        summary["load_cpu_s"] = load_cpu_s
        summary |= derived_values(load.metrics, done.output, result, {"load_cpu_s": load_cpu_s})
        steady, intervals = phases.steady_values(load.metrics, done.output)
        summary |= steady
        if intervals:
            summary["intervals"] = intervals
        summary |= phase_info
        result.stdout = done.output.rstrip("\n") + "\n" + summary_line(summary) + "\n"
        result.stderr = _loader_lines(server)
        if done.timed_out:
            result.status, result.error = "timeout", f"the client timed out after {timeout:g} s; it was killed"
        elif died:
            result.status = "failed"
            result.error = f"the service exited ({server.exit_text()}) {stage}"
            result.stderr = (result.stderr + "\n" + server.log_tail()).strip()
        elif failure is not None:
            result.status, result.error = "failed", failure
        elif not client_ok:
            result.status = "failed"
            result.error = (f"the client exited with status {done.code}" if done.code is not None
                            else f"the client did not run: {done.output}")
        return result

    def _account(self, server: Server, shared: bool, result: RunResult, final_kb: int,
                 excluded: tuple[float, float, int, int] = (0.0, 0.0, 0, 0)) -> None:
        tree = server.tree
        result.processes = [p for p in tree.seen.values()]
        result.samples = tree.win_samples if shared else tree.samples
        result.final_rss_kb = final_kb
        if shared:
            usage = _minus(tree.window_usage(), excluded)
            result.user_s, result.sys_s, result.minflt, result.majflt = usage
            result.peak_rss_kb, result.max_rss_kb = tree.win_peak_kb, tree.win_max_proc_kb
            result.rss_series = tree.win_series
            return
        kernel = RunResult("ok", 0.0)
        if measure._read_launcher_result(server.res, kernel):
            u, sy, mi, ma = _minus(_plus(tree.orphan_usage(), (kernel.user_s, kernel.sys_s, kernel.minflt,
                                                                kernel.majflt)), excluded)
            result.user_s, result.sys_s, result.minflt, result.majflt = u, sy, mi, ma
            result.nvcsw, result.nivcsw = kernel.nvcsw, kernel.nivcsw
            result.max_rss_kb = max(kernel.max_rss_kb, tree.max_proc_kb)
        else:  # the launcher was killed: fall back on what /proc showed
            result.user_s = sum(st.user_s for st in tree.stat.values())
            result.sys_s = sum(st.sys_s for st in tree.stat.values())
            result.max_rss_kb = tree.max_proc_kb
        result.peak_rss_kb = tree.peak_kb
        result.rss_series = tree.series


@dataclass
class CommandModeExecutor:
    """One [[command]] of a file without a service: the command itself runs under the variant."""

    session: Session
    index: int

    @property
    def load(self) -> Load:
        return self.session.ef.loads[self.index]

    def program(self) -> Path:
        return self.session.resolve_program(self.load.command[0], ("command", self.index, "command"))

    def prepare(self) -> None:
        self.session.prepare()

    def cleanup(self) -> None:
        self.session.cleanup()

    def argv(self) -> list[str]:
        return substitute_argv(self.load.command, self.session.values())

    def execute(self, env, variant_env, workdir, *, timeout_s, mapped_marker, perf_file) -> RunResult:
        s, load = self.session, self.load
        argv = self.argv()
        clean = clean_env(env, variant_env)
        extra = {k: v for k, v in env.items() if clean.get(k) != v}
        ld_target = extra.get("LD_DEBUG_OUTPUT")
        ld_dir = None
        if ld_target and s.identity.wrapper:
            ld_dir = Path(tempfile.mkdtemp(dir=s.private))
            s.identity.own(ld_dir)
            extra["LD_DEBUG_OUTPUT"] = str(ld_dir / "ld")
        if perf_file is not None:
            argv, _ = wrap_perf_stat(argv, {}, extra, perf_file)
            extra = {}
        run_env = s.identity.env(clean | s.file_env)
        if s.identity.wrapper:
            argv = s.identity.argv(argv, extra)
        else:
            run_env = run_env | extra
        r = run_once(argv, run_env, workdir, timeout_s=timeout_s if timeout_s is not None else load.timeout,
                     cwd=str(s.workdir), mapped_marker=mapped_marker)
        if ld_dir is not None:
            for f in ld_dir.glob("ld.*"):
                shutil.copyfile(f, Path(ld_target).parent / (Path(ld_target).name + f.suffix))
        derived = derived_values(load.metrics, r.stdout + "\n" + r.stderr, r)
        if derived:
            r.stdout = r.stdout.rstrip("\n") + "\n" + summary_line(derived) + "\n"
        return r


# --- building workloads from a file ---------------------------------------------------------------

def workloads(ef: ExperimentFile, params: dict[str, object], *, keep: bool = False,
              note: Callable[[str], None] = lambda text: None):
    """One Workload per [[client]] (service mode) or [[command]] (command mode), sharing one Session."""
    from alloclab.workloads.command import Workload

    session = Session(ef, params, keep=keep, note=note)
    out = []
    static = session.static_values()

    def shown(argv) -> list[str]:
        # What reports show: placeholders that depend on the run stay as written.
        return [substitute(a, static) if _static_ok(a, static) else a for a in argv]

    for i, load in enumerate(ef.loads):
        defs = ef.metric_defs(load)
        if ef.service:
            executor = ServiceExecutor(session, i)
            defs += list(SERVICE_METRICS) + phases.phase_metric_defs(load)
            argv = shown(ef.service.command)
            info = {"mode": "service", "client": shown(load.command), "lifetime": ef.service.lifetime,
                    "idle_s": ef.service.idle, "run_as": ef.run_as,
                    "warmup": load.warmup.describe() if load.warmup else None,
                    "phases": [p.name for p in load.phases]}
        else:
            executor = CommandModeExecutor(session, i)
            argv = shown(load.command)
            info = {"mode": "command", "run_as": ef.run_as}
        info |= {"experiment_file": str(ef.path), "recipe": ef.recipe, "file_text": ef.text}
        name = ef.name if len(ef.loads) == 1 else f"{ef.name}: {load.name}"
        out.append(Workload(name=name, argv=argv, metrics=defs, params=dict(params), info=info,
                            executor=executor))
    return out, session


def _static_ok(text: str, values: dict) -> bool:
    try:
        substitute(text, values)
        return True
    except AlloclabError:
        return False
