"""Which allocator serves a process's malloc, told from outside: what the loader would bind malloc
to. A preloaded library that defines it comes first (alloclab's forwarding preload hands it to
glibc's), then the program's own malloc (an allocator built into it), then a copy built in under its
own names (the Rust mimalloc crate's mi_malloc: the program's allocations go to it, the C library's
to glibc), then an allocator library it links, then glibc's. The libraries are the catalog's (catalog/allocators.toml).

A preload is read from the process's environment, and where that is gone (redis rewrites its
process title over its environment) from its maps: an allocator library mapped that the program
does not link (directly or through its libraries) was preloaded."""

from __future__ import annotations

import os
import re
from pathlib import Path

from alloclab.catalog import allocators as cat
from alloclab.catalog.elf import elf_facts
from alloclab.measure.inspect.procfs import Mapping, environ, exe, in_root

FORWARD = "alloclab-glibc-forward"


def _by_soname() -> dict[str, str]:
    out: dict[str, str] = {}
    for a in cat.load_catalog().allocators.values():
        for lib in a.libraries:
            out.setdefault(lib, a.same_as or a.name)
    return out


def _soname(base: str, sonames: dict[str, str]) -> str:
    """A mapped file's name as its soname: the loader maps the file a soname's link points to, and
    a library's file is named by its soname and a version (libtcmalloc.so.4 -> libtcmalloc.so.4.5.10)."""
    return next((s for s in sonames if base == s or base.startswith(s + ".")), base)


def _linked(facts) -> set[str]:
    from alloclab.measure.verify import needed_closure
    return {soname for soname, _, _ in needed_closure(facts)} if facts.is_elf else set()


def serving(pid: int, maps: list[Mapping]) -> tuple[str, str]:
    """(allocator name, how it was told)."""
    sonames = _by_soname()
    mapped = {_soname(os.path.basename(m.path), sonames): m.path for m in maps if m.path.startswith("/")}
    try:
        preload = [p for p in re.split(r"[: ]+", environ(pid).get("LD_PRELOAD", "")) if p]
    except PermissionError:
        preload = []
    for p in preload:
        base = _soname(os.path.basename(p), sonames)
        if FORWARD in base and base in mapped:
            return "glibc", f"alloclab's forwarding preload ({p}) hands malloc to glibc's"
        if base in sonames and base in mapped:
            return sonames[base], f"preloaded ({p})"
    forward = next((path for base, path in mapped.items() if FORWARD in base), None)
    if forward:
        return "glibc", f"alloclab's forwarding preload ({forward}, in its maps) hands malloc to glibc's"
    program = exe(pid)
    facts = elf_facts(Path(in_root(pid, program)))
    linked = _linked(facts)
    for base, path in mapped.items():
        if base in sonames and base not in linked:
            return sonames[base], f"preloaded ({path}: in its maps, and {program} does not link it)"
    if facts.is_elf and "malloc" in facts.exported:
        for a in cat.load_catalog().allocators.values():
            if a.prefixed_symbols and set(a.prefixed_symbols) & facts.defined:
                return a.name, f"built into {program} (its {sorted(set(a.prefixed_symbols) & facts.defined)[0]})"
        return "unknown", f"{program} defines its own malloc"
    form = cat.bundled_form(facts, cat.load_catalog()) if facts.is_elf else None
    if form is not None:
        found = ", ".join(sorted(set(form.bundled_symbols) & facts.defined))
        return form.name, (f"the {form.bundled} built into {program} ({found}) serves the program's own allocations; "
                           f"glibc's malloc, the C library's")
    for base, path in mapped.items():
        if base in sonames:
            return sonames[base], f"linked ({path})"
    return "glibc", "glibc's own malloc (no other allocator is loaded)"
