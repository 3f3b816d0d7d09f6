"""The memory system calls of a fingerprint run: how many, and how many bytes they moved.

Counted for the whole process tree by `perf record` on the syscall tracepoints where perf may
open them (root, or perf_event_paranoid -1), which also gives each call's arguments: the bytes
brk grew and shrank the heap by (from the break each call returned, per process), mmap'd
anonymous and file-backed, munmap'd, madvise'd away (MADV_DONTNEED/MADV_FREE) and mprotect'd.
Where perf cannot, `strace -f -c` counts the calls (no bytes); where neither is installed, a
line says so.

The counter is a wrapper in front of the program (for a server run as another user, in front of
the whole run_as chain: measure/service/server.py), so it keeps alloclab's rights.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

SYSCALLS = ("brk", "mmap", "munmap", "mremap", "madvise", "mprotect")
SYSCALL_FILE = "syscalls.out"   # perf.data or strace's table, by the tool
PERF_MAGIC = b"PERFILE2"
MAP_ANONYMOUS = 0x20
MADV_DONTNEED, MADV_FREE = 4, 8
# perf's buffer for the events, in pages per CPU: glibc's brk churn under PostgreSQL is tens of
# thousands of events a second, and an event lost is a call not counted.
PERF_PAGES = 1024


def _events() -> str:
    return ",".join([*(f"syscalls:sys_enter_{s}" for s in SYSCALLS), "syscalls:sys_exit_brk"])


def _perf_record(out: Path, events: str | None = None) -> list[str]:
    # --no-bpf-event: perf otherwise reads every loaded BPF program at its start, 1 s of a
    # fingerprint run here (1.16 s against 0.19 s for `perf record ... -- true`).
    return ["perf", "record", "-q", "--no-bpf-event", "--no-buildid", "--no-buildid-cache", "-m", str(PERF_PAGES),
            "-e", events or _events(), "-o", str(out), "--"]


@functools.cache
def syscall_counter() -> tuple[str | None, str]:
    """('perf' | 'strace' | None, why): what can count the tree's memory system calls here."""
    perf, strace = shutil.which("perf"), shutil.which("strace")
    if perf:
        with tempfile.TemporaryDirectory(prefix="alloclab-sc-") as d:
            out = Path(d) / "probe.data"
            try:
                # One tracepoint of the family answers for all (the same permission): perf opens
                # each one it is given, about 40 ms apiece (0.17 s against 0.44 s for all seven).
                p = subprocess.run([*_perf_record(out, "syscalls:sys_enter_brk"), "true"], capture_output=True,
                                   text=True, timeout=30)
                if p.returncode == 0 and out.exists():
                    return "perf", ("perf record on the syscalls:sys_enter_* tracepoints (the whole tree; "
                                    "bytes from the calls' arguments)")
                why = " ".join(p.stderr.split())[:160] or f"status {p.returncode}"
            except (OSError, subprocess.TimeoutExpired) as exc:
                why = str(exc)
    else:
        why = "perf is not installed"
    if strace:
        return "strace", f"strace -f -c, calls only (perf's syscall tracepoints unavailable: {why})"
    return None, (f"no way to count system calls here: perf's syscall tracepoints are unavailable ({why}) "
                  f"and strace is not installed (apt-get install -y strace)")


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


def _from_perf(path: Path) -> tuple[dict[str, int], dict[str, int], str] | None:
    try:
        p = subprocess.run(["perf", "script", "-i", str(path), "-F", "pid,tid,event,trace"],
                           capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode != 0:
        return None
    counts, moved = tally(p.stdout.splitlines())
    lost = re.search(r"lost (\d+) chunks", p.stderr)
    note = f"perf lost {lost.group(1)} chunks of events: the counts are lower bounds" if lost else ""
    return counts, moved, note


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
    for line in lines:
        m = _LINE.match(line)
        if not m:
            continue
        pid, edge, name, rest = int(m.group(1)), m.group(3), m.group(4), m.group(5)
        tid = int(m.group(2) or pid)
        if edge == "exit":
            if name == "brk":
                brk = int(rest.split()[0], 16) if rest else 0
                prev = None if asked.pop(tid, None) == 0 else last_break.get(pid)
                if prev is not None and brk:
                    moved["brk_grown" if brk > prev else "brk_shrunk"] += abs(brk - prev)
                if brk:
                    last_break[pid] = brk
            continue
        if name not in counts:
            continue
        counts[name] += 1
        args = {k: int(v, 16) for k, v in _ARG.findall(rest)}
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
