"""The system allocator's variant of a program linked against another allocator.

Debian's redis-server links libjemalloc.so.2: run with nothing preloaded, its "glibc" column is
jemalloc. When the catalog gives the system allocator a forwarding preload (`forward` in
allocators.toml, source in launcher/forward.c), the cells of such a program run with it, so that
glibc's malloc serves the malloc family; `glibc-linked` (no forward) is the opt-out. The proof
is the usual one (LD_DEBUG bindings to the forwarder, the forwarder mapped in every process)
plus a probe run the way the program loads: the forwarder, then the linked allocator.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path

from alloclab.catalog import allocators as cat
from alloclab.catalog.elf import elf_facts
from alloclab.catalog.variants import Variant
from alloclab.measure import readback, verify
from alloclab.workloads import build as cbuild
from alloclab.workloads.command import real_executable

# The settings whose effect glibc's main arena shows at the first malloc: it grows by the request
# plus top_pad. (The loader's tunable list says what glibc parsed; this says its malloc used it.)
TOP_PAD_READ = cat.load_catalog().get(cat.BASELINE).forward_shows
# The words of the verification note of a forwarded cell (for_cell), which the reports look for.
FORWARDED = "forced by alloclab's forwarding preload"


@dataclass(frozen=True)
class Linked:
    exe: Path
    soname: str
    path: Path
    via: str | None          # the library that needs it, None when the executable does
    allocator: cat.Allocator

    name: str                # as the user named it: redis-server, not the redis-check-rdb it links to

    def why(self) -> str:
        return f"{self.name} links {self.soname}" + (f" through {self.via}" if self.via else "")


def linked_allocator(program: Path, catalog: cat.Catalog | None = None) -> Linked | None:
    """The catalog allocator the program loads through DT_NEEDED (transitively), if any."""
    catalog = catalog or cat.load_catalog()
    exe = real_executable(program)
    facts = elf_facts(exe)
    if not facts.is_elf or facts.is_static:
        return None
    for soname, path, via in verify.needed_closure(facts):
        allocator = verify.soname_allocator(soname, catalog)
        if allocator is not None and path is not None:
            return Linked(exe, soname, path.resolve(), via, allocator, verify.shown_name(program, exe))
    return None


@functools.cache
def forwarder(source: str) -> Path:
    # -ldl: dlopen lives in libdl before glibc 2.34.
    return cbuild.build("alloclab-glibc-forward", [cbuild.package_file("measure", "launcher", source)],
                        flags=["-shared", "-fPIC"], libs=["-ldl"], suffix=".so")


def for_cell(variant: Variant, program: Path, catalog: cat.Catalog | None = None) -> Variant:
    """The variant as the cell of `program` runs it: with the forwarding preload where the
    variant is the system allocator, the catalog gives it one, and the program links another."""
    a = variant.allocator
    if a is None or not a.forward or not variant.is_system:
        return variant
    linked = linked_allocator(program, catalog)
    if linked is None:
        return variant
    lib = forwarder(a.forward)
    # What still reaches the linked allocator (its own API: mallctl) the static check lists.
    note = (f"{linked.why()}: {a.name}'s malloc {FORWARDED} {lib.name} "
            f"(malloc, free and the rest of the family handed to glibc's __libc_malloc and friends); "
            f"the variant {a.name}-linked measures the linked {linked.allocator.name} instead")
    return dataclasses.replace(variant, library=lib, env=dict(variant.env) | {"LD_PRELOAD": str(lib)},
                               notes=variant.notes + (note,))


def check(variant: Variant, program: Path, env: dict[str, str], ev: verify.Evidence) -> None:
    """Untimed, before the first run: in a probe that loads the forwarder and then the linked
    allocator (the program's own order), malloc must resolve to the forwarder and glibc's main
    arena must be what the probe's first malloc grew; with top_pad asked, by at least top_pad."""
    linked = linked_allocator(program)
    if linked is None or variant.library is None:
        return
    probe_env = env | {"LD_PRELOAD": f"{variant.library}:{linked.path}"}
    try:
        out, _ = readback.run([str(readback.probe()), "glibc:malloc", "glibc:arena"], probe_env)
    except readback.ProbeFailed as exc:
        ev.note(f"the forwarding preload could not be checked in a probe: {exc}")
        return
    found = dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)
    where, arena = found.get("malloc", "!not reported"), found.get("arena", "!not reported")
    order = f"with {variant.library.name} and then {linked.soname} loaded, as in {linked.name}"
    if where.startswith("!") or Path(where).resolve() != variant.library.resolve():
        ev.fail(f"in a probe {order}, malloc resolves to {where.lstrip('!')}, not the forwarding preload")
        return
    if arena.startswith("!") or not arena.isdigit() or int(arena) == 0:
        ev.fail(f"in a probe {order}, glibc's main arena took nothing at the first malloc "
                f"({arena.lstrip('!')}): glibc's malloc is not what serves it")
        return
    grown = int(arena)
    ev.note(f"in a probe {order}, malloc resolves to the forwarder and glibc's main arena took "
            f"{_size(grown)} at the first malloc: glibc serves it")
    for s in variant.tunables:
        if TOP_PAD_READ not in s.tunable.read:
            continue
        if grown >= int(s.value):
            ev.note(f"{s.tunable.name}={s.written} in effect in glibc's malloc: its main arena grew by "
                    f"{_size(grown)} at a first malloc of 64 bytes")
        else:
            ev.fail(f"{s.tunable.name}={s.written} not in effect in glibc's malloc: its main arena grew by "
                    f"only {_size(grown)} at a first malloc of 64 bytes")


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 1024:.0f} KiB"
