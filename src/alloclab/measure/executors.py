"""How a run of a workload happens: the executor interface the runner drives, and the plain
command's executor (a service's are in measure.service).

In: a Workload and a variant's environment. Out: a RunResult per run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from alloclab.measure import exit_reading
from alloclab.measure.perfstat import wrap_perf_stat
from alloclab.measure.run import RunResult, run_once
from alloclab.workloads.command import Runs, Workload, resolve_command


class Executor(Runs, Protocol):
    """program(): the executable the variant applies to (checked statically before any run);
    prepare(): once per experiment, before the first run (e.g. initdb), AlloclabError to stop;
    cleanup(): once per experiment, on every path (normal end, error, Ctrl-C)."""

    def execute(self, env: dict[str, str], variant_env: dict[str, str], workdir: Path, *,
                timeout_s: float | None, mapped_marker: str | None, perf_file: Path | None) -> RunResult:
        """One run. `env` is the variant's full environment, for the program under test only."""


@dataclass
class CommandExecutor:
    argv: list[str]
    cwd: str | None = None
    # The run's user+sys time covers every process it started, so the rest of the machine's
    # busy time during the run is other work competing for the CPUs.
    accounts_all_cpu = True
    # Its run directory holds only files every run rewrites (stdout, stderr, perf's counts).
    fresh_workdir = False
    exit_reader: bool | None = None   # measure/exit_reading.py: found on the first run

    def program(self) -> Path:
        return resolve_command(self.argv[0])

    def prepare(self) -> None:
        pass

    def execute(self, env, variant_env, workdir, *, timeout_s, mapped_marker, perf_file) -> RunResult:
        argv, reading = self.argv, None
        if self._reads_at_exit():
            env, reading = exit_reading.with_reader(env, Path(workdir))
        if perf_file is not None:
            argv, env = wrap_perf_stat(argv, env, variant_env, perf_file)
        result = run_once(argv, env, workdir, timeout_s=timeout_s, cwd=self.cwd, mapped_marker=mapped_marker)
        if reading is not None:
            exit_reading.apply(result, reading)
        return result

    def _reads_at_exit(self) -> bool:
        """A program with an allocator built into it: its end reading is taken as exit() begins."""
        if self.exit_reader is None:
            try:
                self.exit_reader = exit_reading.wanted(self.program())
            except Exception:   # noqa: BLE001 - an unreadable program keeps the exit stop's reading
                self.exit_reader = False
        return self.exit_reader

    def cleanup(self) -> None:
        pass


def executor_of(workload: Workload) -> "Executor":
    """The workload's executor; a plain command gets a CommandExecutor on first use."""
    if workload.executor is None:
        workload.executor = CommandExecutor(workload.argv)
    return workload.executor
