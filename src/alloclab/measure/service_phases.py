"""What happens inside one service run around the measured load: the unmeasured warm-up before
it, the steady state of a client that prints progress, and the memory phases after it.

    ready -> warm-up (unmeasured) -> load (measured) -> idle -> phase 1 -> phase 2 ... -> stop

Kept apart from measure/service/, which starts, samples and stops servers; this module only decides
what to run between those points and what the readings mean (workloads/phases.py parses them).

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

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from alloclab.workloads.experiment_file import substitute, substitute_argv
from alloclab.workloads.phases import MIN_GROWTH_KB, Phase
from alloclab.workloads.metrics import output_tail

if TYPE_CHECKING:
    from alloclab.workloads.experiment_file import Load


@dataclass
class Reading:
    name: str
    t_start: float          # seconds since the server started (the RSS series' clock)
    t_end: float
    rss_kb: int
    pss_kb: int | None

    def span(self, t0: float | None) -> dict:
        """Its times as the run's summary line keeps them; given the server's start on the
        CLOCK_MONOTONIC clock (t0), its end on that clock too, where the fingerprint's series is read."""
        t_end = round(self.t_end, 3)
        out = {"name": self.name, "t_start": round(self.t_start, 3), "t_end": t_end}
        return out if t0 is None else out | {"end_monotonic_s": round(t0 + t_end, 4)}


def phase_summary(ready_kb: int, load: Reading, phases: list[Reading], t0: float | None = None) -> dict:
    """Metrics of the phases. `returned_after_X` is the share of what the server grew by (from
    readiness to its highest reading at load end or at an earlier phase) that X's reading gave
    back: 1.0 = back to the size at readiness, 0 = nothing, negative = it grew further. Growth
    under 1 MiB counts as 1 MiB, so a server that barely grew shows about 0, not noise / noise.
    Its "phases" entry gives every reading's times (Reading.span)."""
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
    return out | {"phases": [r.span(t0) for r in [load, *phases]]}


class PhaseFailed(Exception):
    pass


def _argv(server, command: tuple[str, ...]) -> list[str]:
    """A command with the server's placeholders, as the experiment's user."""
    return server.s.identity.argv(substitute_argv(command, server.values()))


def idle_seconds(p: Phase, values: dict) -> float:
    if not isinstance(p.idle, str):
        return p.idle
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
        t_end = time.perf_counter() + max(idle_seconds(p, server.values()), server.settle_s)
        while time.perf_counter() < t_end and not server.done.is_set():
            server.sample()
            server.done.wait(sample_s)
        if server.done.is_set():
            raise PhaseFailed(f"the service exited ({server.exit_text()}) during phase '{p.name}'")
        server.await_fingerprint()
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
