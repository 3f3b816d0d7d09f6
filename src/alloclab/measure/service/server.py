"""One server process tree: started by the launcher under the variant, probed until ready,
sampled, and stopped the configured way."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Protocol

import psutil

from alloclab.measure.fingerprint import FP_DIR_VAR
from alloclab.measure.fingerprint_syscalls import SYSCALL_FILE
from alloclab.measure.spawner import launcher
from alloclab.errors import AlloclabError
from alloclab.workloads.experiment_file import substitute_argv
from alloclab.measure.run import file_tail, kill_tree
from alloclab.measure.service.proctree import SAMPLE_S, ProcTree, read_stat
from alloclab.measure.service.commands import (Identity, ServiceFailed, _still_running, port_holder,
                                               port_in_use, run_command, start_session, tcp_accepts)
from alloclab.workloads.experiment_file import ExperimentFile

FP_SETTLE_S = 0.1   # five of the fingerprint sampler's 20 ms intervals
# The sampler writes its file every 100 ms; a neighbour holding both cores can delay that by a second.
FP_WRITTEN_WAIT_S = 3.0


class Host(Protocol):
    """What a server takes from the session that starts it (measure/service/session.py's Session):
    the file, who runs it and where, its values and environment, and where to say things."""
    ef: ExperimentFile
    identity: Identity
    base_clean: dict[str, str]
    workdir: Path
    private: Path | None
    warned_exposed: bool
    note: Callable[[str], None]

    def values(self, port: int | None = None, data_dir: Path | None = None) -> dict[str, object]: ...

    def clean_for_commands(self) -> dict[str, str]: ...

LOG_TAIL_LINES = 20


# A hook that puts a wrapper (perf record) in front of one server: given the server's own
# directory (writable by run_as), it returns the argv to insert before the server program.
ServerWrap = Callable[[Path], list[str]]


def _log_tail(*paths: Path, lines: int = LOG_TAIL_LINES) -> str:
    text = "\n".join(file_tail(p, 64 * 1024).rstrip() for p in paths if p.exists())
    tail = [ln for ln in text.strip().splitlines() if ln.strip()][-lines:]
    return "\n".join(tail) if tail else "(the service wrote nothing)"


# --- one server ------------------------------------------------------------------------------------

class Server:
    """One server process tree, started by the launcher, with its probe and stop method."""

    def __init__(self, session: Host, serial: int, port: int, data_dir: Path | None,
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
        self.fp_target: str | None = None
        if FP_DIR_VAR in self.extra_env:
            # The same for the allocation fingerprint's per-process files (measure/fingerprint.py).
            self.fp_target = self.extra_env[FP_DIR_VAR]
            (self.dir / "fp").mkdir()
            session.identity.own(self.dir / "fp")
            self.extra_env[FP_DIR_VAR] = str(self.dir / "fp")
        # A reading of the fingerprint's live bytes comes from its sampler's series (every 20 ms, in
        # the server): after an action (the load, a phase's command) the reading waits for samples
        # taken after it. Without the wait, a CPU hog beside the run left the load's reading 5-17%
        # short of the filled memory (tests/test_fingerprint_phases_e2e.py).
        self.settle_s = FP_SETTLE_S if self.fp_target is not None else 0.0
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
            # server alone (perf is not preloaded). The wrapper runs as alloclab, in front of the
            # run_as chain: perf run as the server's user may not sample the kernel (with
            # perf_event_paranoid 2 it drops those samples), and PostgreSQL's allocator effect is
            # in its page faults.
            settings = [f"{k}={v}" for k, v in self.extra_env.items()]
            if self.s.identity.wrapper:
                argv = [*self.wrap(self.dir), *self.s.identity.argv(argv, self.extra_env)]
            else:
                argv = [*self.wrap(self.dir), shutil.which("env") or "/usr/bin/env", *settings, *argv]
        elif self.s.identity.wrapper:
            argv = self.s.identity.argv(argv, self.extra_env)
        else:
            env = env | self.extra_env
        launch = [str(launcher()), str(self.res), *argv]
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            try:
                self.proc = start_session(launch, env=env, cwd=self.s.workdir, stdin=subprocess.DEVNULL,
                                          stdout=out, stderr=err)
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

    def await_fingerprint(self) -> None:
        """Until each live process of the server has rewritten its fingerprint file since now (at
        most FP_WRITTEN_WAIT_S): a reading at a phase's end then comes from a sample taken after the
        phase's action, not from the last file written before it. A server stopped by a signal
        writes no final file: its series ends at its last periodic write."""
        if self.fp_target is None:
            return
        since, deadline = time.time(), time.perf_counter() + FP_WRITTEN_WAIT_S

        def stale(f: Path) -> bool:
            try:
                older = f.stat().st_mtime < since
            except OSError:   # replaced between the listing and now: written since
                return False
            st = read_stat(int(f.name.split("-")[1])) if older else None
            return st is not None and st.state not in ("Z", "X")

        while time.perf_counter() < deadline and not self.done.is_set():
            if not any(stale(f) for f in (self.dir / "fp").glob("fp-*.json")):
                return
            self.sample()
            self.done.wait(0.02)

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
            return re.search(svc.ready_log, file_tail(self.out) + "\n" + file_tail(self.err),
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
        fields = file_tail(self.res).split()
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

    def copy_fingerprint(self) -> None:
        """The fingerprint's files (and the system call counts of a wrapper) to where the run wants them."""
        if self.fp_target is None:
            return
        for f in [*(self.dir / "fp").glob("fp-*.json"), self.dir / SYSCALL_FILE]:
            with contextlib.suppress(OSError):
                shutil.copyfile(f, Path(self.fp_target) / f.name)

    def copy_ld_debug(self, target: str | None) -> None:
        if not target or self.ld_prefix is None:
            return
        dest = Path(target)
        for f in self.dir.glob(self.ld_prefix.name + ".*"):
            with contextlib.suppress(OSError):
                shutil.copyfile(f, dest.parent / (dest.name + f.suffix))
