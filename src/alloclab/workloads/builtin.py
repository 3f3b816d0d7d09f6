"""The built-in workloads: a registry read from builtin.toml, compiled on first use.

Each program is one C file in c/ (plus the shared common.h), built with the system compiler
(-O2 -pthread, dynamically linked so LD_PRELOAD works), cached by source hash, and prints one
JSON line whose keys are the metrics declared in builtin.toml.
"""

from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import dataclass
from importlib import resources

from alloclab.workloads import build as cbuild
from alloclab.errors import AlloclabError
from alloclab.workloads.metrics import MetricDef
from alloclab.workloads.primary import primary_metric
from alloclab.workloads.command import Workload

_NUMBER = re.compile(r"^\d+(\.\d+)?[KMG]?$", re.IGNORECASE)
ZERO_ALLOWED = {"seed", "extra-work", "no-release", "keep-threads", "warmup"}


@dataclass(frozen=True)
class BuiltinDef:
    name: str
    source: str
    description: str
    stands_for: str
    default_args: tuple[str, ...]
    quick_args: tuple[str, ...]
    params: dict[str, str]
    metrics: tuple[MetricDef, ...]

    def primary(self) -> MetricDef:
        return primary_metric(self.metrics)


@functools.cache
def registry() -> dict[str, BuiltinDef]:
    data = tomllib.loads(resources.files("alloclab.workloads").joinpath("builtin.toml").read_text())
    common = data.get("common", {}).get("params", {})
    return {name: _builtin(name, common, **w) for name, w in data["workloads"].items()}


def _builtin(name: str, common_params: dict[str, str], *, source: str, description: str, stands_for: str,
             default_args: list[str], quick_args: list[str], metrics: dict[str, dict],
             params: dict[str, str] | None = None) -> BuiltinDef:
    """A [workloads.NAME] table of builtin.toml, its keys as arguments (an unknown key is an error)."""
    return BuiltinDef(name, source, description, stands_for, tuple(default_args), tuple(quick_args),
                      {**(params or {}), **common_params}, tuple(_metric(k, **m) for k, m in metrics.items()))


def _metric(name: str, *, higher: bool, unit: str = "", primary: bool = False) -> MetricDef:
    """A [workloads.W.metrics.NAME] table: the program prints the metric as a key of its JSON line."""
    return MetricDef(name, unit, bool(higher), "json", name, bool(primary))


@functools.cache
def suite_defaults() -> tuple[str, ...]:
    data = tomllib.loads(resources.files("alloclab.workloads").joinpath("suite.toml").read_text())
    return tuple(data["tuned_variants"])


def get(name: str) -> BuiltinDef:
    try:
        return registry()[name]
    except KeyError:
        raise AlloclabError(f"Unknown workload '{name}'. The built-in workloads are: "
                            f"{', '.join(registry())}. Run `alloclab suite --list` to see what each stands for.") from None


def binary(defn: BuiltinDef):
    src = cbuild.package_file("workloads", "c", defn.source)
    return cbuild.build(defn.name, [src], libs=["-ldl"])


def _check_param(defn: BuiltinDef, key: str, value: str) -> None:
    if key not in defn.params:
        raise AlloclabError(f"Workload '{defn.name}' has no parameter '{key}'. Its parameters are: "
                            f"{', '.join(sorted(defn.params))}.")
    if not _NUMBER.match(value):
        raise AlloclabError(f"Parameter {key}={value} of workload '{defn.name}' is not a non-negative number "
                            f"(K/M/G suffixes allowed): {defn.params[key]}.")
    if float(re.sub(r"[KMG]$", "", value, flags=re.IGNORECASE)) == 0 and key not in ZERO_ALLOWED:
        raise AlloclabError(f"Parameter {key}={value} of workload '{defn.name}' must be greater than zero "
                            f"({defn.params[key]}).")


def _merge_args(base: tuple[str, ...], params: dict[str, str]) -> list[str]:
    args = [a for a in base if a.lstrip("-").split("=", 1)[0] not in params]
    return args + [f"--{k}={v}" for k, v in params.items()]


def workload(name: str, params: dict[str, str] | None = None, quick: bool = False) -> Workload:
    defn = get(name)
    params = dict(params or {})
    for key, value in params.items():
        _check_param(defn, key, value)
    exe = binary(defn)
    argv = [str(exe), *_merge_args(defn.quick_args if quick else defn.default_args, params)]
    label = name + "".join(f" {k}={v}" for k, v in params.items())
    return Workload(name=label, argv=argv, metrics=list(defn.metrics), params=params,
                    info={"builtin": name, "description": defn.description, "stands_for": defn.stands_for,
                          "quick": quick})
