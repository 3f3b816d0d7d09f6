"""A workload is a program run the same way under every variant: how to run it, what to read.

How a run happens is the workload's executor: a plain command (CommandExecutor) or a server
with a load client (service.ServiceExecutor). The runner only sees this small interface.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from alloclab.measure import verify
from alloclab.measure.run import RunResult, run_once
from alloclab.workloads.metrics import MetricDef
from alloclab.measure.perfstat import wrap_perf_stat


class Executor(Protocol):
    def program(self) -> Path:
        """The executable the variant applies to (checked statically before any run)."""

    def prepare(self) -> None:
        """Once per experiment, before the first run (e.g. initdb). Raise AlloclabError to stop."""

    def execute(self, env: dict[str, str], variant_env: dict[str, str], workdir: Path, *,
                timeout_s: float | None, mapped_marker: str | None, perf_file: Path | None) -> RunResult:
        """One run. `env` is the variant's full environment, for the program under test only."""

    def cleanup(self) -> None:
        """Once per experiment, on every path (normal end, error, Ctrl-C)."""


@dataclass
class CommandExecutor:
    argv: list[str]
    cwd: str | None = None
    # The run's user+sys time covers every process it started, so the rest of the machine's
    # busy time during the run is other work competing for the CPUs.
    accounts_all_cpu = True
    # Its run directory holds only files every run rewrites (stdout, stderr, perf's counts).
    fresh_workdir = False

    def program(self) -> Path:
        return verify.resolve_command(self.argv[0])

    def prepare(self) -> None:
        pass

    def execute(self, env, variant_env, workdir, *, timeout_s, mapped_marker, perf_file) -> RunResult:
        argv = self.argv
        if perf_file is not None:
            argv, env = wrap_perf_stat(argv, env, variant_env, perf_file)
        return run_once(argv, env, workdir, timeout_s=timeout_s, cwd=self.cwd, mapped_marker=mapped_marker)

    def cleanup(self) -> None:
        pass


@dataclass
class Workload:
    name: str
    argv: list[str]                                           # what reports show as the command
    metrics: list[MetricDef] = field(default_factory=list)   # read from the program's output
    params: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)        # not allocator settings
    executor: Executor | None = None

    def __post_init__(self) -> None:
        if self.executor is None:
            self.executor = CommandExecutor(self.argv)

    def program(self) -> Path:
        """The executable behind the workload; a clear error if there is none."""
        return self.executor.program()


def command_workload(argv: list[str], metrics: list[MetricDef], shell: bool = False) -> Workload:
    if shell:
        # The user asked for a shell: the whole command is one string they wrote themselves.
        return Workload(name=" ".join(argv), argv=["/bin/sh", "-c", " ".join(argv)], metrics=metrics,
                        info={"shell": True})
    name = " ".join(argv)
    return Workload(name=name if len(name) <= 60 else name[:57] + "...", argv=list(argv), metrics=metrics)
