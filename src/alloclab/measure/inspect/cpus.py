"""The CPUs a process may use, as the kernel lets it: its affinity (/proc/PID/status
Cpus_allowed_list) and its cgroup's CPU quota (cgroup v2 `cpu.max`, v1 `cpu.cfs_quota_us` over
`cpu.cfs_period_us`, the tightest of its cgroup and every parent). Not alloclab's own
os.cpu_count(): a service pinned to one CPU, or in a container allowed two, runs no more threads at
once than that, whatever the host has. The roots are parameters, so that a test can lay out its own."""

from __future__ import annotations

import math
import os

from alloclab.measure.inspect.procfs import text_or_none as _read


def cpu_list(text: str) -> int:
    """The CPUs of a list such as "0-3,8,10-11"."""
    n = 0
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        n += int(hi or lo) - int(lo) + 1
    return n


def _quota(cg: str, path: str, v2: bool) -> float | None:
    """The tightest quota (CPUs) of a cgroup and its parents."""
    best = None
    parts = [p for p in path.strip("/").split("/") if p]
    for i in range(len(parts), -1, -1):
        d = os.path.join(cg, *parts[:i])
        if v2:
            text = _read(os.path.join(d, "cpu.max"))
            if text is None or text.split()[0] == "max":
                continue
            quota, period = (int(x) for x in text.split()[:2])
        else:
            q, p = _read(os.path.join(d, "cpu.cfs_quota_us")), _read(os.path.join(d, "cpu.cfs_period_us"))
            if q is None or p is None or int(q) <= 0:
                continue
            quota, period = int(q), int(p)
        if period > 0:
            best = min(best, quota / period) if best is not None else quota / period
    return best


def usable(pid: int, proc: str = "/proc", cgroup: str = "/sys/fs/cgroup") -> tuple[int | None, str]:
    """The CPUs the process may use, and how that was told in words; (None, why) where neither its
    affinity nor a quota could be read."""
    status = _read(f"{proc}/{pid}/status") or ""
    allowed = next((ln.split(":", 1)[1].strip() for ln in status.splitlines() if ln.startswith("Cpus_allowed_list:")),
                   None)
    n = cpu_list(allowed) if allowed else None
    return bounded(n, [f"its affinity allows {n} (CPUs {allowed})"] if n is not None else [], pid, proc, cgroup)


def bounded(n: int | None, words: list[str], pid: int, proc: str = "/proc",
            cgroup: str = "/sys/fs/cgroup") -> tuple[int | None, str]:
    """n CPUs (an affinity's), bounded by the CPU quota of pid's cgroup, with how that was told."""
    quota = None
    for line in (_read(f"{proc}/{pid}/cgroup") or "").splitlines():
        hid, controllers, path = line.split(":", 2)
        if hid == "0" and controllers == "":
            quota = _quota(cgroup, path, v2=True)
        elif "cpu" in controllers.split(","):
            q = _quota(os.path.join(cgroup, controllers), path, v2=False)
            if q is None:
                q = _quota(os.path.join(cgroup, "cpu"), path, v2=False)
            quota = q
        if quota is not None:
            words = [*words, f"its cgroup's quota {quota:g} CPUs ({path.strip() or '/'})"]
            break
    if quota is not None:
        q = max(1, math.ceil(quota - 1e-9))
        n = min(n, q) if n is not None else q
    return n, "; ".join(words) if words else "neither its affinity nor a cgroup quota could be read"


def program_cpus(allowed: list[int], pid: int | None = None, proc: str = "/proc",
                 cgroup: str = "/sys/fs/cgroup") -> tuple[int | None, str]:
    """The CPUs a program alloclab ran may use: the fewest its processes' affinities allowed (the
    interposer's reading; 0 where it had none), bounded by the quota of the cgroup alloclab runs in,
    which its children share (`pid`: alloclab's own by default)."""
    known = [n for n in allowed if n > 0]
    n = min(known) if known else None
    return bounded(n, [f"its affinity allows {n}"] if n is not None else [], os.getpid() if pid is None else pid,
                   proc, cgroup)
