"""What /proc says about one process: its mappings with their smaps figures, the rollup, status,
threads, command line and environment. Every reader raises ProcessGone when the process is gone
and lets PermissionError through, for refusals.py to say what is missing."""

from __future__ import annotations

import os
from dataclasses import dataclass


class ProcessGone(Exception):
    """The process exited (or was never there) while it was being read."""


@dataclass
class Mapping:
    lo: int
    hi: int
    perms: str
    offset: int
    inode: int
    path: str            # "" for an anonymous mapping, "[heap]", "[stack]", a file
    rss: int = 0         # bytes, from smaps
    pss: int = 0
    anon: int = 0
    swap: int = 0

    @property
    def size(self) -> int:
        return self.hi - self.lo

    @property
    def is_file(self) -> bool:
        return self.inode != 0 or self.path.startswith("/")

    @property
    def is_anon(self) -> bool:
        """Private memory of no file, and not one of the kernel's special areas."""
        return not self.is_file and (self.path == "" or self.path.startswith("[anon:"))

    @property
    def writable(self) -> bool:
        return self.perms[:2] == "rw"


def _open(path: str, mode: str = "rb"):
    try:
        return open(path, mode)
    except (FileNotFoundError, ProcessLookupError):
        raise ProcessGone(path) from None


def text_or_none(path: str) -> str | None:
    """A kernel file's text, or None where it cannot be read (absent, not permitted): for the facts
    that are optional (a cgroup's quota, Yama's scope), not for a process's maps."""
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return None


def _read(path: str) -> bytes:
    with _open(path) as fh:
        try:
            return fh.read()
        except ProcessLookupError:
            raise ProcessGone(path) from None


SMAPS_FIELDS = {b"Rss:": "rss", b"Pss:": "pss", b"Anonymous:": "anon", b"Swap:": "swap"}


def mappings(pid: int) -> list[Mapping]:
    """Every mapping, in address order, with its resident, proportional, anonymous and swapped bytes."""
    out: list[Mapping] = []
    for line in _read(f"/proc/{pid}/smaps").splitlines():
        head = line.split(None, 5)
        if not head:
            continue
        if b"-" in head[0] and len(head) >= 5 and not head[0].endswith(b":"):
            lo, hi = head[0].split(b"-")
            path = head[5].decode(errors="replace").strip() if len(head) > 5 else ""
            out.append(Mapping(int(lo, 16), int(hi, 16), head[1].decode(), int(head[2], 16), int(head[4]), path))
        elif out and (field := SMAPS_FIELDS.get(head[0])):
            setattr(out[-1], field, int(head[1]) * 1024)
    return out


def ranges(pid: int) -> list[Mapping]:
    """The mappings from /proc/PID/maps alone (no smaps figures): quick enough to read in a stop."""
    out = []
    for line in _read(f"/proc/{pid}/maps").splitlines():
        head = line.split(None, 5)
        if len(head) >= 5:
            lo, hi = head[0].split(b"-")
            path = head[5].decode(errors="replace").strip() if len(head) > 5 else ""
            out.append(Mapping(int(lo, 16), int(hi, 16), head[1].decode(), int(head[2], 16), int(head[4]), path))
    return out


def rollup(pid: int) -> dict[str, int]:
    """/proc/PID/smaps_rollup's figures in bytes (Rss, Pss, Anonymous, Swap, ...)."""
    out = {}
    for line in _read(f"/proc/{pid}/smaps_rollup").splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 2 and parts[0].endswith(b":"):
            out[parts[0][:-1].decode()] = int(parts[1]) * 1024
    return out


def status(pid: int) -> dict[str, str]:
    out = {}
    for line in _read(f"/proc/{pid}/status").decode(errors="replace").splitlines():
        key, _, value = line.partition(":")
        out[key] = value.strip()
    return out


def threads(pid: int) -> list[int]:
    try:
        return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except (FileNotFoundError, ProcessLookupError):
        raise ProcessGone(pid) from None


def cmdline(pid: int) -> list[str]:
    raw = _read(f"/proc/{pid}/cmdline")
    return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]] if raw else []


def environ(pid: int) -> dict[str, str]:
    out = {}
    for item in _read(f"/proc/{pid}/environ").split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


def exe(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except (FileNotFoundError, ProcessLookupError):
        raise ProcessGone(pid) from None


def children(pid: int) -> list[int]:
    """Its children, and theirs, depth first."""
    out: list[int] = []
    for tid in threads(pid):
        try:
            kids = _read(f"/proc/{pid}/task/{tid}/children").split()
        except ProcessGone:
            continue
        for k in kids:
            out.append(int(k))
            try:
                out += children(int(k))
            except ProcessGone:
                pass
    return out


def in_root(pid: int, path: str) -> str:
    """A path as the process sees it (its mount namespace, a container's), from here; the path itself
    where the process sees the same root as alloclab (then what is kept of a file, by its path,
    is found again next time)."""
    if not path.startswith("/"):
        return path
    return path if _same_root(pid) else f"/proc/{pid}/root{path}"


def _same_root(pid: int) -> bool:
    try:
        mine, theirs = os.stat("/"), os.stat(f"/proc/{pid}/root/")
        ns_mine, ns_theirs = os.readlink("/proc/self/ns/mnt"), os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return False
    return (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino) and ns_mine == ns_theirs
