"""Running the profiled runs: a workload's runs under each variant in shuffled interleaved blocks,
each attributed as it ends, and every workload of a stored experiment, its summaries stored with it.

A profiled run is `perf record -e EVENT -F HZ [--call-graph dwarf] -o FILE -- env VAR=VAL... CMD`
run through measure.run_once (timeouts, Ctrl-C and teardown as for any run). The variant's
settings go through `env` so that perf itself is not preloaded. `perf script` then lists every
sample with its frames; each sample counts with its period as weight.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from alloclab import defaults
from alloclab.plan.schedule import schedule
from alloclab.errors import AlloclabError, Interrupted
from alloclab.measure.run import RunInterrupted, RunResult, run_once
from alloclab.workloads.metrics import extract
from alloclab.workloads.primary import primary_metric
from alloclab.measure.perfstat import DEFAULT_FREQUENCY  # noqa: F401  (defined there: the CLI reads it at start)
from alloclab.measure.executors import executor_of
from alloclab.measure.service.executors import CommandModeExecutor, ServiceExecutor
from alloclab.catalog.variants import Variant
from alloclab.measure import forward
from alloclab.workloads.command import Workload
from alloclab.measure.profile.attribution import Attribution, RunProfile, attribute, is_clock_event, parse_perf_script
from alloclab.measure.profile.perf import (PERF_INSTALL, PerfAccess, check_frequency, perf_access, perf_record_prefix,
                                           perf_script, sampling_event, wrap_perf_record)
from alloclab.measure.profile.summary import ProfileSummary, _finish, attach_counters, store_profiles

# --- running --------------------------------------------------------------------------------------

def command_of(workload: Workload) -> tuple[list[str], str | None]:
    argv = getattr(executor_of(workload), "argv", None)
    if argv is None:
        raise AlloclabError(
            f"Workload '{workload.name}' is not a plain command (its executor is "
            f"{type(workload.executor).__name__}); profiling supports commands, built-in workloads and "
            f"experiment files with a [service] (the server is profiled).")
    return list(argv), getattr(workload.executor, "cwd", None)


def is_service(workload: Workload) -> bool:
    return isinstance(workload.executor, ServiceExecutor)


def is_command_file(workload: Workload) -> bool:
    """A [[command]] of an experiment file: its argv exists once the file's setup has run."""
    return isinstance(workload.executor, CommandModeExecutor)


def check_profilable(workload: Workload) -> None:
    """Refuse, before any run, a workload that profiling cannot run."""
    if is_command_file(workload):
        if workload.executor.session.identity.wrapper:
            raise AlloclabError(f"Workload '{workload.name}' runs as {workload.executor.session.identity.user} "
                                f"(run_as): profiling a [[command]] as another user is not supported. Profile "
                                f"it without run_as, or as a [service].")
        return
    if not is_service(workload):
        command_of(workload)


def _perf_failed(result: RunResult, data: Path) -> bool:
    """perf itself failed (not the program, not a timeout): it exited with an error and no data."""
    return result.status == "failed" and (not data.exists() or data.stat().st_size == 0)


def _run_error(result: RunResult) -> str:
    lines = [ln for ln in result.stderr.strip().splitlines() if ln.strip()]
    return " / ".join(lines[-3:]) if lines else (result.error or result.status)


@dataclass
class _Cell:
    variant: Variant
    summary: ProfileSummary


def profile_workload(workload: Workload, variants: list[Variant], runs: int = 3,
                     frequency: int = DEFAULT_FREQUENCY, call_graph: bool = False, *,
                     baseline: dict[str, list[dict]] | None = None, timeout_s: float | None = None,
                     workload_idx: int = 0, seed: int = 1, base_env: dict[str, str] | None = None,
                     advance: Callable[[str], None] = lambda text: None,
                     access: PerfAccess | None = None, keep_session: bool = False,
                     deadline: float | None = None) -> list[ProfileSummary]:
    """Profile `runs` runs of the workload under each variant, in shuffled interleaved blocks; none
    begins after `deadline` (time.monotonic(): a budget's end), and the summaries say so.

    baseline (label -> metrics of unprofiled runs, e.g. an experiment's measured runs, each with
    wall_s and the workload's metrics) is what the sampling overhead is measured against;
    without it an unprofiled run follows each profiled one. Raises Interrupted (with
    .summaries, the runs so far) on Ctrl-C. keep_session: an experiment file's set-up stays up
    afterwards (the runner's own profile, made before it tears the set-up down).
    """
    executor_of(workload)
    if why := defaults.refusal(runs=runs):
        raise AlloclabError(why)
    check_frequency(frequency)
    access = access or perf_access()
    service = is_service(workload)
    event = sampling_event(access)
    check_profilable(workload)
    command_file = is_command_file(workload)
    argv, cwd, base_env = _command(workload, service, command_file, base_env)
    workload.program()
    metric = primary_metric(workload.metrics)
    cells = [_Cell(v, _summary(workload, v, i, metric, access, event, frequency, call_graph, workload_idx, baseline))
             for i, v in enumerate(variants)]
    jobs = schedule(len(cells), runs, 0, seed, verify=False)
    root = Path(tempfile.mkdtemp(prefix="alloclab-profile-"))
    try:
        fixed = None if service else _perf_fixed_cost(access, event, frequency, call_graph, root / "fixed", base_env)
        for c in cells:
            # A client's wall time does not include perf starting and stopping with the server.
            c.summary.perf_fixed_s = None if service else fixed
        if service:
            workload.executor.prepare()
        for n, job in enumerate(jobs):
            cell = cells[job.cell]
            if deadline is not None and time.monotonic() >= deadline:
                for c in cells:
                    c.summary.notes.append(f"The budget ended after {len(c.summary.runs)} profiled run(s) of "
                                           f"{c.variant.label}.")
                break
            advance(f"profile {workload.name[:24]} | {cell.variant.label} ({job.block + 1}/{runs})")
            tmp = root / f"run-{n}"
            if service:
                _profile_service_run(cell, workload, metric, tmp, access, event, frequency, call_graph,
                                     timeout_s, base_env, plain=baseline is None)
                shutil.rmtree(tmp, ignore_errors=True)
                continue
            _profile_one(cell, argv, cwd, workload, metric, tmp, access, event, frequency, call_graph,
                         timeout_s, base_env)
            if baseline is None:
                _plain_run(cell, argv, cwd, workload, metric, tmp, timeout_s, base_env)
            shutil.rmtree(tmp, ignore_errors=True)
    except (KeyboardInterrupt, RunInterrupted):
        raise _interrupted(cells) from None
    finally:
        if (service or command_file) and not keep_session:
            workload.executor.cleanup()
        shutil.rmtree(root, ignore_errors=True)
    return [_finish(c.summary) for c in cells]


def _command(workload: Workload, service: bool, command_file: bool,
             base_env: dict[str, str] | None) -> tuple[list[str] | None, str | None, dict[str, str]]:
    """(argv, cwd, environment) of a profiled run; a server's argv is its executor's business."""
    base_env = dict(os.environ) if base_env is None else base_env
    if command_file:
        # Setup (e.g. a private Ceph cluster) runs first; the command is then what it would be in a run.
        session = workload.executor.session
        session.prepare()
        return workload.executor.argv(), str(session.workdir), base_env | session.file_env
    argv, cwd = (None, None) if service else command_of(workload)
    return argv, cwd, base_env


def _interrupted(cells: list[_Cell]) -> Interrupted:
    stop = Interrupted("Interrupted while profiling: every child process was stopped.")
    for c in cells:
        c.summary.notes.append(f"Profiling was interrupted (Ctrl-C) after {len(c.summary.runs)} profiled "
                               f"run(s) of {c.variant.label}.")
    stop.summaries = [_finish(c.summary) for c in cells]
    return stop


def _summary(workload: Workload, v: Variant, i: int, metric, access: PerfAccess, event: str, frequency: int,
             call_graph: bool, workload_idx: int, baseline: dict[str, list[dict]] | None) -> ProfileSummary:
    """An empty profile of one variant, with the unprofiled runs it is measured against where known."""
    s = ProfileSummary(workload=workload.name, variant=v.label, variant_idx=i,
                       library=str(v.library) if v.library else None, event=event,
                       frequency_hz=frequency, call_graph=call_graph, kernel_visible=access.kernel_visible,
                       workload_idx=workload_idx, metric=metric.name if metric else None,
                       metric_higher=metric.higher_is_better if metric else True)
    if access.note:
        s.notes.append(access.note)
    if baseline is not None:
        s.plain = [dict(b) for b in baseline.get(v.label, [])]
    return s


def _plain_run(cell: "_Cell", argv, cwd, workload: Workload, metric, tmp: Path, timeout_s: float | None,
               base_env: dict[str, str]) -> None:
    """An unprofiled run after a profiled one: what perf's sampling overhead is measured against."""
    plain = run_once(argv, _runs_as(cell, workload).apply(base_env) | workload.env, tmp / "plain",
                     timeout_s=timeout_s, cwd=cwd)
    if plain.status == "ok":
        values = {"wall_s": plain.wall_s, "cpu_s": plain.user_s + plain.sys_s}
        if metric:
            values[metric.name] = extract(metric, plain.stdout + "\n" + plain.stderr)
        cell.summary.plain.append(values)


def _perf_fixed_cost(access: PerfAccess, event: str, frequency: int, call_graph: bool, tmp: Path,
                     base_env: dict, repeats: int = 3) -> float | None:
    """perf record's own start and stop, timed around `true`: wall time that is not overhead
    on the program, and that dominates the wall time of short runs."""
    walls = []
    for i in range(repeats):
        wrapped, env = wrap_perf_record(["true"], base_env, {}, tmp / f"true-{i}.data", event=event,
                                        frequency=frequency, call_graph=call_graph, perf=access.perf)
        r = run_once(wrapped, env, tmp / str(i))
        if r.status == "ok":
            walls.append(r.wall_s)
    return statistics.median(walls) if walls else None


def _runs_as(cell: _Cell, workload: Workload) -> Variant:
    """The variant as the timed runs run it (measure/forward.py: glibc forced where linked)."""
    return forward.for_cell(cell.variant, workload.program())


def _profile_one(cell: _Cell, argv, cwd, workload: Workload, metric, tmp: Path, access: PerfAccess, event: str,
                 frequency: int, call_graph: bool, timeout_s: float | None, base_env: dict) -> None:
    v = _runs_as(cell, workload)
    data = tmp / "perf.data"
    env = v.apply(base_env) | workload.env
    wrapped, clean = wrap_perf_record(argv, env, v.env, data, event=event, frequency=frequency,
                                      call_graph=call_graph, perf=access.perf)
    result = run_once(wrapped, clean, tmp, timeout_s=timeout_s, cwd=cwd)
    if result.status == "error" or _perf_failed(result, data):
        raise AlloclabError(
            f"perf record failed under {v.label}: {_run_error(result)}. If perf says it is not allowed, "
            f"see kernel.perf_event_paranoid (alloclab will not change it); if it is missing, "
            f"`{PERF_INSTALL}`.")
    _record_profile(cell, result, data, access, event, call_graph, metric)


def _record_profile(cell: _Cell, result: RunResult, data: Path | None, access: PerfAccess, event: str,
                    call_graph: bool, metric) -> None:
    """The run's attributed samples, or its failed status, into the variant's summary."""
    if result.status != "ok":
        cell.summary.runs.append(RunProfile(result.status, result.wall_s, error=result.error))
        return
    v = cell.variant
    samples = parse_perf_script(perf_script(access.perf, data))
    prof = attribute(samples, Attribution(str(v.library) if v.library else None), call_graph,
                     result.status, result.wall_s, clock_event=is_clock_event(event))
    if metric:
        prof.metric = extract(metric, result.stdout + "\n" + result.stderr)
    cell.summary.runs.append(prof)


def _profile_service_run(cell: _Cell, workload: Workload, metric, tmp: Path, access: PerfAccess, event: str,
                         frequency: int, call_graph: bool, timeout_s: float | None, base_env: dict, *,
                         plain: bool) -> None:
    """One service run with perf record in front of the server: the samples are the server's
    process tree (perf follows its children), never the load client's."""
    v = _runs_as(cell, workload)
    env = v.apply(base_env) | workload.env
    written: list[Path] = []

    def wrap(server_dir: Path) -> list[str]:
        # The server's own directory: run_as may write there, where it may not write to ours.
        written.append(server_dir / "perf.data")
        return perf_record_prefix(written[-1], event=event, frequency=frequency, call_graph=call_graph,
                                  perf=access.perf)

    tmp.mkdir(parents=True, exist_ok=True)
    result = workload.executor.execute(env, v.env, tmp, timeout_s=timeout_s, mapped_marker=None, perf_file=None,
                                       server_wrap=wrap)
    data = written[-1] if written else None
    no_data = data is None or not data.exists() or data.stat().st_size == 0
    if result.status == "error" or (no_data and result.status != "timeout"):
        # The same server ran in the timed runs: with no perf data, perf itself is what failed.
        raise AlloclabError(
            f"perf record failed in front of the server under {v.label}: {result.error or result.status}"
            f" ({_run_error(result)}). If perf says it is not allowed, see kernel.perf_event_paranoid "
            f"(alloclab will not change it); if it is missing, `{PERF_INSTALL}`.")
    _record_profile(cell, result, data, access, event, call_graph, metric)
    if data is not None:
        data.unlink(missing_ok=True)  # can be large; the server's directory lives until the session ends
    if plain:
        (tmp / "plain").mkdir()
        r = workload.executor.execute(env, v.env, tmp / "plain", timeout_s=timeout_s, mapped_marker=None,
                                      perf_file=None)
        if r.status == "ok":
            values = {"wall_s": r.wall_s, "cpu_s": r.user_s + r.sys_s}
            if metric:
                values[metric.name] = extract(metric, r.stdout + "\n" + r.stderr)
            cell.summary.plain.append(values)


def profile_experiment(store, exp, workloads: list[Workload], variants: list[Variant], *,
                       runs: int = 3, frequency: int = DEFAULT_FREQUENCY, call_graph: bool = False,
                       timeout_s: float | None = None, advance: Callable[[str], None] = lambda text: None,
                       only: set[int] | None = None, keep_session: bool = False, seed: int = 1,
                       deadline: float | None = None) -> list[ProfileSummary]:
    """Profile every workload of a stored experiment (`exp`, store.db.Experiment), or those in
    `only`, and store the summaries with it; on an error or Ctrl-C, those made so far too.

    The experiment's measured runs are the unprofiled baseline for the overhead, and give the
    hardware counters where the machine has them. This is what `--profile` on compare/suite/run
    calls after the experiment, and the runner before its set-up is torn down (`keep_session`,
    measure/auto_profile.py).
    """
    exp_id = exp.id
    labels = [v.label for v in exp.variants]
    if labels != [v.label for v in variants]:
        raise AlloclabError(f"The variants {[v.label for v in variants]} are not those of experiment {exp_id} "
                            f"({labels}); profile with the same -a options.")
    access = perf_access()
    summaries: list[ProfileSummary] = []
    try:
        for wi, w in enumerate(workloads):
            if only is not None and wi not in only:
                continue
            plain = {v.label: [r.metrics for r in exp.cell_runs(wi, vi) if r.status == "ok"]
                     for vi, v in enumerate(variants)}
            summaries += profile_workload(w, variants, runs, frequency, call_graph, baseline=plain,
                                          timeout_s=timeout_s, workload_idx=wi, seed=seed, advance=advance,
                                          access=access, keep_session=keep_session, deadline=deadline)
    except AlloclabError:
        attach_counters(summaries, exp)
        store_profiles(store, exp_id, summaries)
        raise
    except Interrupted as stop:
        partial = summaries + getattr(stop, "summaries", [])
        attach_counters(partial, exp)
        store_profiles(store, exp_id, partial)
        raise Interrupted(f"Interrupted while profiling: every child process was stopped; the experiment "
                          f"and the profiles so far are kept in {store.path} as experiment {exp_id}.") from None
    attach_counters(summaries, exp)
    store_profiles(store, exp_id, summaries)
    return summaries
