"""What one fleet task runs: the experiment as the command line gave it, as plain data.

Workloads hold paths, compiled programs and server sessions of the machine that built them, so
they do not travel: each host rebuilds them from the same inputs with the same functions the
single-machine commands call. A builder per command kind is data, not a branch in the runner.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Callable

from alloclab.errors import AlloclabError
from alloclab.measure.runner import Settings


@dataclass
class SessionSpec:
    kind: str          # compare | suite | run: which builder rebuilds the workloads
    inputs: dict       # that command's own inputs (argv, --param, --metric, ...), plain JSON data
    variants: list[str]
    settings: dict     # runner.Settings as a dict

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "SessionSpec":
        return cls(**json.loads(text))

    def runner_settings(self) -> Settings:
        return Settings(**self.settings)

    def with_settings(self, **changes) -> "SessionSpec":
        return dataclasses.replace(self, settings=self.settings | changes)


def _compare(inputs: dict):
    from alloclab.plan import param_sweep
    from alloclab.workloads.metrics import parse_metric_option
    metrics = [parse_metric_option(m) for m in inputs["metric"]]
    return param_sweep.command_workloads(inputs["command"], param_sweep.expand_params(inputs["param"]), metrics,
                                   inputs["shell"]), None


def _suite(inputs: dict):
    from alloclab.plan import param_sweep
    return param_sweep.builtin_workloads(inputs["workload"], param_sweep.expand_params(inputs["param"]), inputs["quick"]), None


def _run(inputs: dict):
    import dataclasses as dc

    from alloclab.workloads import experiment_file
    from alloclab.measure.service import executors as service_executors
    ef = experiment_file.resolve(inputs["target"])
    ef.check_requirements()
    params = ef.with_params(experiment_file.param_options(inputs["param"]))
    if inputs.get("idle") is not None:
        ef.service = dc.replace(ef.service, idle=inputs["idle"])
    workloads, session = service_executors.workloads(ef, params)
    return workloads, session.cleanup


BUILDERS: dict[str, Callable] = {"compare": _compare, "suite": _suite, "run": _run}


def portable(kind: str, inputs: dict) -> dict:
    """Inputs that mean the same on a worker whose working directory is not ours: relative paths
    (./prog, my-experiment.toml) made absolute. The file must exist at that path on every host."""
    from pathlib import Path

    from alloclab.workloads.experiment_file import RECIPE_PREFIX
    out = dict(inputs)
    if kind == "run" and not out["target"].startswith(RECIPE_PREFIX):
        out["target"] = str(Path(out["target"]).resolve())
    if kind == "compare" and not out["shell"] and "/" in out["command"][0]:
        out["command"] = [str(Path(out["command"][0]).resolve()), *out["command"][1:]]
    return out


def build_workloads(spec: SessionSpec):
    """(workloads, cleanup or None) on this host."""
    try:
        builder = BUILDERS[spec.kind]
    except KeyError:
        raise AlloclabError(f"A fleet task of unknown kind '{spec.kind}': the client and this host run different "
                            f"alloclab versions. Install the same version on every host.") from None
    return builder(spec.inputs)


def host_problems(spec: SessionSpec) -> list[str]:
    """Why this host cannot run the spec (allocators missing with their apt line, programs absent)."""
    from alloclab.workloads import build as cbuild
    from alloclab.catalog.variants import parse_variant
    problems = []
    for v in spec.variants:
        try:
            parse_variant(v)
        except AlloclabError as exc:
            problems.append(str(exc))
    try:
        if spec.kind == "suite":
            cbuild.compiler()
        elif spec.kind == "compare":
            from alloclab.workloads.command import resolve_command
            resolve_command(spec.inputs["command"][0] if not spec.inputs["shell"] else "sh")
        elif spec.kind == "run":
            from alloclab.workloads import experiment_file
            experiment_file.resolve(spec.inputs["target"]).check_requirements()
    except AlloclabError as exc:
        problems.append(str(exc))
    return problems
