"""Can perf sample here, and how: is it installed, what kernel.perf_event_paranoid and our
privileges let it see (alloclab changes no sysctl), which event at which frequency; and the
`perf record` and `perf script` command lines.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from alloclab.measure import machine
from alloclab.errors import AlloclabError
from alloclab.measure.perfstat import DEFAULT_FREQUENCY  # noqa: F401  (defined there: the CLI reads it at start)
from alloclab.measure.profile.attribution import SCRIPT_FIELDS

# The call-graph unwinder. Frame pointers stop at the first libc frame (Debian builds glibc
# without them), which hides who asked for a brk or took a fault; DWARF unwinding sees through.
CALL_GRAPH = "dwarf"
PARANOID_FILE = "/proc/sys/kernel/perf_event_paranoid"
PERF_INSTALL = "apt-get install -y linux-perf"
CAP_SYS_ADMIN, CAP_PERFMON = 21, 38


# --- can perf sample here? -------------------------------------------------------------------------

@dataclass(frozen=True)
class PerfAccess:
    perf: str
    kernel_visible: bool
    note: str | None = None


def read_int(path: str = PARANOID_FILE) -> int | None:
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


def privileged() -> bool:
    """Root, or CAP_PERFMON / CAP_SYS_ADMIN: perf_event_paranoid does not apply."""
    if os.geteuid() == 0:
        return True
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                caps = int(line.split()[1], 16)
                return bool(caps & (1 << CAP_PERFMON) or caps & (1 << CAP_SYS_ADMIN))
    except (OSError, ValueError, IndexError):
        pass
    return False


def perf_access(paranoid: int | None = None, is_privileged: bool | None = None,
                which: Callable[[str], str | None] = shutil.which) -> PerfAccess:
    """Is perf installed and allowed to sample our own processes? alloclab changes no sysctl."""
    perf = which("perf")
    if not perf:
        raise AlloclabError(
            f"perf is not installed, so alloclab cannot sample where the CPU goes. Install it with "
            f"`{PERF_INSTALL}` (as root; on Ubuntu: apt-get install -y linux-tools-common "
            f"linux-tools-$(uname -r)), then run the command again.")
    paranoid = read_int(PARANOID_FILE) if paranoid is None else paranoid
    is_privileged = privileged() if is_privileged is None else is_privileged
    if is_privileged or paranoid is None or paranoid <= 1:
        return PerfAccess(perf, True)
    if paranoid == 2:
        return PerfAccess(perf, False, (
            "kernel.perf_event_paranoid is 2, which lets perf sample user space only: the kernel "
            "memory-management share (page faults, brk, mmap, munmap, madvise) is not measured. To "
            "include it, run as root or lower it yourself with `sysctl -w kernel.perf_event_paranoid=1` "
            "(as root); alloclab will not change it."))
    raise AlloclabError(
        f"kernel.perf_event_paranoid is {paranoid}, which forbids perf for unprivileged users, so "
        f"alloclab cannot profile. Run as root, or lower it yourself with `sysctl -w "
        f"kernel.perf_event_paranoid=1` (as root; 2 allows user-space samples only). alloclab will "
        f"not change this setting.")


def sampling_event(access: PerfAccess) -> str:
    """cycles where the machine has hardware counters, cpu-clock (a timer) where it has not."""
    event = "cycles" if machine.perf_counters()[0] else "cpu-clock"
    return event if access.kernel_visible else f"{event}:u"


def check_frequency(frequency: int) -> None:
    limit = read_int("/proc/sys/kernel/perf_event_max_sample_rate")
    if frequency < 1 or (limit and frequency > limit):
        raise AlloclabError(
            f"--frequency {frequency} is out of range: give 1 to {limit or 'the kernel limit'} samples per "
            f"second (kernel.perf_event_max_sample_rate); {DEFAULT_FREQUENCY} is the default.")


# --- the command lines ---------------------------------------------------------------------------

def wrap_perf_record(argv: list[str], env: dict[str, str], variant_env: dict[str, str], out: Path, *,
                     event: str, frequency: int, call_graph: bool,
                     perf: str = "perf") -> tuple[list[str], dict[str, str]]:
    """perf runs without the variant's settings; `env` hands them to the program alone."""
    clean = {k: v for k, v in env.items() if k not in variant_env}
    settings = [f"{k}={v}" for k, v in variant_env.items()]
    wrapped = [*perf_record_prefix(out, event=event, frequency=frequency, call_graph=call_graph, perf=perf),
               "env", *settings, *argv]
    return wrapped, clean


def perf_record_prefix(out: Path, *, event: str, frequency: int, call_graph: bool, perf: str = "perf") -> list[str]:
    """`perf record ... -o OUT --`, to put in front of the program."""
    graph = ["--call-graph", CALL_GRAPH] if call_graph else []
    # No BPF program symbols (reading them costs perf about a second per run) and no build-id
    # cache: the data is read back at once, and ~/.debug is not filled with copies of binaries.
    return [perf, "record", "-q", "--no-bpf-event", "--no-buildid", "--no-buildid-cache", "-e", event,
            "-F", str(frequency), *graph, "-o", str(out), "--"]


def perf_script(perf: str, data: Path, timeout_s: float = 600) -> list[str]:
    # perf refuses a file that neither we nor root own unless forced: a server run as another
    # user (run_as) writes its perf.data as that user.
    force = ["--force"] if data.stat().st_uid not in (os.geteuid(), 0) else []
    try:
        proc = subprocess.run([perf, "script", *force, "--no-inline", "-F", SCRIPT_FIELDS, "-i", str(data)],
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise AlloclabError(f"`perf script` took over {timeout_s:g} s on {data}; profile a shorter run or "
                            f"lower --frequency.") from None
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-3:]
        raise AlloclabError(f"`perf script` could not read {data}: {' / '.join(tail) or proc.returncode}. "
                            f"Check that perf matches the running kernel ({PERF_INSTALL}).")
    return proc.stdout.splitlines()
