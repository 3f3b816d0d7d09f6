"""Which programs ran under the allocator in each run, and whether the named program is what ran.

A command named `python3` may be a pyenv shim: a bash script that runs a dozen shells, env and
coreutils before it execs the real interpreter, every one of them under the preloaded allocator.
Their start-up costs (an allocator's initialisation, its first faults) then carry the comparison:
tcmalloc measured +55% on the shim and +4% on the interpreter itself. The sampler stores, per run,
every process it saw with its image (/proc/PID/exe) and its own CPU and faults at the last sample
(measure/run.py, ProcessSeen); a process shorter than a sample is missed, so every share here is
"as far as was seen": the program's own share is a lower bound.
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
from dataclasses import dataclass

from alloclab.store.db import Experiment
from alloclab.store.model import Run

# Programs that start other programs or do a shim's plumbing, never the work being measured:
# shells, the launchers people put in front of a command, and the coreutils shims call.
WRAPPERS = frozenset({
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "fish", "busybox",
    "env", "nice", "ionice", "nohup", "setsid", "stdbuf", "taskset", "timeout", "time", "chrt", "numactl",
    "sudo", "su", "runuser", "setpriv", "xargs",
    "basename", "dirname", "readlink", "realpath", "cat", "head", "tail", "sed", "awk", "gawk", "mawk",
    "grep", "cut", "tr", "uname", "id", "mkdir", "rm", "ls", "which", "expr", "sort", "uniq", "date",
    "mktemp", "touch", "ln", "cp", "mv", "chmod", "test", "[", "true", "false", "sleep",
})
DOMINANT = 0.5   # wrappers "carry" a run when the program itself accounts for under half of it


@dataclass
class VariantPrograms:
    """One variant's runs of one workload."""
    label: str
    per_run: dict[str, float]      # image -> median processes per run
    program_cpu: float | None      # the program images' share of the run's CPU (seen), median
    program_faults: float | None   # ... of the run's minor faults


@dataclass
class Wrapped:
    workload: str
    programs: list[str]            # the non-wrapper images, most faults first
    program_exe: str | None        # the path of the first, to measure it directly
    cells: list[VariantPrograms]
    dominated: bool                # the wrappers carry most of a variant's runs

    def command(self, argv: list[str]) -> str | None:
        return shlex.join([self.program_exe, *argv[1:]]) if self.program_exe else None


@dataclass(frozen=True)
class Seen:
    """A process of a run as the sampler stored it (measure/run.py, ProcessSeen, as JSON); a store
    written before images, CPU and faults were recorded lacks them."""
    name: str
    exe: str | None = None
    mapped: bool | None = None
    cpu_s: float | None = None
    minflt: int | None = None

    @classmethod
    def of(cls, p: dict) -> "Seen":
        return cls(p["name"], p.get("exe"), p.get("mapped"), p.get("cpu_s"), p.get("minflt"))


def image(p: Seen) -> str:
    return os.path.basename(p.exe) if p.exe else p.name


def _runs(exp: Experiment, wi: int, vi: int) -> list[tuple[Run, list[Seen]]]:
    out = []
    for r in exp.cell_runs(wi, vi):
        text = r.processes or "[]"
        if r.status != "ok" or text.count('"pid"') < 2:   # one process: no wrapper to find
            continue
        procs = [p for p in map(Seen.of, json.loads(text)) if p.mapped is not False]
        out.append((r, procs))
    return out


def _share(values: list[float], totals: list[float]) -> float | None:
    pairs = [(v / t) for v, t in zip(values, totals) if t]
    return min(1.0, statistics.median(pairs)) if pairs else None


def wrapped(exp: Experiment, labels: list[str], wi: int, name: str) -> Wrapped | None:
    """What ran under each variant of workload `wi` (`name`), when more than one program did; None
    otherwise. The analysis reads it once per workload (stats/analysis.py, WorkloadResult.wrapped)."""
    runs = {vi: _runs(exp, wi, vi) for vi in range(len(labels))}
    images = {image(p) for rs in runs.values() for _, procs in rs for p in procs}
    if len(images) < 2:
        return None
    faults: dict[str, int] = {}
    exe: dict[str, str] = {}
    for rs in runs.values():
        for _, procs in rs:
            for p in procs:
                faults[image(p)] = faults.get(image(p), 0) + (p.minflt or 0)
                exe.setdefault(image(p), p.exe)
    programs = sorted((i for i in images if i not in WRAPPERS), key=lambda i: -faults.get(i, 0))
    cells = []
    for vi, rs in runs.items():
        if not rs:
            continue
        counts = {i: statistics.median([sum(1 for p in procs if image(p) == i) for _, procs in rs]) for i in images}
        own = [[p for p in procs if image(p) in programs] for _, procs in rs]
        timed = any(p.cpu_s is not None for _, procs in rs for p in procs)
        cpu = _share([sum(p.cpu_s or 0 for p in ps) for ps in own],
                     [r.metrics.get("cpu_s", 0) for r, _ in rs]) if timed else None
        flt = _share([sum(p.minflt or 0 for p in ps) for ps in own],
                     [r.metrics.get("minflt", 0) for r, _ in rs]) if timed else None
        cells.append(VariantPrograms(labels[vi], {i: c for i, c in sorted(counts.items(), key=lambda x: -x[1]) if c}, cpu, flt))
    wrappers_per_run = [sum(n for i, n in c.per_run.items() if i in WRAPPERS) for c in cells]
    dominated = bool(programs) and any(
        (c.program_faults is not None and c.program_faults < DOMINANT) or
        (c.program_faults is None and n >= 2 and n > sum(c.per_run.get(i, 0) for i in programs))
        for c, n in zip(cells, wrappers_per_run))
    return Wrapped(name, programs, exe.get(programs[0]) if programs else None, cells, dominated)
