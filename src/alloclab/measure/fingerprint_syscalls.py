"""The memory system calls of a fingerprint run: how many, and how many bytes they moved.

Counted for the whole process tree by `perf record` on the syscall tracepoints where perf may
open them (root, or perf_event_paranoid -1): raw_syscalls filtered in the kernel to the calls'
numbers on x86_64 and aarch64, the calls' own tracepoints elsewhere. That also gives each call's
arguments: the bytes brk grew and shrank the heap by (from the break each call returned, per
process), mmap'd anonymous and file-backed, munmap'd, madvise'd away (MADV_DONTNEED/MADV_FREE)
and mprotect'd.
Where perf cannot, `strace -f -c` counts the calls (no bytes); where neither is installed, a
line says so.

The counter is a wrapper in front of the program (for a server run as another user, in front of
the whole run_as chain: measure/service/server.py), so it keeps alloclab's rights.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from alloclab import cache

SYSCALLS = ("brk", "mmap", "munmap", "mremap", "madvise", "mprotect")
SYSCALL_FILE = "syscalls.out"   # perf.data or strace's table, by the tool
PERF_MAGIC = b"PERFILE2"
MAP_ANONYMOUS = 0x20
MADV_DONTNEED, MADV_FREE = 4, 8
# perf's buffer for the events, in pages per CPU: glibc's brk churn under PostgreSQL is tens of
# thousands of events a second, and an event lost is a call not counted.
PERF_PAGES = 1024


# The calls' numbers, where known: perf then opens two tracepoints, raw_syscalls' entry filtered in
# the kernel to these numbers and its exit to brk's, not seven (about 40 ms apiece: `true` under the
# recorder 0.19 s against 0.38 s, four times in every tune's diagnosis). 64-bit calls: a 32-bit
# process's calls have other numbers and would be counted under the wrong names; alloclab's
# interposer is 64-bit, so the fingerprint of a 32-bit program fails before its calls are read,
# but a 32-bit child of a 64-bit program would be miscounted.
SYSCALL_NR = {
    "x86_64": {"brk": 12, "mmap": 9, "munmap": 11, "mremap": 25, "madvise": 28, "mprotect": 10},
    "aarch64": {"brk": 214, "mmap": 222, "munmap": 215, "mremap": 216, "madvise": 233, "mprotect": 226},
}
# Each call's arguments in order, named as its own tracepoint names them.
ARGS = {"brk": ("brk",), "mmap": ("addr", "len", "prot", "flags", "fd", "off"), "munmap": ("addr", "len"),
        "mremap": ("addr", "old_len", "new_len", "flags", "new_addr"), "madvise": ("start", "len_in", "behavior"),
        "mprotect": ("start", "len", "prot")}


def _events() -> list[str]:
    nr = SYSCALL_NR.get(platform.machine())
    if nr is None:
        return ["-e", ",".join([*(f"syscalls:sys_enter_{s}" for s in SYSCALLS), "syscalls:sys_exit_brk"])]
    return ["-e", "raw_syscalls:sys_enter", "--filter", " || ".join(f"id == {nr[s]}" for s in SYSCALLS),
            "-e", "raw_syscalls:sys_exit", "--filter", f"id == {nr['brk']}"]


def _perf_record(out: Path, events: list[str] | None = None) -> list[str]:
    # --no-bpf-event: perf otherwise reads every loaded BPF program at its start, 1 s of a
    # fingerprint run here (1.16 s against 0.19 s for `perf record ... -- true`).
    return ["perf", "record", "-q", "--no-bpf-event", "--no-buildid", "--no-buildid-cache", "-m", str(PERF_PAGES),
            *(events or _events()), "-o", str(out), "--"]


@functools.cache
def syscall_counter() -> tuple[str | None, str]:
    """('perf' | 'strace' | None, why): what can count the tree's memory system calls here."""
    perf, strace = shutil.which("perf"), shutil.which("strace")
    key = _probe_key(perf) if perf else ""
    if perf and (kept := cache.read("probe", key)) is not None:
        return "perf", kept.decode()
    if perf:
        with tempfile.TemporaryDirectory(prefix="alloclab-sc-") as d:
            out = Path(d) / "probe.data"
            try:
                # The recording's own events and filters: what passes here is what the runs open.
                p = subprocess.run([*_perf_record(out), "true"], capture_output=True, text=True, timeout=30)
                if p.returncode == 0 and out.exists():
                    traced = ("raw_syscalls tracepoints, filtered to the memory calls"
                              if platform.machine() in SYSCALL_NR else "syscalls:sys_enter_* tracepoints")
                    how = f"perf record on the {traced} (the whole tree; bytes from the calls' arguments)"
                    cache.write("probe", key, how.encode())
                    return "perf", how
                why = " ".join(p.stderr.split())[:160] or f"status {p.returncode}"
            except (OSError, subprocess.TimeoutExpired) as exc:
                why = str(exc)
    else:
        why = "perf is not installed"
    if strace:
        return "strace", f"strace -f -c, calls only (perf's syscall tracepoints unavailable: {why})"
    return None, (f"no way to count system calls here: perf's syscall tracepoints are unavailable ({why}) "
                  f"and strace is not installed (apt-get install -y strace)")


def _probe_key(perf: str) -> str:
    """What perf's answer to the probe depends on: perf itself, the kernel, who asks, what the
    kernel lets them open, and the recording asked. A probe that passed is kept under it (it
    costs 0.2 s of every tune's start); one that failed is asked again."""
    def read(path: str) -> str:
        try:
            return Path(path).read_text().strip()
        except OSError:
            return "-"
    parts = [cache.stamp([Path(perf)]), os.uname().release, str(os.geteuid()), read("/proc/sys/kernel/perf_event_paranoid"),
             str(os.path.isdir("/sys/kernel/tracing/events/raw_syscalls")), " ".join(_perf_record(Path("-")))]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def syscall_wrapper(out: Path) -> list[str] | None:
    """The argv prefix that records the memory system calls of what it runs (and its children) in `out`."""
    tool, _ = syscall_counter()
    if tool == "perf":
        return _perf_record(out)
    if tool == "strace":
        return ["strace", "-f", "-c", "-o", str(out), "-e", "trace=" + ",".join(SYSCALLS), "--"]
    return None


def parse_syscalls(path: Path) -> tuple[dict[str, int], dict[str, int] | None, str] | None:
    """(counts per call, bytes moved or None, a note) from perf's recording or strace -c's table;
    None when there is nothing readable."""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(len(PERF_MAGIC))
    except OSError:
        return None
    if magic == PERF_MAGIC:
        return _from_perf(path)
    counts: dict[str, int] = {}
    for line in path.read_text(errors="replace").splitlines():
        f = line.split()
        if len(f) >= 5 and f[-1] in SYSCALLS and f[3].isdigit():   # % time, s, us/call, calls, [errors,] name
            counts[f[-1]] = int(f[3])
    return ({s: counts.get(s, 0) for s in SYSCALLS}, None, "") if counts else None


_LINE = re.compile(r"^\s*(\d+)(?:/(\d+))?\s+syscalls:sys_(enter|exit)_(\w+):\s*(.*)$")
_ARG = re.compile(r"(\w+): (0x[0-9a-f]+)")
# raw_syscalls: "NR 9 (0, 2000, 3, 22, ffffffff, 0)" (hex arguments) and "NR 12 = 94070839508992"
_RAW = re.compile(r"^\s*(\d+)(?:/(\d+))?\s+raw_syscalls:sys_(enter|exit):\s*NR (\d+) (?:\((.*)\)|= (-?\d+))")


def _script(path: Path, extra: tuple[str, ...] = ()) -> tuple[list[str], str] | None:
    """The recording's lines (`perf script -F pid,tid,event,trace`) and the note on lost events."""
    try:
        # --kallsyms /dev/null: the fields asked name no kernel symbol, and perf otherwise reads
        # /proc/kallsyms three times (0.084 s against 0.013 s for a run of oversized, same bytes).
        for quick in (["--kallsyms", "/dev/null"], []):   # a perf without the option: as before
            p = subprocess.run(["perf", "script", *quick, *extra, "-i", str(path), "-F", "pid,tid,event,trace"],
                               capture_output=True, text=True, timeout=300)
            if p.returncode == 0:
                break
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode != 0:
        return None
    lost = re.search(r"lost (\d+) chunks", p.stderr)
    note = f"perf lost {lost.group(1)} chunks of events: the counts are lower bounds" if lost else ""
    return p.stdout.splitlines(), note


def _from_perf(path: Path) -> tuple[dict[str, int], dict[str, int], str] | None:
    got = _script(path)
    if got is None:
        return None
    lines, note = got
    counts, moved = tally(lines)
    return counts, moved, note


_TASK = re.compile(r"PERF_RECORD_FORK\((\d+):\d+\):\((\d+):\d+\)")
_PID = re.compile(r"^\s*(\d+)")


def split_by_run(lines, launches: list[tuple[int, object]]) -> dict[object, list[str]]:
    """One recording of several runs (a SharedRecorder's) as each run's lines. `launches`: every
    child the launcher forked, in order, as (its pid, or 0 where its exec failed; the run's key,
    or None for no run: the recorder's own probe, a run that failed). Everything perf traced
    descends from the launcher, the parent of the first FORK record (the probe's), so its k-th
    fork is the k-th launch (the pid confirms it; a launch whose FORK perf lost is skipped), and
    any other process belongs to whoever forked it, last, under that pid. The launcher's own
    calls are no run's."""
    launcher, k = None, 0
    owner: dict[int, object] = {}
    out: dict[object, list[str]] = {key: [] for _, key in launches if key is not None}
    for line in lines:
        if "PERF_RECORD_" in line:
            m = _TASK.search(line)
            if m:
                pid, parent = int(m.group(1)), int(m.group(2))
                if pid == parent:
                    continue   # a thread: its process's already
                if launcher is None:
                    launcher = parent
                if parent == launcher:
                    owner[pid] = None
                    while k < len(launches):
                        launched, key = launches[k]
                        k += 1
                        if launched in (0, pid):
                            owner[pid] = key
                            break
                else:
                    owner[pid] = owner.get(parent)
            continue
        m = _PID.match(line)
        if m and (key := owner.get(int(m.group(1)))) is not None:
            out[key].append(line)
    return out


class SharedRecorder:
    """One `perf record` around a launcher of its own (measure/spawner.py), for a command's
    fingerprint runs one after another: perf starts once, where a recorder per run read
    /proc/kallsyms four times as it started (0.18 s of each run of a short program, against 0.02-0.1
    s of the program itself), and each run's calls are told apart by its process tree
    (split_by_run). Started with a run of `true` through it: a recorder that cannot start is None,
    and each run then gets its own (syscall_wrapper), as does every run after one that failed."""

    def __init__(self, out: Path, workdir: Path):
        from alloclab.measure import spawner
        from alloclab.measure.run import run_once

        self.out = out
        perf = shutil.which("perf") or "perf"
        self.launcher = spawner.Spawner(prefix=(perf, *_perf_record(out)[1:]),
                                        env={k: v for k, v in os.environ.items() if k in ("PATH", "HOME")})
        self.keys: dict[int, object] = {}   # the run of each launch, by its place in launcher.launched
        probe = run_once([shutil.which("true") or "/bin/true"], {}, workdir, timeout_s=30, launcher=self.launcher)
        if probe.status != "ok":
            self.stop()
            raise OSError(f"perf record did not start the launcher ({probe.error or probe.status})")

    @classmethod
    def start(cls, out: Path, workdir: Path) -> SharedRecorder | None:
        from alloclab.errors import AlloclabError
        try:
            return cls(out, workdir)
        except (OSError, ValueError, AlloclabError):
            return None

    def alive(self) -> bool:
        return self.launcher.alive()

    def ran(self, pid: int, key: object) -> None:
        """A run started through the launcher, as pid: its tree is `key`'s."""
        launched = self.launcher.launched or []
        for i in range(len(launched) - 1, -1, -1):
            if launched[i] == pid and pid:
                self.keys[i] = key
                return

    def stop(self) -> None:
        """The launcher told to end (its input closed), and perf with it, its recording written."""
        proc = self.launcher.proc
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)   # perf writes what it has on SIGINT
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)   # its session: perf and the launcher
                proc.wait()
        proc.stdout.close()

    def parsed(self) -> dict[object, tuple[dict[str, int], dict[str, int], str]]:
        """Each run's counts, bytes and note (stop() first); {} when the recording is unreadable."""
        got = _script(self.out, ("--show-task-events",))
        if got is None:
            return {}
        lines, note = got
        launches = [(pid, self.keys.get(i)) for i, pid in enumerate(self.launcher.launched or [])]
        return {key: (*tally(own), note) for key, own in split_by_run(lines, launches).items()}


def forget_probe() -> None:
    """perf failed where its probe had passed: ask again next time (a kept answer may be stale)."""
    perf = shutil.which("perf")
    if perf:
        cache.forget("probe", _probe_key(perf))
    syscall_counter.cache_clear()


def tally(lines) -> tuple[dict[str, int], dict[str, int]]:
    """Counts and bytes from `perf script -F pid,tid,event,trace` lines. brk's bytes are the differences
    between the breaks it returned, per process. brk(0) only asks where the break is: it moves
    nothing and starts the count afresh, which is what each new image of a pid does first (the
    server's launch chain, setpriv and env, execs into it under the same pid, each image with a
    break of its own). A forked child's first call has no break of its own to start from, so only
    the calls after it count bytes."""
    counts = {s: 0 for s in SYSCALLS}
    moved = {k: 0 for k in ("brk_grown", "brk_shrunk", "mmap_anon", "mmap_file", "munmap", "madvise_released",
                            "madvise_other", "mprotect")}
    last_break: dict[int, int] = {}
    asked: dict[int, int] = {}   # the break each thread's brk call in flight asked for
    for pid, tid, edge, name, args in _calls(lines):
        if edge == "exit":
            if name == "brk":
                brk = args.get("ret", 0)
                prev = None if asked.pop(tid, None) == 0 else last_break.get(pid)
                if prev is not None and brk:
                    moved["brk_grown" if brk > prev else "brk_shrunk"] += abs(brk - prev)
                if brk:
                    last_break[pid] = brk
            continue
        if name not in counts:
            continue
        counts[name] += 1
        if name == "brk":
            asked[tid] = args.get("brk", 0)
        elif name == "mmap":
            moved["mmap_anon" if args.get("flags", 0) & MAP_ANONYMOUS else "mmap_file"] += args.get("len", 0)
        elif name == "madvise":
            released = args.get("behavior") in (MADV_DONTNEED, MADV_FREE)
            moved["madvise_released" if released else "madvise_other"] += args.get("len_in", 0)
        elif name in ("munmap", "mprotect"):   # their bytes go under the call's name
            moved[name] += args.get("len", 0)
    return counts, moved


def _calls(lines):
    """(pid, tid, "enter" | "exit", call, its arguments by name, or {"ret": value} at an exit) of
    each line of either recording: the named tracepoints' or raw_syscalls'."""
    names = {nr: name for name, nr in SYSCALL_NR.get(platform.machine(), {}).items()}
    for line in lines:
        m = _LINE.match(line)
        if m:
            pid, edge, name, rest = int(m.group(1)), m.group(3), m.group(4), m.group(5)
            if edge == "exit":
                args = {"ret": int(rest.split()[0], 16) if rest.strip() else 0}
            else:
                args = {k: int(v, 16) for k, v in _ARG.findall(rest)}
            yield pid, int(m.group(2) or pid), edge, name, args
            continue
        m = _RAW.match(line)
        if m and int(m.group(4)) in names:
            pid, edge, name = int(m.group(1)), m.group(3), names[int(m.group(4))]
            if edge == "exit":
                args = {"ret": max(0, int(m.group(6) or 0))}
            else:
                values = [int(v, 16) for v in (m.group(5) or "").split(", ") if v]
                args = dict(zip(ARGS[name], values))
            yield pid, int(m.group(2) or pid), edge, name, args
