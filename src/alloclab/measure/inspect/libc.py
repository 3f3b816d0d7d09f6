"""Which libc a process runs, read through /proc/PID/root so that a container's own libc is the one
read: its file, version, architecture, load address, and the symbols of its debug file where one
is installed (Debian's libc6-dbg, under /usr/lib/debug/.build-id/, in the process's root or here).

Refusals: a statically linked program (no libc mapped), musl, an unreadable version; the layout
itself is catalog data (catalog/glibc_layouts.toml), and a version it does not hold is refused."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from alloclab import cache
from alloclab.catalog.elf import elf_facts
from alloclab.measure.inspect import refusals
from alloclab.measure.inspect.procfs import Mapping, exe, in_root

GLIBC_FILE = re.compile(r"/libc(?:\.so\.6|-\d+\.\d+\.so)$")
# musl's loader is its libc: Debian maps it as /usr/lib/x86_64-linux-musl/libc.so, Alpine as ld-musl-*.
MUSL_FILE = re.compile(r"(?:/ld-musl-[^/]*\.so\.1|-linux-musl/libc\.so|/libc\.musl[^/]*)$")
BANNER = re.compile(rb"GNU C Library [^\n]{0,120}?release version (\d+\.\d+)")
MACHINES = {62: "x86_64", 183: "aarch64"}
# The symbols read from the debug file: objects in libc's data, and thread-local variables
# (their offset in libc's block of each thread's static TLS).
SYMBOLS = ("main_arena", "mp_", "tcache_key", "global_max_fast", "tcache", "thread_arena")


@dataclass
class Libc:
    path: str                 # as the process names it
    file: str                 # the same, reachable from here
    version: str | None
    arch: str
    base: int                 # its load address
    build_id: str | None
    mappings: list[Mapping] = field(default_factory=list)
    symbols: dict[str, int] = field(default_factory=dict)   # name -> address (TLS: offset in its block)
    tls: set[str] = field(default_factory=set)               # which of them are thread-local
    symbols_from: str | None = None                          # the debug file read

    def writable(self) -> list[Mapping]:
        """Its .data and .bss: the file's writable mapping and the anonymous one right after it."""
        out = [m for m in self.mappings if m.writable]
        return out


def find(pid: int, maps: list[Mapping]) -> Libc:
    musl = next((m for m in maps if MUSL_FILE.search(m.path)), None)
    if musl is not None:
        raise refusals.musl(pid, musl.path)
    glibc = [m for m in maps if GLIBC_FILE.search(m.path)]
    if not glibc:
        program = exe(pid)
        raise refusals.static(pid, program) if _static(pid, program) else refusals.unknown_layout(
            pid, program, None, "?", [])
    path = glibc[0].path
    mine = [m for m in maps if m.path == path]
    # The anonymous mapping right after its last file mapping is its .bss (main_arena lives in .data
    # or .bss depending on the build: both are read).
    last = mine[-1]
    after = next((m for m in maps if m.lo == last.hi and m.is_anon and m.writable), None)
    if after is not None:
        mine.append(after)
    file = in_root(pid, path)
    head = _head(file)
    version = _version(file)
    arch = MACHINES.get(int.from_bytes(head[18:20], "little"), "unknown") if len(head) >= 20 else "unknown"
    base = min(m.lo - m.offset for m in mine if m.path == path)
    return Libc(path, file, version, arch, base, _build_id(file), mine)


def _static(pid: int, program: str) -> bool:
    from pathlib import Path
    facts = elf_facts(Path(in_root(pid, program)))
    return facts.is_elf and (facts.is_static or not facts.needed)


def _head(file: str) -> bytes:
    try:
        with open(file, "rb") as fh:
            return fh.read(64)
    except OSError:
        return b""


def _version(file: str) -> str | None:
    try:
        with open(file, "rb") as fh:
            m = BANNER.search(fh.read())
    except OSError:
        return None
    return m.group(1).decode() if m else None


def _build_id(file: str) -> str | None:
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    try:
        with open(file, "rb") as fh:
            elf = ELFFile(fh)
            note = elf.get_section_by_name(".note.gnu.build-id")
            for n in note.iter_notes() if note is not None else ():
                if n["n_type"] == "NT_GNU_BUILD_ID":
                    return n["n_desc"]
    except (OSError, ELFError):
        return None
    return None


def debug_file(pid: int, build_id: str) -> str | None:
    """The debug file of that build, in the process's root first, then here."""
    import os
    rel = f"/usr/lib/debug/.build-id/{build_id[:2]}/{build_id[2:]}.debug"
    for candidate in (in_root(pid, rel), rel):
        if os.path.isfile(candidate):
            return candidate
    return None


def read_symbols(pid: int, libc: Libc) -> None:
    """Fills libc.symbols from its debug file (kept in the cache under the build id: reading the
    10,000 symbols of libc's takes 0.7 s)."""
    if not libc.build_id:
        return
    path = debug_file(pid, libc.build_id)
    if path is None:
        return
    kept = cache.read("inspect-symbols", libc.build_id)
    table = json.loads(kept) if kept else None
    if table is None:
        table = _symtab(path)
        if table is None:
            return
        cache.write("inspect-symbols", libc.build_id, json.dumps(table).encode())
    for name, (value, kind) in table.items():
        libc.symbols[name] = value if kind == "STT_TLS" else libc.base + value
        if kind == "STT_TLS":
            libc.tls.add(name)
    libc.symbols_from = path


def _symtab(path: str) -> dict[str, list] | None:
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    try:
        with open(path, "rb") as fh:
            section = ELFFile(fh).get_section_by_name(".symtab")
            if section is None:
                return None
            out: dict[str, list] = {}
            for s in section.iter_symbols():
                if s.name in SYMBOLS and s.name not in out:
                    out[s.name] = [s["st_value"], s["st_info"]["type"]]
            return out
    except (OSError, ELFError):
        return None
