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

import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from alloclab.measure import service_phases
from alloclab.workloads import phases
from alloclab.errors import AlloclabError
from alloclab.workloads.experiment_file import ExperimentFile, Load, substitute, substitute_argv
from alloclab.measure.run import RunInterrupted, RunResult, file_tail, read_launcher_result, run_once
from alloclab.workloads.metrics import MetricDef
from alloclab.measure.perfstat import wrap_perf_stat
from alloclab.measure.service.proctree import SAMPLE_S
from alloclab.measure.service.commands import Finished, ServiceFailed, clean_env, deferred_interrupts, run_command
from alloclab.measure.service.server import Server, ServerWrap
from alloclab.measure.service.session import Session
from alloclab.measure.service.values import derived_values, summary_line


def _plus(a: tuple, b: tuple) -> tuple:
    return tuple(x + y for x, y in zip(a, b))


def _minus(a: tuple, b: tuple) -> tuple:
    return tuple(max(0, x - y) for x, y in zip(a, b))


SERVICE_METRICS = (
    MetricDef("peak_pss_mb", "MiB", False, "json", "alloclab.peak_pss_mb"),
    MetricDef("final_pss_mb", "MiB", False, "json", "alloclab.final_pss_mb"),
)


def _server_processes(tree, identity) -> list:
    """The processes the server ran, without alloclab's own run_as launch chain (setpriv, env): a
    sample can catch the server's pid before it exec'd the server, and that image is ours, not
    a wrapper of the user's."""
    ours = identity.launchers()
    return [p for p in tree.replaced if p.exe not in ours] + list(tree.seen.values())


def _loader_lines(server: Server) -> str:
    text = file_tail(server.err) + "\n" + file_tail(server.out)
    return "\n".join(ln for ln in text.splitlines() if "ld.so" in ln)


# --- executors ------------------------------------------------------------------------------------

@dataclass
class _FileLoad:
    """One load of an experiment file (a [[client]] or a [[command]]); the session, shared by all
    of the file's loads, prepares once and cleans up once."""

    session: Session
    index: int

    @property
    def load(self) -> Load:
        return self.session.ef.loads[self.index]

    def prepare(self) -> None:
        self.session.prepare()

    def cleanup(self) -> None:
        self.session.cleanup()

    def background_cpu_s(self) -> float:
        return self.session.background_cpu_s()


@dataclass
class ServiceExecutor(_FileLoad):
    """One [[client]] against the experiment's service; the variant applies to the server only."""

    def program(self) -> Path:
        return self.session.resolve_program(self.session.ef.service.command[0], ("service", "command"))

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
                    result.processes = _server_processes(failed.tree, s.identity) if failed.tree else []
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
        failure, stage = None, "while the client ran"
        if load.warmup is not None:
            warm_excl, failure, stage = self._warmup(server)
        tree.begin_window()
        timeout = timeout_s if timeout_s is not None else load.timeout
        client_start = time.perf_counter()
        t_load = client_start - tree.t0
        done = self._client(server, workdir, timeout, failure)
        # CLOCK_MONOTONIC, the fingerprint interposer's clock: the calls made while the client
        # ran can be read off its series (measure/fingerprint_work.py).
        window = [round(client_start, 4), round(time.perf_counter(), 4)]
        result.wall_s = done.wall_s
        client_ok = done.code == 0
        died = self._idle(server) if client_ok else server.done.is_set()
        if not died:
            server.sample(pss=True)
        final_kb, final_pss = tree.last_kb, tree.pss_last_kb
        # The server's CPU while the client ran (and the idle after), without its start-up and stop.
        load_cpu_s = sum(tree.window_usage()[:2])
        phase_info: dict = {}
        if load.phases and client_ok and not died:
            stage = "during the memory phases"
            phase_info, phase_failure, phase_excl = self._phases(server, ready_kb, t_load, final_kb, final_pss)
            failure = failure or phase_failure
            died = server.done.is_set()
        with deferred_interrupts():
            if not shared:
                server.stop()
            elif died:
                s.retire(server)
        server.copy_ld_debug(env.get("LD_DEBUG_OUTPUT"))
        server.copy_fingerprint()
        # A shared server's figures are a window that opens after the warm-up already.
        excluded = phase_excl if shared else _plus(warm_excl, phase_excl)
        self._account(server, shared, result, final_kb, excluded)
        summary = (self._summary(server, shared, result, done, excluded, final_pss, load_cpu_s) | phase_info
                   | {"load_window_monotonic_s": window})
        result.values = summary
        result.stdout = done.output.rstrip("\n") + "\n" + summary_line(summary) + "\n"
        result.stderr = _loader_lines(server)
        self._status(result, server, done, timeout, died, stage, failure, client_ok)
        return result

    def _warmup(self, server: Server) -> tuple[tuple, str | None, str]:
        """The load's unmeasured warm-up: (the server's usage during it, a failure or None, the stage)."""
        s, tree = self.session, server.tree
        before = tree.usage_so_far()
        failure, stage = None, "while the client ran"
        try:
            service_phases.run_warmup(server, self.load, run_command, s.clean_for_commands(), s.workdir)
        except (service_phases.PhaseFailed, ServiceFailed) as exc:
            failure, stage = str(exc), "during the warm-up"
        return _minus(tree.usage_so_far(), before), failure, stage

    def _client(self, server: Server, workdir: Path, timeout: float | None, failure: str | None) -> Finished:
        """The measured load: the client's command against the server (not run after a failed warm-up)."""
        s = self.session
        if failure is not None:
            return Finished(None, failure, 0.0)
        argv = s.identity.argv(substitute_argv(self.load.command, server.values()))
        try:
            return run_command(argv, s.clean_for_commands(), s.workdir, timeout, workdir / "client",
                               tick=server.sample)
        except ServiceFailed as exc:  # the client could not be executed at all
            return Finished(None, f"{exc}", 0.0)

    def _idle(self, server: Server) -> bool:
        """The service's idle time after a good load, sampled; whether the server died."""
        idle = max(self.session.ef.service.idle, server.settle_s)
        if not server.done.is_set() and idle:
            t_end = time.perf_counter() + idle
            while time.perf_counter() < t_end and not server.done.is_set():
                server.sample()
                server.done.wait(SAMPLE_S)
        server.await_fingerprint()
        return server.done.is_set()

    def _phases(self, server: Server, ready_kb: int, t_load: float, final_kb: int,
                final_pss: int) -> tuple[dict, str | None, tuple]:
        """The memory phases after the load: (their summary, a failure or None, the server's usage in them)."""
        s, tree = self.session, server.tree
        before = tree.usage_so_far()
        load_reading = service_phases.Reading("load", t_load, time.perf_counter() - tree.t0, final_kb,
                                              final_pss if tree.pss_ok else None)
        phase_info: dict = {}
        failure = None
        try:
            readings = service_phases.run_phases(server, self.load, run_command, s.clean_for_commands(),
                                                 s.workdir, SAMPLE_S)
            # tree.t0 is on the fingerprint interposer's clock (CLOCK_MONOTONIC): its series can be
            # read at each phase's end exactly (measure/fingerprint.phase_memory).
            phase_info = service_phases.phase_summary(ready_kb, load_reading, readings, t0=tree.t0)
        except (service_phases.PhaseFailed, ServiceFailed) as exc:
            failure = str(exc)
        return phase_info, failure, _minus(tree.usage_so_far(), before)

    def _summary(self, server: Server, shared: bool, result: RunResult, done: Finished, excluded: tuple,
                 final_pss: int, load_cpu_s: float) -> dict:
        """The run's figures beyond the standard ones, for the summary line the runner reads."""
        load, tree = self.load, server.tree
        # Values by name, in the order the summary line prints them; some only where they apply.
        summary: dict = {"server_processes": len(tree.stat),
                         "cpu_sampled_s": max(0.0, tree.sampled_cpu_s() - excluded[0] - excluded[1]),
                         "cpu_source": "proc-window" if shared else "wait4+orphans", "server_port": server.port,
                         "server_serial": server.serial}
        if load.warmup is not None or load.phases:
            summary["excluded_cpu_s"] = excluded[0] + excluded[1]
        if tree.pss_ok:
            summary |= {"peak_pss_mb": (tree.win_pss_peak_kb if shared else tree.pss_peak_kb) / 1024,
                        "final_pss_mb": final_pss / 1024}
        measures = {"load_cpu_s": load_cpu_s}   # a ratio may divide it too (numerator = "@load_cpu_s")
        summary |= measures | derived_values(load.metrics, done.output, result, measures)
        steady, intervals = phases.steady_values(load.metrics, done.output)
        return summary | steady | ({"intervals": intervals} if intervals else {})

    @staticmethod
    def _status(result: RunResult, server: Server, done: Finished, timeout: float | None, died: bool,
                stage: str, failure: str | None, client_ok: bool) -> None:
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

    def _account(self, server: Server, shared: bool, result: RunResult, final_kb: int,
                 excluded: tuple[float, float, int, int] = (0.0, 0.0, 0, 0)) -> None:
        tree = server.tree
        result.processes = _server_processes(tree, self.session.identity)
        result.samples = tree.win_samples if shared else tree.samples
        result.final_rss_kb = final_kb
        if shared:
            usage = _minus(tree.window_usage(), excluded)
            result.user_s, result.sys_s, result.minflt, result.majflt = usage
            result.peak_rss_kb, result.max_rss_kb = tree.win_peak_kb, tree.win_max_proc_kb
            result.rss_series = tree.win_series
            return
        kernel = RunResult("ok", 0.0)
        if read_launcher_result(server.res, kernel):
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
class CommandModeExecutor(_FileLoad):
    """One [[command]] of a file without a service: the command itself runs under the variant."""

    def program(self) -> Path:
        return self.session.resolve_program(self.load.command[0], ("command", self.index, "command"))

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
            r.values = derived
            r.stdout = r.stdout.rstrip("\n") + "\n" + summary_line(derived) + "\n"
        return r


# --- building workloads from a file ---------------------------------------------------------------

def workloads(ef: ExperimentFile, params: dict[str, object], *, keep: bool = False,
              note: Callable[[str], None] = lambda text: None, clients: Sequence[str] = ()):
    """One Workload per [[client]] (service mode) or [[command]] (command mode), sharing one Session;
    only those named in `clients` where it names any. A workload keeps its file-wide name
    ("postgres-partitions: 2 clients") whichever are run, so that runs of one client and of all
    compare."""
    from alloclab.workloads.command import Workload

    selected = ef.selected_loads(clients)   # a name not in the file is refused before any set-up
    session = Session(ef, params, keep=keep, note=note)
    out = []
    static = session.static_values()

    def shown(argv) -> list[str]:
        # What reports show: placeholders that depend on the run stay as written.
        return [substitute(a, static) if _static_ok(a, static) else a for a in argv]

    for i in selected:
        load = ef.loads[i]
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
