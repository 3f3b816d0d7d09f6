"""What an experiment file says, as typed records: the server, its clients with their warm-up and
memory phases, the set-up and tear-down steps, the metrics; and its `{placeholders}`.

In: the values experiment_schema read and checked. Out: an ExperimentFile, its placeholders
substituted on demand (plain string substitution, never through a shell).
"""

from __future__ import annotations

import re
import shutil
import signal
from collections.abc import Sequence
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from alloclab.defaults import CommandDefaults
from alloclab.errors import AlloclabError
from alloclab.workloads.metrics import MetricDef
from alloclab.workloads.toml_check import KeyLocator

BUILTIN_PLACEHOLDERS = ("port", "workdir", "recipe_dir", "data_dir")
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")


# --- the parsed file ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Warmup:
    seconds: float | None = None                       # of the client's own command
    commands: tuple[tuple[str, ...], ...] = ()         # or these, in order

    def describe(self) -> str:
        if self.seconds is not None:
            return f"{self.seconds:g} s of the client"
        return " then ".join(f"`{' '.join(c)}`" for c in self.commands)


@dataclass(frozen=True)
class Phase:
    name: str
    command: tuple[str, ...] = ()     # empty: the phase only rests
    idle: float | str = 0.0           # seconds, or a "{param}" that gives them
    timeout: float = 60.0


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
    locator: KeyLocator = field(repr=False, default=None)
    max_runs: int | None = None       # until decided: at most this many runs per variant
    budget: str | None = None         # until decided: stop adding runs after this long ("25m")
    inspect: dict = field(default_factory=dict)   # [inspect]: programs, channel (alloclab inspect)

    @property
    def recipe_dir(self) -> Path:
        return self.path.parent

    @property
    def mode(self) -> str:
        return "service" if self.service else "command"

    def missing(self) -> list[Requirement]:
        return [r for r in self.requires if not r.present()]

    def command_defaults(self, base: CommandDefaults) -> CommandDefaults:
        """`base` (run's) where the file's [experiment] does not set runs, max_runs, budget or warmup."""
        return dataclasses.replace(base, first_look=self.runs or base.first_look,
                                   max_runs=self.max_runs if self.max_runs is not None else base.max_runs,
                                   budget=self.budget or base.budget,
                                   warmup=self.warmup if self.warmup is not None else base.warmup)

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

    def selected_loads(self, names: Sequence[str]) -> list[int]:
        """The indices of the [[client]]s (or [[command]]s) named, in the file's order; all of them
        when none is named."""
        if not names:
            return list(range(len(self.loads)))
        known = [load.name for load in self.loads]
        unknown = [n for n in names if n not in known]
        if unknown:
            kind = "client" if self.service else "command"
            raise AlloclabError(
                f"--client {unknown[0]!r}: '{self.name}' has no {kind} of that name. Its {kind}s are: "
                f"{', '.join(repr(k) for k in known)} (the names in {self.path}); give one of them, or leave "
                f"--client out to run them all.")
        return [i for i, n in enumerate(known) if n in names]

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
