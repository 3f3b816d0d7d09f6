"""What happens inside one service run around the measured load: the unmeasured warm-up before
it, the steady state of a client that prints progress, and the memory phases after it.

    ready -> warm-up (unmeasured) -> load (measured) -> idle -> phase 1 -> phase 2 ... -> stop

Kept apart from service.py, which starts, samples and stops servers; this module only decides
what to run between those points and what the readings mean.

* `warmup` (per [[client]]): a number is seconds of the client's own command, stopped then; an
  argv list is one command run to completion; a list of argv lists is several, in order (e.g. a
  load, then a CHECKPOINT). Its output and time are discarded, and the server's CPU and faults
  during it are taken out of the run's figures.
* `progress` metrics: every match of the regex is one interval's figure (pgbench `-P 1`); the
  metric is the mean of the intervals after the first `skip`, so that ramp-up (connections,
  caches, plans) is not averaged in. The intervals themselves are kept in the run's summary line.
* `[[client.phase]]`: after the load (and service.idle), each phase runs its command against the
  server (not under the variant), rests `idle` seconds sampling the tree, then reads RSS and PSS.
"""

from __future__ import annotations

import re
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from alloclab.workloads.metrics import MetricDef, output_tail

if TYPE_CHECKING:
    from alloclab.workloads.experiment_file import Load, MetricSpec, _Checker

PHASE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
# Growth smaller than this (load end against readiness) makes a "fraction returned" meaningless.
MIN_GROWTH_KB = 1024
DEFAULT_SKIP = 2


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


@dataclass
class Reading:
    name: str
    t_start: float          # seconds since the server started (the RSS series' clock)
    t_end: float
    rss_kb: int
    pss_kb: int | None


def phase_summary(ready_kb: int, load: Reading, phases: list[Reading]) -> dict:
    """Metrics of the phases. `returned_after_X` is the share of what the server grew by (from
    readiness to its highest reading at load end or at an earlier phase) that X's reading gave
    back: 1.0 = back to the size at readiness, 0 = nothing, negative = it grew further. Growth
    under 1 MiB counts as 1 MiB, so a server that barely grew shows about 0, not noise / noise."""
    out: dict = {"rss_ready_mb": ready_kb / 1024, "rss_after_load_mb": load.rss_kb / 1024}
    if load.pss_kb is not None:
        out["pss_after_load_mb"] = load.pss_kb / 1024
    top = load.rss_kb
    for r in phases:
        out[f"rss_after_{r.name}_mb"] = r.rss_kb / 1024
        if r.pss_kb is not None:
            out[f"pss_after_{r.name}_mb"] = r.pss_kb / 1024
        out[f"returned_after_{r.name}"] = (top - r.rss_kb) / max(top - ready_kb, MIN_GROWTH_KB)
        top = max(top, r.rss_kb)
    out["phases"] = [{"name": r.name, "t_start": round(r.t_start, 3), "t_end": round(r.t_end, 3)}
                     for r in [load, *phases]]
    return out


class PhaseFailed(Exception):
    pass


def _argv(server, command: tuple[str, ...]) -> list[str]:
    """A command with the server's placeholders, as the experiment's user. (experiment_file
    imports this module to parse the file, hence the import here, not at the top.)"""
    from alloclab.workloads.experiment_file import substitute_argv
    return server.s.identity.argv(substitute_argv(command, server.values()))


def idle_seconds(p: Phase, values: dict) -> float:
    if not isinstance(p.idle, str):
        return p.idle
    from alloclab.workloads.experiment_file import substitute
    text = substitute(p.idle, values)
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if seconds < 0:
        raise PhaseFailed(f"phase '{p.name}': idle = \"{p.idle}\" gave '{text}', which is not a number of seconds; "
                          f"pass a number (--param).")
    return seconds


def run_phases(server, load: "Load", run_command, env: dict, cwd: Path, sample_s: float) -> list[Reading]:
    """Each phase's command (as the experiment's user, never under the variant), its rest, and
    the reading after it. Stops at the first failure (PhaseFailed), or when the server dies."""
    readings = []
    for i, p in enumerate(load.phases):
        t_start = time.perf_counter() - server.tree.t0
        if p.command:
            argv = _argv(server, p.command)
            done = run_command(argv, env, cwd, p.timeout, server.dir / f"phase-{i}", tick=server.sample)
            if done.code != 0:
                why = f"timed out after {p.timeout:g} s" if done.timed_out else f"exited with status {done.code}"
                raise PhaseFailed(f"phase '{p.name}': `{' '.join(argv)}` {why}. Output tail:\n"
                                  + output_tail(done.output))
        t_end = time.perf_counter() + idle_seconds(p, server.values())
        while time.perf_counter() < t_end and not server.done.is_set():
            server.sample()
            server.done.wait(sample_s)
        if server.done.is_set():
            raise PhaseFailed(f"the service exited ({server.exit_text()}) during phase '{p.name}'")
        server.sample(pss=True)
        tree = server.tree
        readings.append(Reading(p.name, t_start, time.perf_counter() - tree.t0, tree.last_kb,
                                tree.pss_last_kb if tree.pss_ok else None))
    return readings


def run_warmup(server, load: "Load", run_command, env: dict, cwd: Path) -> None:
    """The warm-up; its output is kept beside the server's logs only. Raises PhaseFailed."""
    w = load.warmup
    if w.seconds is not None:
        argv = _argv(server, load.command)
        # Stopped at the deadline on purpose: a timeout here is the normal end.
        done = run_command(argv, env, cwd, w.seconds, server.dir / "warmup", tick=server.sample)
        if not done.timed_out and done.code != 0:
            raise PhaseFailed(f"the warm-up ({w.describe()}) exited with status {done.code}. Output tail:\n"
                              + output_tail(done.output))
        return
    for i, cmd in enumerate(w.commands):
        argv = _argv(server, cmd)
        done = run_command(argv, env, cwd, load.timeout, server.dir / f"warmup-{i}", tick=server.sample)
        if done.code != 0:
            why = "timed out" if done.timed_out else f"exited with status {done.code}"
            raise PhaseFailed(f"the warm-up command `{' '.join(argv)}` {why}. Output tail:\n"
                              + output_tail(done.output))
