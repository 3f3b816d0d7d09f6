"""The /proc process-tree sampler of a server: per-process CPU, faults, RSS and PSS, with per-run
windows, on top of measure.run's TreeSampler."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import psutil

from alloclab.measure.run import TreeSampler

SAMPLE_S = 0.05
PSS_EVERY_S = 0.5
WRAPPERS = frozenset({"setpriv", "env", "runuser"})
_TICK = os.sysconf("SC_CLK_TCK")
_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


# --- /proc -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ProcStat:
    ppid: int
    state: str
    user_s: float
    sys_s: float
    minflt: int
    majflt: int
    rss_kb: int
    # Of its children that it has reaped (wait4 rusage counts them in the parent from then on).
    child_user_s: float = 0.0
    child_sys_s: float = 0.0
    child_minflt: int = 0
    child_majflt: int = 0

    def minus(self, other: "ProcStat | None") -> tuple[float, float, int, int]:
        if other is None:
            return self.user_s, self.sys_s, self.minflt, self.majflt
        return (max(0.0, self.user_s - other.user_s), max(0.0, self.sys_s - other.sys_s),
                max(0, self.minflt - other.minflt), max(0, self.majflt - other.majflt))


def read_stat(pid: int) -> ProcStat | None:
    """CPU (all threads), faults, parent and RSS of one process from /proc/PID/stat."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode(errors="replace")
    except OSError:
        return None
    f = raw[raw.rfind(")") + 2:].split()
    # Fields after "(comm)", counted from 3 in proc(5): state ppid ... minflt(10) majflt(12) utime(14) stime(15) rss(24)
    return ProcStat(int(f[1]), f[0], int(f[11]) / _TICK, int(f[12]) / _TICK, int(f[7]), int(f[9]),
                    int(f[21]) * _PAGE_KB, int(f[13]) / _TICK, int(f[14]) / _TICK, int(f[8]), int(f[10]))


def read_pss_kb(pid: int) -> int | None:
    """PSS of one process; None if it is gone (or a zombie). PermissionError when not ours to read."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            for line in fh:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1])
    except PermissionError:
        raise
    except (OSError, ValueError, IndexError):
        return None
    return None


class ProcTree(TreeSampler):
    """TreeSampler plus per-process CPU, faults and PSS, with per-run windows."""

    def __init__(self, root_pid: int, mapped_marker: str | None):
        super().__init__(root_pid, mapped_marker)
        self.stat: dict[int, ProcStat] = {}
        self.max_proc_kb = 0
        self.pss_peak_kb = self.pss_last_kb = 0
        self.pss_ok = True
        self._pss_at = 0.0
        self.begin_window()

    def begin_window(self) -> None:
        self.win_stat = dict(self.stat)
        self.win_peak_kb = self.win_max_proc_kb = self.win_pss_peak_kb = 0
        self.win_series: list[tuple[float, int]] = []
        self.win_samples = 0

    def _note_process(self, proc: psutil.Process) -> None:
        # A wrapper (setpriv, env) execs into the server: judge the server, not the wrapper.
        try:
            if proc.name() in WRAPPERS:
                return
        except psutil.Error:
            return
        super()._note_process(proc)

    def sample(self, pss: bool = False) -> None:
        """One look at the tree; `pss` is a reading the run reports (ready, after the load, after
        a phase), so it also looks for descendants started since the last scan."""
        self._refresh_tree(force=pss)
        total = 0
        for pid, proc in list(self.known.items()):
            st = read_stat(pid)
            if st is None:
                del self.known[pid]
                continue
            self.stat[pid] = st
            if st.state in ("Z", "X"):
                continue  # exited, not yet reaped: no memory, and no maps to judge
            total += st.rss_kb
            self.max_proc_kb = max(self.max_proc_kb, st.rss_kb)
            self.win_max_proc_kb = max(self.win_max_proc_kb, st.rss_kb)
            self._note_process(proc)
            self.count(pid, st.user_s + st.sys_s, st.minflt)
        self.samples += 1
        self.win_samples += 1
        if total:
            self.last_kb = total
            self.peak_kb = max(self.peak_kb, total)
            self.win_peak_kb = max(self.win_peak_kb, total)
            point = (round(time.perf_counter() - self.t0, 4), total)
            self.series.append(point)
            self.win_series.append(point)
        now = time.perf_counter()
        if pss or now - self._pss_at >= PSS_EVERY_S:
            self._pss_at = now
            self._sample_pss()

    def _sample_pss(self) -> None:
        total, read_any = 0, False
        for pid in list(self.known):
            st = self.stat.get(pid)
            if st is None or st.state in ("Z", "X"):
                continue
            try:
                kb = read_pss_kb(pid)
            except PermissionError:
                self.pss_ok = False  # not ours to read: report no PSS rather than a wrong one
                continue
            if kb is None:
                continue
            total += kb
            read_any = True
        if read_any:
            self.pss_last_kb = total
            self.pss_peak_kb = max(self.pss_peak_kb, total)
            self.win_pss_peak_kb = max(self.win_pss_peak_kb, total)

    def in_chain(self, pid: int) -> bool:
        """Was the process, when last seen, still the child of a tree process (so wait4 counts it)?"""
        st = self.stat.get(pid)
        return st is not None and (st.ppid == self.root_pid or st.ppid in self.stat)

    def orphan_usage(self) -> tuple[float, float, int, int]:
        u = s = 0.0
        mi = ma = 0
        for pid, st in self.stat.items():
            if not self.in_chain(pid):
                u, s, mi, ma = u + st.user_s, s + st.sys_s, mi + st.minflt, ma + st.majflt
        return u, s, mi, ma

    def sampled_cpu_s(self) -> float:
        return sum(st.user_s + st.sys_s for st in self.stat.values())

    def usage_so_far(self) -> tuple[float, float, int, int]:
        """CPU and faults of the tree up to now, read from /proc now: each live process's own plus
        those of the children it reaped, so a process that exited is counted once, in its parent."""
        u = s = 0.0
        mi = ma = 0
        for pid in list(self.known):
            st = read_stat(pid)
            if st is None:
                continue
            self.stat[pid] = st
            u, s = u + st.user_s + st.child_user_s, s + st.sys_s + st.child_sys_s
            mi, ma = mi + st.minflt + st.child_minflt, ma + st.majflt + st.child_majflt
        return u, s, mi, ma

    def window_usage(self) -> tuple[float, float, int, int]:
        u = s = 0.0
        mi = ma = 0
        for pid, st in self.stat.items():
            du, ds, dmi, dma = st.minus(self.win_stat.get(pid))
            u, s, mi, ma = u + du, s + ds, mi + dmi, ma + dma
        return u, s, mi, ma
