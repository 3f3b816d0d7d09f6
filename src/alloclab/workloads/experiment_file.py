"""Experiment files: a server (or a command) under each allocator, described in TOML.

The file is validated completely before anything runs, and every problem is reported with
the file, the line and the key, so that a typo never costs a half-hour setup. tomllib gives
no line numbers, so `KeyLocator` finds a key's line by scanning the file's text.

Placeholders `{name}` in argv elements (and in [files] contents) are replaced by plain string
substitution, never through a shell: `{port}`, `{workdir}`, `{recipe_dir}`, `{data_dir}` and
every entry of [params]; `{{` and `}}` stand for literal braces.

In: a path or recipe:NAME. Out: an ExperimentFile (the data classes below), its placeholders
substituted on demand. Here: the data classes, placeholders, recipes and `load`; the TOML is read
and checked in experiment_schema, with toml_check's KeyLocator and checker.
"""

from __future__ import annotations

import re
import shutil
import signal
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from alloclab.errors import AlloclabError
from alloclab.workloads.metrics import MetricDef
from alloclab.workloads.phases import Phase, Warmup

if TYPE_CHECKING:
    from alloclab.workloads.toml_check import KeyLocator

RECIPE_PREFIX = "recipe:"
BUILTIN_PLACEHOLDERS = ("port", "workdir", "recipe_dir", "data_dir")
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")


# --- the parsed file ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Requirement:
    program: str
    package: str

    def present(self) -> bool:
        return shutil.which(self.program) is not None


@dataclass(frozen=True)
class MetricSpec:
    """A metric read from the client's (or command's) output."""

    name: str
    unit: str
    higher: bool
    primary: bool
    regex: str | None = None
    json: str | None = None
    ratio: tuple[str, str] | None = None   # (numerator regex or "@MEASURE", denominator regex)
    progress: str | None = None            # one match per interval: the steady-state mean (service_phases)
    skip: int = 0
    scale: float = 1.0                     # the ratio is multiplied by it (e.g. s -> us)
    work: str | None = None                # a rate's unit of work ("transaction"): allocations per one

    @property
    def derived(self) -> bool:
        return self.ratio is not None


@dataclass(frozen=True)
class Step:
    """A setup/teardown command, run once, never under the variant."""

    command: tuple[str, ...]
    timeout: float | None
    with_service: bool = False
    # Left running (never under the variant) until the experiment ends, then stopped like a
    # server: daemons that every run needs but none measures, e.g. a Ceph monitor.
    background: bool = False


@dataclass(frozen=True)
class Load:
    """A client (service mode: not under the variant) or a command (command mode: under it)."""

    name: str
    command: tuple[str, ...]
    timeout: float | None
    metrics: tuple[MetricSpec, ...]
    warmup: Warmup | None = None       # service mode: unmeasured, after readiness (service_phases)
    phases: tuple[Phase, ...] = ()     # service mode: memory phases after the load


@dataclass(frozen=True)
class Service:
    command: tuple[str, ...]
    ready: str                       # tcp | command | log
    ready_command: tuple[str, ...] = ()
    ready_log: str = ""
    start_timeout: float = 30.0
    stop_signal: int = signal.SIGTERM
    stop_command: tuple[str, ...] = ()
    stop_timeout: float = 30.0
    port: int | None = None          # None: alloclab picks a free loopback port per server
    lifetime: str = "run"            # run | block
    data_dir: str | None = None      # relative to the working directory
    reset_data: bool = False
    idle: float = 0.0


@dataclass
class ExperimentFile:
    path: Path
    text: str
    name: str
    description: str
    recipe: str | None
    variants: list[str]
    runs: int | None
    warmup: int | None
    run_as: str | None
    requires: list[Requirement]
    params: dict[str, object]
    files: dict[str, str]
    setup: list[Step]
    service: Service | None
    loads: list[Load]                 # clients (service mode) or commands (command mode)
    teardown: list[Step]
    env: dict[str, str] = field(default_factory=dict)   # for every command; placeholders allowed
    locator: "KeyLocator" = field(repr=False, default=None)
    max_runs: int | None = None       # until decided: at most this many runs per variant
    budget: str | None = None         # until decided: stop adding runs after this long ("25m")
    measured: str | None = None       # a default run's time and answer on a named machine (recipes)

    @property
    def recipe_dir(self) -> Path:
        return self.path.parent

    @property
    def mode(self) -> str:
        return "service" if self.service else "command"

    def missing(self) -> list[Requirement]:
        return [r for r in self.requires if not r.present()]

    def check_requirements(self) -> None:
        missing = self.missing()
        if missing:
            packages = sorted({r.package for r in missing})
            raise AlloclabError(
                f"The experiment '{self.name}' needs {', '.join(r.program for r in missing)}, which "
                f"{'is' if len(missing) == 1 else 'are'} not installed. Install "
                f"{'it' if len(missing) == 1 else 'them'} with `apt-get install -y {' '.join(packages)}` "
                f"(as root), then run it again.")

    def with_params(self, overrides: dict[str, str]) -> dict[str, object]:
        """The [params] table with --param overrides, each checked against the default's type."""
        params = dict(self.params)
        for key, text in overrides.items():
            if key not in params:
                known = ", ".join(sorted(params)) or "none"
                raise AlloclabError(
                    f"--param {key}={text}: '{self.name}' has no parameter '{key}'. Its parameters are: "
                    f"{known} (see [params] in {self.path}).")
            params[key] = _coerce(key, text, params[key])
        return params

    def metric_defs(self, load: Load) -> list[MetricDef]:
        defs = []
        for m in load.metrics:
            if m.regex is not None:
                defs.append(MetricDef(m.name, m.unit, m.higher, "regex", m.regex, m.primary))
            elif m.json is not None:
                defs.append(MetricDef(m.name, m.unit, m.higher, "json", m.json, m.primary))
            else:
                # Computed by the executor and printed on a JSON line of our own (see measure/service/values.py).
                defs.append(MetricDef(m.name, m.unit, m.higher, "json", f"alloclab.{m.name}", m.primary))
        return defs


def _coerce(key: str, text: str, default: object) -> object:
    kind = type(default)
    try:
        if kind is bool:
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            return text.lower() in ("true", "1", "yes")
        if kind in (int, float):
            return kind(text)
    except ValueError:
        raise AlloclabError(f"--param {key}={text}: '{key}' is a {kind.__name__} (default {default!r}); "
                            f"give a value of that type.") from None
    return text


# --- placeholders -------------------------------------------------------------------------------

def placeholders_in(text: str) -> list[str]:
    return [m.group(1) for m in _PLACEHOLDER.finditer(text) if m.group(1) is not None]


def substitute(text: str, values: dict[str, object]) -> str:
    def repl(m: re.Match) -> str:
        if m.group(0) == "{{":
            return "{"
        if m.group(0) == "}}":
            return "}"
        name = m.group(1)
        if name not in values:
            raise AlloclabError(f"The placeholder '{{{name}}}' in '{text}' has no value here (known: "
                                f"{', '.join(sorted(values))}).")
        return str(values[name])
    return _PLACEHOLDER.sub(repl, text)


def substitute_argv(argv: tuple[str, ...] | list[str], values: dict[str, object]) -> list[str]:
    return [substitute(a, values) for a in argv]


# --- recipes --------------------------------------------------------------------------------------

def recipes_dir() -> Path:
    return Path(str(resources.files("alloclab.workloads").joinpath("recipes")))


def recipe_names() -> list[str]:
    return sorted(p.stem for p in recipes_dir().glob("*.toml"))


def resolve(target: str) -> ExperimentFile:
    """`recipe:NAME` or a path to a TOML file."""
    if target.startswith(RECIPE_PREFIX):
        name = target[len(RECIPE_PREFIX):]
        path = recipes_dir() / f"{name}.toml"
        if not path.is_file():
            raise AlloclabError(f"No recipe named '{name}'. The recipes are: {', '.join(recipe_names())}. "
                                f"Run `alloclab recipes` to see them and what each needs installed.")
        ef = load(path)
        ef.recipe = name
        return ef
    path = Path(target)
    if not path.exists() and (recipes_dir() / f"{target}.toml").is_file():
        raise AlloclabError(f"No file named '{target}'; to run the recipe of that name write recipe:{target}.")
    return load(path)


def param_options(items: list[str]) -> dict[str, str]:
    """--param NAME=VALUE options as a dict (checked against the file by ExperimentFile.with_params)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise AlloclabError(f"Cannot read --param '{item}': write NAME=VALUE, e.g. --param scale=1.")
        out[key.strip()] = value.strip()
    return out


def load(path: str | Path) -> ExperimentFile:
    """Read and check the file at `path` (experiment_schema does the reading and checking)."""
    from alloclab.workloads import experiment_schema   # here: it imports this module's data classes
    return experiment_schema.parse(path)
