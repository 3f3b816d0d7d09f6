"""Reading and checking an experiment file: the TOML tables, the keys each may hold, the parse.

In: the path of a TOML file. Out: an ExperimentFile (see experiment_file), checked completely,
or an AlloclabError naming the file, the line and the key, and the fix.
"""

from __future__ import annotations

import re
import signal
import tomllib
from pathlib import Path

from alloclab.workloads import phases
from alloclab.errors import AlloclabError
from alloclab.catalog.allocators import load_catalog
from alloclab.workloads.experiment_model import (BUILTIN_PLACEHOLDERS, ExperimentFile, Load, MetricSpec,
                                                 Requirement, Service, Step, placeholders_in)
from alloclab.workloads.toml_check import KeyLocator, _Checker, _fmt_path

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


TOP = {"experiment": "table: name, description, variants, runs, ...", "params": "table of defaults",
       "files": "table: file name -> contents", "setup": "array of tables [[setup]]",
       "service": "table: the server under the variant", "client": "array of tables [[client]]",
       "command": "array of tables [[command]] (command mode)", "teardown": "array of tables [[teardown]]",
       "inspect": "table: programs, channel (alloclab inspect of a running process of this program)"}
# `alloclab inspect PID` of a process of a recipe's program: the programs it recognizes by name, and
# the program's own channel to its allocator's books (measure/inspect/channels.py reads each kind).
CHANNELS = ("redis",)
INSPECT = {"programs": "list of program names (the executable's file name)",
           "channel": f"the program's own channel to its allocator's books: {' | '.join(CHANNELS)}"}
EXPERIMENT = {"name": "string", "description": "string", "variants": "list of variant specs",
              "runs": "integer (the first look of until-decided)", "max_runs": "integer",
              "budget": "duration such as \"25m\"", "warmup": "integer", "run_as": "user name",
              "requires": "list of { program, package }", "env": "table: VAR -> value, for every command"}
STEP = {"command": "argv list", "timeout": "seconds", "service": "bool: run with the service up",
        "background": "bool: leave it running until the experiment ends (setup only)"}
SERVICE = {"command": "argv list", "ready": "{ tcp = true } | { command = [...] } | { log = \"regex\" }",
           "start_timeout": "seconds", "stop": "{ signal = \"SIGTERM\" } | { command = [...] }",
           "stop_timeout": "seconds", "port": "fixed port (default: a free one)",
           "lifetime": "\"run\" or \"block\"", "data_dir": "directory under {workdir}",
           "reset_data": "bool", "idle": "seconds"}
LOAD = {"name": "string", "command": "argv list", "timeout": "seconds", "metrics": "list of metric tables"}
METRIC = {"name": "string", "unit": "string", "higher": "bool (higher is better)", "primary": "bool",
          "regex": "regex, first group is the number", "json": "KEY.PATH in a JSON line",
          "ratio": "{ numerator = regex | \"@cpu_s\", denominator = regex, scale = number }",
          "work": "the unit of work a rate counts (\"transaction\"): the fingerprint gives allocations per one",
          **phases.METRIC_KEYS}
# What a ratio's numerator may name instead of a regex: a measure of the process under the variant.
RATIO_MEASURES = ("cpu_s", "user_s", "sys_s", "wall_s", "load_cpu_s")   # load_cpu_s: a server's, while loaded


class Checker(_Checker):
    """toml_check's checker with the two reads this schema repeats, by key as typed() and number()
    read a value: a key's table and a key's command, each checked and named by its path."""

    def table_at(self, data: dict, key: str, where: tuple, allowed: dict[str, str],
                 required: tuple[str, ...] = ()) -> dict:
        return self.table(data[key], where + (key,), allowed, required)

    def argv_at(self, data: dict, key: str, where: tuple, default=None):
        """The command under `key`, or `default` where it is absent (a required key is there: table()
        checked it)."""
        return self.argv(data[key], where + (key,)) if key in data else default


def parse(path: str | Path) -> ExperimentFile:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise AlloclabError(f"Cannot read the experiment file {path}: {exc.strerror}. Give the path of a "
                            f"TOML file, or recipe:NAME (see `alloclab recipes`).") from None
    loc = KeyLocator(text)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise AlloclabError(f"{path}: not valid TOML: {exc}. Fix the syntax at that line.") from None
    c = Checker(path, text, loc)
    c.table(data, (), TOP)
    exp = c.table(data.get("experiment", {}), ("experiment",), EXPERIMENT)
    variants = c.typed(exp, "variants", ("experiment",), list, "a list of variant specs", [])
    if not all(isinstance(v, str) for v in variants):
        raise c.error(("experiment", "variants"), "'experiment.variants' must be a list of strings.",
                      f'Write e.g. ["glibc", "{load_catalog().examples["setting"]}", "jemalloc"].')
    setup, teardown = _steps(c, data, "setup"), _steps(c, data, "teardown")
    service, loads = _service_and_loads(c, data, setup)
    ef = ExperimentFile(
        path=path.resolve(), text=text, name=c.typed(exp, "name", ("experiment",), str, "a string", path.stem),
        description=c.typed(exp, "description", ("experiment",), str, "a string", ""),
        recipe=None, variants=list(variants),
        runs=c.typed(exp, "runs", ("experiment",), int, "an integer"),
        warmup=c.typed(exp, "warmup", ("experiment",), int, "an integer"),
        run_as=c.typed(exp, "run_as", ("experiment",), str, "a user name"), requires=_requires(c, exp),
        params=_params(c, data), files=_files(c, data), setup=setup,
        service=service, loads=loads, teardown=teardown, env=_env(c, exp), locator=loc,
        max_runs=c.typed(exp, "max_runs", ("experiment",), int, "an integer"),
        budget=c.typed(exp, "budget", ("experiment",), str, "a duration such as \"25m\""))
    ef.inspect = _inspect(c, data)
    _check_placeholders(c, ef, data)
    return ef


def _inspect(c: Checker, data: dict) -> dict:
    if "inspect" not in data:
        return {}
    t = c.table(data["inspect"], ("inspect",), INSPECT, ("programs",))
    programs = c.typed(t, "programs", ("inspect",), list, "a list of program names")
    if not programs or not all(isinstance(p, str) for p in programs):
        raise c.error(("inspect", "programs"), "'inspect.programs' must be a non-empty list of strings.",
                      'Write e.g. ["redis-server"].')
    channel = c.typed(t, "channel", ("inspect",), str, "a string")
    if channel is not None and channel not in CHANNELS:
        raise c.error(("inspect", "channel"), f"unknown channel '{channel}'.", f"Known channels: {', '.join(CHANNELS)}.")
    return {"programs": list(programs), "channel": channel}


def _requires(c: Checker, exp: dict) -> list[Requirement]:
    requires = []
    for i, r in enumerate(c.typed(exp, "requires", ("experiment",), list, "a list of tables", [])):
        where = ("experiment", "requires", i)
        r = c.table(r, where, {"program": "command name", "package": "Debian package"}, ("program", "package"))
        requires.append(Requirement(c.typed(r, "program", where, str, "a string"),
                                    c.typed(r, "package", where, str, "a string")))
    return requires


def _params(c: Checker, data: dict) -> dict:
    params = c.table(data.get("params", {}), ("params",), {k: "parameter" for k in data.get("params", {})})
    for key, value in params.items():
        if not _NAME.match(key) or key in BUILTIN_PLACEHOLDERS:
            raise c.error(("params", key), f"'{key}' cannot be a parameter name.",
                          f"Use letters, digits, _ and -, and none of {', '.join(BUILTIN_PLACEHOLDERS)}.")
        if not isinstance(value, (str, int, float, bool)):
            raise c.error(("params", key), f"parameter '{key}' must be a string, number or bool.",
                          "Fix its value.")
    return dict(params)


def _files(c: Checker, data: dict) -> dict:
    files = c.table(data.get("files", {}), ("files",), {k: "contents" for k in data.get("files", {})})
    for fname, content in files.items():
        if not isinstance(content, str) or "/" in fname or fname in (".", "..") or not fname:
            raise c.error(("files", fname), f"[files] entry '{fname}' must be a plain file name with a string "
                                            f"as its contents.", "Fix the entry.")
    return dict(files)


def _env(c: Checker, exp: dict) -> dict:
    env = c.table(exp.get("env", {}), ("experiment", "env"), {k: "value" for k in exp.get("env", {})})
    for var, value in env.items():
        if not isinstance(value, str) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", var) or \
                var.startswith("LD_") or load_catalog().reads_variable(var):
            raise c.error(("experiment", "env", var), f"experiment.env cannot set '{var}' to {value!r}.",
                          "Give a plain variable name and a string; the allocator's settings belong in the "
                          "variants, never in env.")
    return dict(env)


def _steps(c: Checker, data: dict, key: str) -> list[Step]:
    raw = data.get(key, [])
    if not isinstance(raw, list):
        raise c.error((key,), f"'{key}' must be an array of tables.", f"Write each step as [[{key}]].")
    out = []
    for i, s in enumerate(raw):
        where = (key, i)
        s = c.table(s, where, STEP, ("command",))
        background = bool(c.typed(s, "background", where, bool, "true or false", False))
        with_service = bool(c.typed(s, "service", where, bool, "true or false", False))
        if background and (key != "setup" or with_service or "timeout" in s):
            raise c.error(where + ("background",), "`background = true` is for a [[setup]] step that starts "
                                                   "a daemon, without `service` or `timeout`.",
                          "Remove the other keys, or make it an ordinary step.")
        out.append(Step(c.argv_at(s, "command", where),
                        c.number(s, "timeout", where, None), with_service, background))
    return out


def _service_and_loads(c: Checker, data: dict, setup: list[Step]) -> tuple["Service | None", list]:
    """A [service] with its [[client]] loads, or [[command]] loads run under the variant themselves."""
    service = _service(c, data) if "service" in data else None
    if service is None and any(s.with_service for s in setup):
        raise c.error(("setup",), "a [[setup]] step has `service = true` but the file has no [service].",
                      "Add a [service] table or remove `service = true`.")
    if service and "command" in data:
        raise c.error(("command",), "a file has either a [service] with [[client]] entries, or [[command]] "
                                    "entries, not both.", "Move the commands into [[client]] or drop [service].")
    key = "client" if service else "command"
    if service is None and "client" in data:
        raise c.error(("client",), "[[client]] entries need a [service] to drive.",
                      "Add a [service] table, or name them [[command]] to run them under the variant.")
    return service, _loads(c, data.get(key, []), key)


def _service(c: Checker, data: dict) -> Service:
    w = ("service",)
    s = c.table_at(data, "service", (), SERVICE, ("command", "ready"))
    ready = c.table_at(s, "ready", w, {"tcp": "true", "command": "argv list", "log": "regex"})
    kinds = [k for k in ("tcp", "command", "log") if k in ready]
    if len(kinds) != 1:
        raise c.error(w + ("ready",), "service.ready needs exactly one probe.",
                      'Write ready = { tcp = true }, ready = { command = ["pg_isready", ...] } or '
                      'ready = { log = "ready to accept connections" }.')
    kind = kinds[0]
    ready_command: tuple[str, ...] = ()
    ready_log = ""
    if kind == "tcp" and ready != {"tcp": True}:
        raise c.error(w + ("ready", "tcp"), "service.ready.tcp must be true.", "Write ready = { tcp = true }.")
    if kind == "command":
        ready_command = c.argv_at(ready, "command", w + ("ready",))
    if kind == "log":
        ready_log = c.typed(ready, "log", w + ("ready",), str, "a regex string")
        try:
            re.compile(ready_log)
        except re.error as exc:
            raise c.error(w + ("ready", "log"), f"service.ready.log does not compile as a regex ({exc}).",
                          "Fix the pattern.") from None
    stop = c.table(s.get("stop", {"signal": "SIGTERM"}), w + ("stop",), {"signal": "signal name", "command": "argv list"})
    if len(stop) != 1:
        raise c.error(w + ("stop",), "service.stop needs exactly one of signal or command.",
                      'Write stop = { signal = "SIGINT" } or stop = { command = ["redis-cli", ...] }.')
    stop_signal, stop_command = signal.SIGTERM, ()
    given = c.typed(stop, "signal", w + ("stop",), str, "a signal name such as SIGTERM")
    if given is not None:
        name = given.upper()
        name = name if name.startswith("SIG") else "SIG" + name
        try:
            stop_signal = signal.Signals[name]
        except KeyError:
            raise c.error(w + ("stop", "signal"), f"unknown signal '{given}'.",
                          "Use a name such as SIGTERM, SIGINT or SIGQUIT.") from None
    else:
        stop_command = c.argv_at(stop, "command", w + ("stop",))
    lifetime = c.typed(s, "lifetime", w, str, '"run" or "block"', "run")
    if lifetime not in ("run", "block"):
        raise c.error(w + ("lifetime",), f"service.lifetime must be \"run\" or \"block\" (got {lifetime!r}).",
                      "\"run\" starts a fresh server for every run; \"block\" keeps one per variant for a block.")
    port = c.typed(s, "port", w, int, "an integer port")
    if port is not None and not 1 <= port <= 65535:
        raise c.error(w + ("port",), f"service.port {port} is not a TCP port.", "Use 1-65535, or drop it.")
    if port is not None and lifetime == "block":
        raise c.error(w + ("port",), "lifetime = \"block\" runs one server per variant side by side, so each "
                                     "needs a port of its own.", "Remove `port` and use {port} in the commands.")
    data_dir = c.typed(s, "data_dir", w, str, "a directory name under {workdir}")
    if data_dir is not None and (data_dir.startswith("/") or ".." in Path(data_dir).parts or "{" in data_dir):
        raise c.error(w + ("data_dir",), f"service.data_dir '{data_dir}' must be a plain relative path.",
                      "Write e.g. data_dir = \"data\"; use {data_dir} in the commands to refer to it.")
    reset = bool(c.typed(s, "reset_data", w, bool, "true or false", False))
    if reset and data_dir is None:
        raise c.error(w + ("reset_data",), "service.reset_data needs service.data_dir.",
                      "Add data_dir = \"data\" and use {data_dir} in the commands.")
    return Service(
        command=c.argv_at(s, "command", w), ready=kind, ready_command=ready_command,
        ready_log=ready_log, start_timeout=c.number(s, "start_timeout", w, 30.0, 0.1),
        stop_signal=stop_signal, stop_command=stop_command, stop_timeout=c.number(s, "stop_timeout", w, 30.0, 0.1),
        port=port, lifetime=lifetime, data_dir=data_dir, reset_data=reset, idle=c.number(s, "idle", w, 0.0))


def _loads(c: Checker, raw, key: str) -> list[Load]:
    if isinstance(raw, dict):
        raise c.error((key,), f"[{key}] must be an array of tables.", f"Write [[{key}]] (double brackets), one "
                                                                       f"per {key}.")
    if not isinstance(raw, list) or not raw:
        raise c.error((key,), f"the file needs at least one [[{key}]] entry.",
                      f"Add [[{key}]] with a command and its metrics.")
    loads, names = [], set()
    for i, entry in enumerate(raw):
        where = (key, i)
        entry = c.table(entry, where, LOAD | (phases.LOAD_KEYS if key == "client" else {}), ("command",))
        name = c.typed(entry, "name", where, str, "a string", f"{key} {i + 1}")
        if name in names:
            raise c.error(where + ("name",), f"two [[{key}]] entries are named '{name}'.", "Give each its own name.")
        names.add(name)
        metrics = []
        raw_metrics = c.typed(entry, "metrics", where, list, "a list of metric tables", [])
        for j, m in enumerate(raw_metrics):
            metrics.append(_metric(c, m, where + ("metrics", j)))
            if key == "command" and metrics[-1].ratio and metrics[-1].ratio[0] == "@load_cpu_s":
                raise c.error(where + ("metrics", j, "ratio", "numerator"), "@load_cpu_s is a server's CPU while "
                              "a client drives it, and a [[command]] has no server.", "Use @cpu_s.")
        if len({m.name for m in metrics}) != len(metrics):
            raise c.error(where + ("metrics",), f"[[{key}]] '{name}' names two metrics alike.",
                          "Give each metric its own name.")
        loads.append(Load(name, c.argv_at(entry, "command", where),
                          c.number(entry, "timeout", where, None, 0.1), tuple(metrics),
                          phases.parse_warmup(c, entry, where), phases.parse_phases(c, entry, where)))
    return loads


def _metric(c: Checker, raw, where: tuple) -> MetricSpec:
    m = c.table(raw, where, METRIC, ("name",))
    name = c.typed(m, "name", where, str, "a string")
    if not re.match(r"^[A-Za-z_][\w.-]*$", name):
        raise c.error(where + ("name",), f"metric name '{name}' is not a plain name.", "Use letters, digits, _ . -")
    sources = [k for k in ("regex", "json", "ratio", "progress") if k in m]
    if len(sources) != 1:
        raise c.error(where, f"metric '{name}' needs exactly one of regex, json, ratio or progress.",
                      'Write e.g. regex = "tps = ([\\\\d.]+)", json = "summary.ops", ratio = '
                      '{ numerator = "...", denominator = "..." }, or progress = "progress: .*?([\\\\d.]+) tps".')
    regex = json_path = ratio = progress = None
    skip = phases.check_progress_metric(c, m, where)

    def compiled(table: dict, key: str, at: tuple) -> str:
        """The regex under `key`: a string that compiles."""
        pattern = c.typed(table, key, at, str, "a regex string")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise c.error(at + (key,), f"the regex of metric '{name}' does not compile ({exc}).",
                          "Fix the pattern; put the number in the first group.") from None
        return pattern

    if "regex" in m:
        regex = compiled(m, "regex", where)
    elif "json" in m:
        json_path = c.typed(m, "json", where, str, "a KEY.PATH string")
    elif "progress" in m:
        progress = compiled(m, "progress", where)
    scale = 1.0
    if "ratio" in m:
        at = where + ("ratio",)
        r = c.table_at(m, "ratio", where, {"numerator": "regex, or @cpu_s, @user_s, @sys_s, @wall_s",
                                           "denominator": "regex", "scale": "number"},
                       ("numerator", "denominator"))
        num = c.typed(r, "numerator", at, str, "a regex string, or @cpu_s, @user_s, @sys_s, @wall_s")
        if num.startswith("@"):
            if num[1:] not in RATIO_MEASURES:
                raise c.error(at + ("numerator",), f"metric '{name}': unknown measure '{num}'.",
                              f"Use one of {', '.join('@' + x for x in RATIO_MEASURES)} (of the process under "
                              f"the variant), or a regex.")
        else:
            num = compiled(r, "numerator", at)
        ratio = (num, compiled(r, "denominator", at))
        scale = float(c.number(r, "scale", at, 1.0, 1e-12))
    return MetricSpec(name, c.typed(m, "unit", where, str, "a string", ""),
                      bool(c.typed(m, "higher", where, bool, "true or false", True)),
                      bool(c.typed(m, "primary", where, bool, "true or false", False)),
                      regex, json_path, ratio, progress, skip if progress else 0, scale,
                      c.typed(m, "work", where, str, "a noun such as \"transaction\"", None) or None)


def _check_placeholders(c: Checker, ef: ExperimentFile, data: dict) -> None:
    known = set(BUILTIN_PLACEHOLDERS) | set(ef.params)
    for where, text in _strings(data):
        if where and (where[0] == "params" or (where[0] == "experiment" and where[1:2] != ("env",))):
            continue
        if "metrics" in where or where == ("service", "ready", "log"):
            continue  # regexes keep their braces
        for name in placeholders_in(text):
            if where[:2] == ("experiment", "env") and name in ("port", "data_dir"):
                raise c.error(where, f"experiment.env applies to every command alike, so it cannot use "
                                     f"'{{{name}}}', which differs from server to server.",
                              "Pass it on the command line instead.", line=c.loc.line_of_text("{" + name + "}"))
            if where[0] == "files" and name in ("port", "data_dir"):
                raise c.error(where, f"[files] contents are written once, before any server starts, so they "
                                     f"cannot use '{{{name}}}', which differs from server to server.",
                              "Pass it on the command line of the server or client instead.",
                              line=c.loc.line_of_text("{" + name + "}"))
            if name in known:
                if name == "port" and ef.service is None:
                    raise c.error(where, "'{port}' is used but the file has no [service] to give it a port.",
                                  "Remove it or add a [service].")
                if name == "data_dir" and (ef.service is None or ef.service.data_dir is None):
                    raise c.error(where, "'{data_dir}' is used but service.data_dir is not set.",
                                  "Add data_dir = \"data\" to [service].")
                continue
            line = c.loc.line_of_text("{" + name + "}")
            raise c.error(where, f"unknown placeholder '{{{name}}}' in {_fmt_path(where)}.",
                          f"Known placeholders: {', '.join('{' + k + '}' for k in sorted(known))}; add "
                          f"'{name}' to [params] to define it, or write {{{{ and }}}} for literal braces.",
                          line=line)


def _strings(data, where: tuple = ()):
    if isinstance(data, str):
        yield where, data
    elif isinstance(data, dict):
        for k, v in data.items():
            yield from _strings(v, where + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _strings(v, where + (i,))
