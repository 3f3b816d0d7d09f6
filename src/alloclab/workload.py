"""A workload is a program run the same way under every variant: argv, metrics, parameters."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from . import verify
from .metrics import MetricDef


@dataclass
class Workload:
    name: str
    argv: list[str]
    metrics: list[MetricDef] = field(default_factory=list)   # read from the program's output
    params: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)        # not allocator settings

    def program(self) -> Path:
        """The executable behind argv[0]; a clear error if there is none."""
        return verify.resolve_command(self.argv[0])


def command_workload(argv: list[str], metrics: list[MetricDef], shell: bool = False) -> Workload:
    if shell:
        # The user asked for a shell: the whole command is one string they wrote themselves.
        return Workload(name=" ".join(argv), argv=["/bin/sh", "-c", " ".join(argv)], metrics=metrics,
                        info={"shell": True})
    name = " ".join(argv)
    return Workload(name=name if len(name) <= 60 else name[:57] + "...", argv=list(argv), metrics=metrics)
