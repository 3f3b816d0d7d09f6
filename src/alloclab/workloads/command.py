"""A workload is a program run the same way under every variant: what to run, what to read.

How a run happens is the workload's executor, which the measure stage supplies: a plain command
(measure.executors.CommandExecutor, the default) or a server with a load client
(measure.service's executors, set by the service's workloads).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from alloclab.errors import AlloclabError
from alloclab.workloads.metrics import MetricDef


class Runs(Protocol):
    """What a workload knows of how it runs: the program a variant applies to, and a set-up and
    tear-down around the experiment. How a run happens (`execute`) is the measure stage's
    (measure.executors.Executor, which extends this)."""

    def program(self) -> Path: ...

    def prepare(self) -> None: ...

    def cleanup(self) -> None: ...


@dataclass
class Workload:
    name: str
    argv: list[str]                                           # what reports show as the command
    metrics: list[MetricDef] = field(default_factory=list)   # read from the program's output
    params: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)        # not allocator settings
    executor: Runs | None = None   # None: a plain command (see measure.executors.executor_of)

    def program(self) -> Path:
        """The executable behind the workload; a clear error if there is none."""
        return self.executor.program() if self.executor is not None else resolve_command(self.argv[0])


def command_workload(argv: list[str], metrics: list[MetricDef], shell: bool = False) -> Workload:
    if shell:
        # The user asked for a shell: the whole command is one string they wrote themselves.
        return Workload(name=" ".join(argv), argv=["/bin/sh", "-c", " ".join(argv)], metrics=metrics,
                        info={"shell": True})
    name = " ".join(argv)
    return Workload(name=name if len(name) <= 60 else name[:57] + "...", argv=list(argv), metrics=metrics)


def resolve_command(argv0: str) -> Path:
    found = shutil.which(argv0)
    if not found:
        raise AlloclabError(
            f"Command not found: '{argv0}'. Give a program on PATH or a path to an executable file "
            f"(note that alloclab runs it without a shell; use --shell for shell syntax)."
        )
    return Path(found).resolve()


def real_executable(path: Path, _depth: int = 0) -> Path:
    """Follow `#!` lines (and `/usr/bin/env X`) to the ELF file the kernel finally runs."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(256)
    except OSError:
        return path
    if not head.startswith(b"#!") or _depth > 4:
        return path
    words = head[2:].split(b"\n", 1)[0].decode(errors="replace").split()
    if not words:
        return path
    interp = words[0]
    if Path(interp).name == "env" and len(words) > 1:
        args = [w for w in words[1:] if not w.startswith("-")]
        interp = shutil.which(args[0]) if args else interp
    return real_executable(Path(interp or path).resolve(), _depth + 1)
