"""A program's own channel to its allocator's books, for an allocator whose books need a call made
inside the process: redis' MEMORY MALLOC-STATS, which is jemalloc's malloc_stats_print text. Asked
as any client would (on the port the process listens on, loopback), it runs nothing in the process
that the program does not offer, and never stops it.

The text's figures become the names the fingerprint's interposer reads through mallctl
(catalog/allocators.toml, [allocators.jemalloc.books]), and fingerprint_books.split makes the same
split of them as of a fingerprint run's books."""

from __future__ import annotations

import re
import socket

from alloclab.errors import AlloclabError
from alloclab.measure.fingerprint_books import split
from alloclab.measure.inspect.procfs import Mapping
from alloclab.measure.inspect.regions import classify
from alloclab.store.inspect_model import Snapshot

TIMEOUT_S = 5.0
LISTEN = "0A"


def listening_ports(pid: int) -> list[tuple[str, int]]:
    """(address, port) of the TCP sockets the process listens on, from its own network namespace."""
    import os
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        return []
    out = []
    for table, family in (("tcp", 4), ("tcp6", 6)):
        try:
            lines = open(f"/proc/{pid}/net/{table}").read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == LISTEN and f[9] in inodes:
                addr, port = f[1].split(":")
                host = "127.0.0.1" if family == 4 else "::1"
                if family == 4 and addr not in ("00000000", "0100007F"):
                    host = ".".join(str(int(addr[i:i + 2], 16)) for i in (6, 4, 2, 0))
                out.append((host, int(port, 16)))
    return out


def _redis(host: str, port: int, *args: str) -> str:
    """One command in redis' protocol; its bulk-string reply."""
    payload = f"*{len(args)}\r\n" + "".join(f"${len(a.encode())}\r\n{a}\r\n" for a in args)
    with socket.create_connection((host, port), timeout=TIMEOUT_S) as s:
        s.sendall(payload.encode())
        f = s.makefile("rb")
        head = f.readline().decode(errors="replace").rstrip("\r\n")
        if head.startswith("-"):
            raise AlloclabError(f"redis on {host}:{port} refused MEMORY MALLOC-STATS: {head[1:]}. Inspect it where "
                                f"alloclab can ask it (without a password), or run its recipe (`alloclab tune "
                                f"recipe:redis`).")
        if not head.startswith("$"):
            raise ValueError(head)
        n = int(head[1:])
        return f.read(n + 2)[:n].decode(errors="replace")


def _number(text: str, pattern: str) -> int | None:
    m = re.search(pattern, text, re.M)
    return int(m.group(1)) if m else None


def parse_malloc_stats(text: str) -> dict[str, int]:
    """jemalloc's malloc_stats_print text as the mallctl names the catalog's roles read: the totals
    line, the page size, and of the merged arenas (or the one arena printed) the dirty and muzzy
    pages and the tcache's bytes."""
    if "Begin jemalloc statistics" not in text:
        raise ValueError("not jemalloc's statistics")
    out: dict[str, int] = {}
    totals = re.search(r"^Allocated: (\d+), active: (\d+), metadata: (\d+).*?, resident: (\d+), mapped: (\d+), "
                       r"retained: (\d+)", text, re.M)
    if not totals:
        raise ValueError("no totals line")
    for name, value in zip(("allocated", "active", "metadata", "resident", "mapped", "retained"), totals.groups()):
        out[f"stats.{name}"] = int(value)
    out["arenas.page"] = _number(text, r"^Page size: (\d+)") or 4096
    merged = text.split("Merged arenas stats:", 1)
    sections = [merged[1].split("arenas[", 1)[0]] if len(merged) > 1 else re.split(r"^arenas\[\d+\]:", text,
                                                                                    flags=re.M)[1:]
    dirty = muzzy = tcache = 0
    for sec in sections:
        dirty += _number(sec, r"^\s+dirty:\s+-?\d+\s+(\d+)") or 0
        muzzy += _number(sec, r"^\s+muzzy:\s+-?\d+\s+(\d+)") or 0
        tcache += _number(sec, r"^tcache_bytes:\s+(\d+)") or 0
    out |= {"stats.arenas.4096.pdirty": dirty, "stats.arenas.4096.pmuzzy": muzzy,
            "stats.arenas.4096.tcache_bytes": tcache}
    return out


def read(snap: Snapshot, pid: int, maps: list[Mapping], channel: str) -> bool:
    """The split from the program's channel; False where it has none that answers."""
    if channel != "redis" or snap.allocator != "jemalloc":
        return False
    ports = listening_ports(pid)
    text, said = None, ""
    for host, port in ports:
        try:
            text = _redis(host, port, "MEMORY", "MALLOC-STATS")
            said = f"{host}:{port}"
            break
        except (OSError, ValueError):
            continue
    if text is None:
        return False
    figures = parse_malloc_stats(text)
    books_split(snap, pid, maps, "mallctl", figures, figures["stats.allocated"])
    snap.channel = {"kind": "redis MEMORY MALLOC-STATS", "at": said, "figures": snap.split.books if snap.split else figures}
    snap.source = f"redis' MEMORY MALLOC-STATS on {said} (jemalloc's malloc_stats_print)"
    snap.residency = "smaps (jemalloc's mappings)"
    snap.notes.append("read through the program's own channel: nothing was stopped, nothing run in the process "
                      "but the command redis offers its clients")
    return True


def books_split(snap: Snapshot, pid: int, maps: list[Mapping], interface: str, figures: dict[str, int],
                live: int | None, sps: list[int] = ()) -> None:
    """The split of the allocator's books (the catalog's names for `interface`) beside smaps, as a
    fingerprint run's: every anonymous mapping that is not a stack or a library's is the allocator's,
    and `live` (its allocated bytes, where it counts them) stands for the live blocks, which no
    interposer counted here. `sps`: the threads' stack pointers, where a stop read them."""
    regions = classify(pid, maps, None, list(sps))
    other = {"stacks": regions.by_kind["stacks"], "libraries": regions.by_kind["libraries"], "interposer": 0,
             "own_maps": 0}
    figures = {**figures, "anon": regions.anon, "allocator_maps": regions.by_kind["allocator"], **other}
    if live is not None and live >= 0:
        figures["live"] = live
    snap.split = split(interface, "inspect", None, figures)
    snap.smaps = regions.categories()
