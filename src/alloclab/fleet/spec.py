"""What one fleet task runs: the experiment as the command line gave it, as plain data.

Workloads hold paths, compiled programs and server sessions of the machine that built them, so
they do not travel: each host rebuilds them from the same inputs with the same functions the
single-machine commands call. A command kind's inputs are a class that knows how to build its
workloads (INPUTS picks it by kind), not a branch in the runner.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from alloclab.catalog.variants import VariantSpec
from alloclab.errors import AlloclabError
from alloclab.measure.runner import Settings


@dataclass
class CompareInputs:
    """`alloclab compare -- COMMAND`: its argv, --param, --metric and --shell."""

    command: list[str]
    param: list[str]
    metric: list[str]
    shell: bool = False

    def portable(self) -> "CompareInputs":
        if self.shell or "/" not in self.command[0]:
            return self
        return dataclasses.replace(self, command=[str(Path(self.command[0]).resolve()), *self.command[1:]])

    def build(self):
        from alloclab.plan import param_sweep
        from alloclab.workloads.metrics import parse_metric_option
        metrics = [parse_metric_option(m) for m in self.metric]
        return param_sweep.command_workloads(self.command, param_sweep.expand_params(self.param), metrics,
                                             self.shell), None

    def check(self) -> None:
        from alloclab.workloads.command import resolve_command
        resolve_command(self.command[0] if not self.shell else "sh")


@dataclass
class SuiteInputs:
    """`alloclab suite`: the built-in workloads, --param and --quick."""

    workload: list[str]
    param: list[str]
    quick: bool = False

    def portable(self) -> "SuiteInputs":
        return self

    def build(self):
        from alloclab.plan import param_sweep
        return param_sweep.builtin_workloads(self.workload, param_sweep.expand_params(self.param), self.quick), None

    def check(self) -> None:
        from alloclab.workloads import build as cbuild
        cbuild.compiler()


@dataclass
class RunInputs:
    """`alloclab run TARGET`: an experiment file or recipe, --param and --idle."""

    target: str
    param: list[str]
    idle: float | None = None
    client: list[str] = dataclasses.field(default_factory=list)

    def portable(self) -> "RunInputs":
        from alloclab.workloads.experiment_file import RECIPE_PREFIX
        if self.target.startswith(RECIPE_PREFIX):
            return self
        return dataclasses.replace(self, target=str(Path(self.target).resolve()))

    def build(self):
        from alloclab.workloads import experiment_file
        from alloclab.measure.service import executors as service_executors
        ef = experiment_file.resolve(self.target)
        ef.check_requirements()
        params = ef.with_params(experiment_file.param_options(self.param))
        if self.idle is not None:
            ef.service = dataclasses.replace(ef.service, idle=self.idle)
        workloads, session = service_executors.workloads(ef, params, clients=self.client)
        return workloads, session.cleanup

    def check(self) -> None:
        from alloclab.workloads import experiment_file
        experiment_file.resolve(self.target).check_requirements()


Inputs = CompareInputs | SuiteInputs | RunInputs
INPUTS: dict[str, type] = {"compare": CompareInputs, "suite": SuiteInputs, "run": RunInputs}


def from_wire(cls: type, data: dict):
    """A dataclass from a dict that crossed the fleet's wire, keeping only the fields this alloclab
    knows: a host (or client) of another version still reads it far enough for the pre-flight
    check to name the version."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


def inputs_of(kind: str, inputs: dict | Inputs) -> Inputs:
    """A command's inputs (a dict from the command line or the wire) as its kind's class."""
    try:
        cls = INPUTS[kind]
    except KeyError:
        raise AlloclabError(f"A fleet task of unknown kind '{kind}': the client and this host run different "
                            f"alloclab versions. Install the same version on every host.") from None
    return inputs if isinstance(inputs, cls) else from_wire(cls, inputs)


@dataclass
class SessionSpec:
    kind: str          # compare | suite | run: which inputs class rebuilds the workloads
    inputs: Inputs     # that command's own inputs (argv, --param, --metric, ...)
    variants: list[VariantSpec]   # as read once on the command line; each host resolves them itself
    settings: Settings

    def __post_init__(self) -> None:
        # Built from the wire's JSON (or a command's dict): typed once, here.
        self.inputs = inputs_of(self.kind, self.inputs)
        self.variants = [VariantSpec.of(v) for v in self.variants]
        if isinstance(self.settings, dict):
            self.settings = from_wire(Settings, self.settings)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "SessionSpec":
        return cls(**json.loads(text))

    def runner_settings(self) -> Settings:
        return self.settings

    def with_settings(self, **changes) -> "SessionSpec":
        return dataclasses.replace(self, settings=dataclasses.replace(self.settings, **changes))


def portable(kind: str, inputs: dict | Inputs) -> Inputs:
    """Inputs that mean the same on a worker whose working directory is not ours: relative paths
    (./prog, my-experiment.toml) made absolute. The file must exist at that path on every host."""
    return inputs_of(kind, inputs).portable()


def build_workloads(spec: SessionSpec):
    """(workloads, cleanup or None) on this host."""
    return spec.inputs.build()


def host_problems(spec: SessionSpec) -> list[str]:
    """Why this host cannot run the spec (allocators missing with their apt line, programs absent)."""
    from alloclab.catalog.variants import parse_variant
    problems = []
    for v in spec.variants:
        try:
            parse_variant(v)
        except AlloclabError as exc:
            problems.append(str(exc))
    try:
        spec.inputs.check()
    except AlloclabError as exc:
        problems.append(str(exc))
    return problems
