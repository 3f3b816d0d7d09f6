"""The session of one experiment file: its working directory, set-up steps and background
daemons, teardown, and the servers it starts for the runs."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

import psutil

from alloclab.errors import AlloclabError
from alloclab.workloads.experiment_file import ExperimentFile, Step, substitute, substitute_argv
from alloclab.measure.run import file_tail, kill_tree
from alloclab.workloads.command import resolve_command
from alloclab.workloads.metrics import output_tail
from alloclab.measure.service.proctree import SAMPLE_S
from alloclab.measure.service.commands import (Identity, ServiceFailed, clean_env, deferred_interrupts,
                                               free_port, run_command, start_session)
from alloclab.measure.service.server import Server, ServerWrap

BACKGROUND_STOP_S = 15.0   # a [[setup]] daemon gets this long to exit after SIGTERM


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
                proc = start_session(argv, env=self.clean_for_commands(), cwd=self.workdir,
                                     stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
            except OSError as exc:
                raise AlloclabError(f"{self._step_place('setup', i)}: could not start {argv[0]}: {exc.strerror}. "
                                    f"Fix the command.") from None
        self.background.append((proc, {}))
        time.sleep(SAMPLE_S)
        if proc.poll() is not None:
            raise AlloclabError(f"{self._step_place('setup', i)}: the background step `{' '.join(argv)}` exited "
                                f"at once (status {proc.returncode}); it must keep running. Output tail:\n"
                                + output_tail(file_tail(self.private / f'setup-{i}.log')))

    def background_cpu_s(self) -> float:
        """CPU used so far by the set-up's background daemons and their children (a Ceph cluster's
        monitor and OSD): what a run makes them do is the workload's work, not other programs'."""
        total = 0.0
        for proc, _ in self.background:
            with contextlib.suppress(psutil.Error):
                top = psutil.Process(proc.pid)
                for p in [top, *top.children(recursive=True)]:
                    with contextlib.suppress(psutil.Error):
                        t = p.cpu_times()
                        total += t.user + t.system
        return total

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


def _dotted(where: tuple) -> str:
    return ".".join(str(p) for p in where)


def _indent(text: str) -> str:
    return "\n".join("    " + ln for ln in text.splitlines())
