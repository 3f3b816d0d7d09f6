"""The parts of a [[client]] that surround its measured load, as the experiment file describes
them: its warm-up, its progress metrics, and its memory phases (see measure/service_phases.py for
how they run, and the whole story).

In: the file's tables (checked by experiment_schema's checker). Out: Warmup and Phase entries, the
metrics the phases add, and the steady-state values of a progress metric read from output.
"""

from __future__ import annotations

import re
import statistics

from alloclab.workloads.experiment_model import Load, MetricSpec, Phase, Warmup  # noqa: F401 (Phase, Warmup)
from alloclab.workloads.metrics import MetricDef
from alloclab.workloads.toml_check import _Checker

PHASE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
# Growth smaller than this (load end against readiness) makes a "fraction returned" meaningless.
MIN_GROWTH_KB = 1024
DEFAULT_SKIP = 2


# --- the experiment file's keys ---------------------------------------------------------------------

LOAD_KEYS = {"warmup": "seconds of this client, or a command, or a list of commands (unmeasured)",
             "phase": "array of tables [[client.phase]]: memory phases after the load"}
PHASE = {"name": "letters, digits, _ (metric names end in it)", "command": "argv list (optional)",
         "idle": "seconds of rest before the reading, or \"{param}\"", "timeout": "seconds for the command"}
METRIC_KEYS = {"progress": "regex matched once per interval (e.g. pgbench -P 1); the metric is their "
                           "steady-state mean", "skip": "intervals dropped at the start (progress only)"}


def parse_warmup(c: "_Checker", entry: dict, where: tuple) -> Warmup | None:
    if "warmup" not in entry:
        return None
    raw, at = entry["warmup"], where + ("warmup",)
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        if raw <= 0:
            raise c.error(at, f"'warmup' must be more than 0 seconds (got {raw}).",
                          "Give the seconds of unmeasured client load, or remove the key.")
        return Warmup(seconds=float(raw))
    if isinstance(raw, list) and raw and all(isinstance(a, list) for a in raw):
        return Warmup(commands=tuple(c.argv(cmd, at + (i,)) for i, cmd in enumerate(raw)))
    if isinstance(raw, list) and raw and all(isinstance(a, str) for a in raw):
        return Warmup(commands=(c.argv(raw, at),))
    raise c.error(at, f"'warmup' must be seconds, a command or a list of commands (got {raw!r}).",
                  'Write warmup = 3 (seconds of this client\'s own command), warmup = ["pgbench", ...], or '
                  'warmup = [["psql", ...], ["pgbench", ...]].')


def parse_phases(c: "_Checker", entry: dict, where: tuple) -> tuple[Phase, ...]:
    raw = entry.get("phase", [])
    if isinstance(raw, dict) or not isinstance(raw, list):
        raise c.error(where + ("phase",), "'phase' must be an array of tables.",
                      "Write each phase as [[client.phase]] (double brackets) after its [[client]].")
    phases, names = [], set()
    for i, p in enumerate(raw):
        at = where + ("phase", i)
        p = c.table(p, at, PHASE, ("name",))
        name = c.typed(p, "name", at, str, "a string")
        if not PHASE_NAME.match(name) or name in ("load", "ready"):
            raise c.error(at + ("name",), f"phase name '{name}' cannot be used.",
                          "Use letters, digits and _ (starting with a letter), and neither 'load' nor 'ready', "
                          "which name the readings alloclab takes itself.")
        if name in names:
            raise c.error(at + ("name",), f"two phases are named '{name}'.", "Give each phase its own name.")
        names.add(name)
        command = c.argv(p["command"], at + ("command",)) if "command" in p else ()
        idle = p.get("idle", 0.0)
        if isinstance(idle, str):
            if not re.fullmatch(r"\{[A-Za-z_][A-Za-z0-9_-]*\}", idle):
                raise c.error(at + ("idle",), f"phase '{name}': idle = {idle!r} is neither seconds nor a "
                                              f"\"{{param}}\".", 'Write idle = 5 or idle = "{rest}" with rest in [params].')
        else:
            idle = c.number(p, "idle", at, 0.0)
        if not command and not idle:
            raise c.error(at, f"phase '{name}' has neither a command nor an idle time, so it would do nothing.",
                          "Add command = [...] or idle = SECONDS.")
        phases.append(Phase(name, command, idle, c.number(p, "timeout", at, 60.0, 0.1)))
    return tuple(phases)


def check_progress_metric(c: "_Checker", m: dict, where: tuple) -> int:
    """The `skip` of a progress metric (a non-negative integer); refused on other metrics."""
    if "skip" in m and "progress" not in m:
        raise c.error(where + ("skip",), "'skip' only applies to a progress metric.",
                      "Remove it, or read the metric with progress = 'REGEX'.")
    skip = c.typed(m, "skip", where, int, "a whole number of intervals", DEFAULT_SKIP)
    if skip < 0:
        raise c.error(where + ("skip",), f"'skip' must be 0 or more (got {skip}).", "Fix its value.")
    return skip


# --- steady state -------------------------------------------------------------------------------------

def interval_values(regex: str, text: str) -> list[float]:
    out = []
    for m in re.finditer(regex, text, re.MULTILINE):
        try:
            out.append(float((m.group(1) if m.groups() else m.group(0)).replace(",", "")))
        except ValueError:
            continue
    return out


def steady_values(specs: "tuple[MetricSpec, ...]", text: str) -> tuple[dict[str, float], dict[str, list[float]]]:
    """(metric -> steady-state mean, metric -> every interval). A metric with no interval left
    after `skip` gets no value, so the run fails with the runner's 'matched nothing' message."""
    values, intervals = {}, {}
    for m in specs:
        if m.progress is None:
            continue
        seen = interval_values(m.progress, text)
        intervals[m.name] = seen
        if len(seen) > m.skip:
            values[m.name] = statistics.fmean(seen[m.skip:])
    return values, intervals


# --- phases: metrics and readings ----------------------------------------------------------------------

def phase_metric_defs(load: "Load") -> list[MetricDef]:
    if not load.phases:
        return []
    defs = [MetricDef("rss_after_load_mb", "MiB", False, "json", "alloclab.rss_after_load_mb")]
    for p in load.phases:
        defs += [MetricDef(f"rss_after_{p.name}_mb", "MiB", False, "json", f"alloclab.rss_after_{p.name}_mb"),
                 MetricDef(f"pss_after_{p.name}_mb", "MiB", False, "json", f"alloclab.pss_after_{p.name}_mb"),
                 MetricDef(f"returned_after_{p.name}", "fraction", True, "json",
                           f"alloclab.returned_after_{p.name}")]
    return defs
