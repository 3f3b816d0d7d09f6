"""What a command names to measure, and the one function that turns it into workloads.

A target is a command (compare, tune, profile), the built-in workloads (suite) or an experiment file
or recipe (run, tune). compare, suite, run, tune, profile and a fleet's hosts all call
`workloads_for`, so that an option of a target (--idle, --client, --param) is checked once and
means the same on every path; tests/test_layout.py fails on a second function that builds them.

In: a target as plain data (it crosses the fleet's wire as JSON, so its fields keep their names).
Out: `Built`: the workloads, their clean-up, the command's defaults (a file's own where it sets
them), a title and the parameter sweeps among the workloads.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from alloclab import defaults
from alloclab.errors import AlloclabError


@dataclass
class CommandTarget:
    """`-- CMD [ARGS]...`, with --param (placeholders {NAME} in the arguments), --metric and --shell."""

    command: list[str]
    param: list[str] = field(default_factory=list)
    metric: list[str] = field(default_factory=list)
    shell: bool = False

    def portable(self) -> "CommandTarget":
        """The same on a host whose working directory is not ours: ./prog made absolute."""
        if self.shell or "/" not in self.command[0]:
            return self
        return dataclasses.replace(self, command=[str(Path(self.command[0]).resolve()), *self.command[1:]])

    def check(self) -> None:
        from alloclab.workloads.command import resolve_command
        resolve_command(self.command[0] if not self.shell else "sh")


@dataclass
class BuiltinTarget:
    """suite's built-in workloads by name (none: all of them), --param and --quick."""

    workload: list[str] = field(default_factory=list)
    param: list[str] = field(default_factory=list)
    quick: bool = False

    def portable(self) -> "BuiltinTarget":
        return self

    def check(self) -> None:
        from alloclab.workloads import build as cbuild
        cbuild.compiler()


@dataclass
class FileTarget:
    """An experiment file or recipe:NAME, with --param, --idle (a [service]'s rest), --client and --keep."""

    target: str
    param: list[str] = field(default_factory=list)
    idle: float | None = None
    client: list[str] = field(default_factory=list)
    keep: bool = False

    def portable(self) -> "FileTarget":
        from alloclab.workloads.experiment_file import RECIPE_PREFIX
        if self.target.startswith(RECIPE_PREFIX):
            return self
        return dataclasses.replace(self, target=str(Path(self.target).resolve()))

    def check(self) -> None:
        from alloclab.workloads import experiment_file
        experiment_file.resolve(self.target).check_requirements()


Target = CommandTarget | BuiltinTarget | FileTarget


@dataclass
class Built:
    workloads: list
    cleanup: Callable[[], None]
    defaults: defaults.CommandDefaults | None
    title: str
    sweeps: list[dict]   # the parameter sweeps among the workloads (plan/param_sweep.py)
    session: object = None   # a file's Session (measure/service), where its working directory is
    question: list[str] = field(default_factory=list)   # a file's own variants: what its author asks


def workloads_for(target: Target, *, base: defaults.CommandDefaults | None = None, requirements: bool = True,
                  note: Callable[[str], None] = lambda text: None) -> Built:
    """The workloads of `target` on this host. `base`: the command's defaults (compare's, suite's,
    tune's); a file is an experiment of its own, so its [experiment] values come first, over run's,
    whichever command runs it. `requirements`: check that the file's programs are installed here (a
    fleet's hosts are checked instead, each in its pre-flight check). Anything refused is refused
    before a program is built or a server set up."""
    from alloclab.plan import param_sweep

    params = param_sweep.expand_params(target.param) if not isinstance(target, FileTarget) else None
    if isinstance(target, CommandTarget):
        from alloclab.workloads.metrics import parse_metric_option
        metrics = [parse_metric_option(m) for m in target.metric]
        workloads = param_sweep.command_workloads(target.command, params, metrics, target.shell)
        _refuse_static(workloads, target.shell)
        return Built(workloads, lambda: _cleanup(workloads), base, " ".join(target.command),
                     param_sweep.param_sweeps(workloads, params.swept))
    if isinstance(target, BuiltinTarget):
        from alloclab.workloads import builtin
        names = target.workload or list(builtin.registry())
        for name in names:
            builtin.get(name)  # unknown names fail before anything is compiled
        workloads = param_sweep.builtin_workloads(names, params, target.quick)
        title = "suite: " + ", ".join(names) + (" (quick)" if target.quick else "")
        return Built(workloads, lambda: _cleanup(workloads), base, title,
                     param_sweep.param_sweeps(workloads, params.swept))
    return _file_workloads(target, requirements, note)


def _file_workloads(target: FileTarget, requirements: bool, note) -> Built:
    from alloclab.measure.service import executors as service_executors
    from alloclab.workloads import experiment_file

    ef = experiment_file.resolve(target.target)
    if requirements:
        ef.check_requirements()
    params = ef.with_params(experiment_file.param_options(target.param))
    if target.idle is not None:
        if ef.service is None:
            raise AlloclabError(f"--idle is the rest of a server after its load, and {target.target} runs no server "
                                f"(it has no [service]): leave --idle out.")
        if target.idle < 0:
            raise AlloclabError(f"--idle cannot be negative (got {target.idle:g}): give the seconds of rest after "
                                f"the load before the last memory reading, e.g. --idle 30.")
        ef.service = dataclasses.replace(ef.service, idle=target.idle)
    workloads, session = service_executors.workloads(ef, params, keep=target.keep, clients=target.client, note=note)
    return Built(workloads, session.cleanup, ef.command_defaults(defaults.RUN), ef.name, [], session,
                 list(ef.variants))


def _refuse_static(workloads: list, shell: bool) -> None:
    """A statically linked program takes no preload: refused here, before a run or the store
    (measure/verify.py's static_refusal says what tunes its heap instead)."""
    from alloclab.measure.verify import static_refusal

    if shell:
        return
    programs = []
    for w in workloads:
        try:
            programs.append(w.program())
        except AlloclabError:
            return   # a command not found is refused where it always was, after the options
    for program in dict.fromkeys(programs):
        refusal = static_refusal(program)
        if refusal is not None:
            raise refusal


def _cleanup(workloads: list) -> None:
    for w in workloads:
        if w.executor is not None:   # set where it ran: an option refused first leaves it unset
            w.executor.cleanup()
