"""What the machine looked like: recorded with every experiment, read-only (we change nothing)."""

from __future__ import annotations

import functools
import math
import os
import platform
import re
import resource
import socket
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

from alloclab import __version__
from alloclab.catalog import allocators as cat


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def cpu_model() -> str:
    text = _read("/proc/cpuinfo") or ""
    m = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    return m.group(1).strip() if m else platform.processor() or "unknown"


def thp_mode() -> str | None:
    text = _read("/sys/kernel/mm/transparent_hugepage/enabled")
    m = re.search(r"\[(\w+)\]", text or "")
    return m.group(1) if m else text


def governor() -> str | None:
    return _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def busy_cpu_s() -> float | None:
    """CPU seconds the whole machine has spent busy since boot (all CPUs, /proc/stat)."""
    line = (_read("/proc/stat") or "").partition("\n")[0].split()
    if not line or line[0] != "cpu":
        return None
    # user nice system idle iowait irq softirq steal: all but idle and iowait are busy.
    t = [int(v) for v in line[1:9]]
    return (sum(t) - t[3] - t[4]) / os.sysconf("SC_CLK_TCK")


@functools.cache
def perf_counters() -> tuple[bool, str]:
    """Can `perf stat` count hardware events here? Detected once; never an error."""
    try:
        out = subprocess.run(["perf", "stat", "-x,", "-e", "instructions", "true"],
                             capture_output=True, text=True, timeout=20)
    except FileNotFoundError:
        return False, "perf is not installed (apt-get install -y linux-perf)"
    except subprocess.TimeoutExpired:
        return False, "perf stat timed out"
    text = out.stderr + out.stdout
    if out.returncode != 0:
        return False, f"perf stat failed: {text.strip().splitlines()[-1] if text.strip() else out.returncode}"
    if "<not supported>" in text or "<not counted>" in text:
        return False, "this machine exposes no hardware performance counters (perf stat says <not supported>)"
    return True, "hardware counters available"


def snapshot(variants=()) -> dict:
    ok, why = perf_counters()
    paranoid = _read("/proc/sys/kernel/perf_event_paranoid")
    return {
        "host": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": usable_cores(),
        "kernel": platform.release(),
        "os": (re.search(r'PRETTY_NAME="([^"]+)"', _read("/etc/os-release") or "") or [None, None])[1],
        "glibc": cat.glibc_version(),
        "allocators": {v.label: v.version() for v in variants},
        "thp": thp_mode(),
        "thp_defrag": (re.search(r"\[(\w+)\]", _read("/sys/kernel/mm/transparent_hugepage/defrag") or "") or [None, None])[1],
        "governor": governor(),
        "perf_counters": ok,
        "perf_counters_note": why,
        "perf_event_paranoid": int(paranoid) if paranoid and paranoid.lstrip("-").isdigit() else None,
        "load_start": list(os.getloadavg()),
        "memory_total_mb": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024),
        "python": platform.python_version(),
        "alloclab": __version__,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


# --- other work on the machine during a run ------------------------------------------------------

def load_average() -> float:
    """The 1-minute load average, read at most once a second: the kernel updates it every five,
    and a run of a short command is far shorter than reading /proc/loadavg is worth."""
    t = time.monotonic()
    if t - _loadavg[0] >= 1.0:
        _loadavg[:] = [t, os.getloadavg()[0]]
    return _loadavg[1]


_loadavg: list[float] = [-math.inf, 0.0]


OTHER_CPU_MIN_WALL_S = 0.25   # /proc/stat counts in 10 ms ticks per CPU: shorter runs are all error


def our_cpu_s() -> float:
    """CPU of alloclab and of the children it has reaped (load clients, set-up commands)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


class OwnCpu:
    """The CPU a run uses outside its measured tree, counted from now: alloclab's and that of the
    children it reaped (a service's load clients), where `ours`; a file's background daemons' (a
    Ceph cluster's monitor and OSD, which serve every run), where `daemons` reads them."""

    def __init__(self, ours: bool, daemons=None):
        self.daemons = daemons
        self.ours0 = our_cpu_s() if ours else None
        self.daemons0 = daemons() if daemons is not None else None

    def used(self) -> float:
        return ((our_cpu_s() - self.ours0 if self.ours0 is not None else 0.0)
                + (self.daemons() - self.daemons0 if self.daemons0 is not None else 0.0))


def other_cpu(result, busy0: float | None, busy1: float | None, ours: float = 0.0) -> float | None:
    """Cores' worth of CPU that other work used during the run: the machine's busy time less the
    run's own. The load average cannot tell them apart: a run's own threads raise it too.
    None where the run is too short to tell."""
    if busy0 is None or busy1 is None or result.wall_s < OTHER_CPU_MIN_WALL_S:
        return None
    return round(max(0.0, (busy1 - busy0) - (result.user_s + result.sys_s) - ours) / result.wall_s, 3)
