"""What one fleet task runs: the experiment as the command line gave it, as plain data.

Workloads hold paths, compiled programs and server sessions of the machine that built them, so
they do not travel: each host rebuilds them from the same target with the one function the
single-machine commands call (measure/targets.py's workloads_for; INPUTS picks the target's class
by kind).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from alloclab.catalog.variants import VariantSpec
from alloclab.errors import AlloclabError
from alloclab.measure.runner import Settings
from alloclab.measure.targets import BuiltinTarget, CommandTarget, FileTarget, workloads_for


# A command kind's inputs are its target (measure/targets.py), which builds its workloads with the
# same function the single-machine commands call.
Inputs = CommandTarget | BuiltinTarget | FileTarget
INPUTS: dict[str, type] = {"compare": CommandTarget, "suite": BuiltinTarget, "run": FileTarget}


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
    """(workloads, cleanup) on this host."""
    built = workloads_for(spec.inputs)   # the settings came with the spec: no defaults are read here
    return built.workloads, built.cleanup


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
