"""The end reading of a program with an allocator built into it, taken as exit() begins.

The launcher reads the anonymous RSS at the program's exit stop (launcher/spawn.c), after its atexit
handlers and destructors. An allocator compiled into the program may give everything back there
(the Rust mimalloc crate: 656 MiB at rest, 4.8 MiB at the exit stop), so "memory at its end" would
compare what is left after the cleanup, not what the program held. For such a program (its ELF
names a bundled copy the catalog knows: catalog/allocators.toml's `bundled` entries), each timed run
preloads launcher/exitread.c, which defines no allocator function and writes the reading as exit()
begins; it replaces the exit stop's where it was written. No preload can replace a bundled copy,
so no variant of such a program preloads anything else that this one could be confused with.
"""

from __future__ import annotations

import functools
from pathlib import Path

from alloclab.catalog import allocators as cat
from alloclab.catalog.elf import elf_facts
from alloclab.workloads import build as cbuild

EXIT_READ_VAR = "ALLOCLAB_EXIT_READ"


@functools.cache
def reader() -> Path:
    return cbuild.build("alloclab-exitread", [cbuild.package_file("measure", "launcher", "exitread.c")],
                        flags=["-shared", "-fPIC"], suffix=".so")


def wanted(program: Path) -> bool:
    """Whether the program carries an allocator of its own that the catalog knows (its exit may clean up)."""
    facts = elf_facts(program)
    return facts.is_elf and not facts.is_static and cat.bundled_form(facts, cat.load_catalog()) is not None


def with_reader(env: dict[str, str], workdir: Path) -> tuple[dict[str, str], Path]:
    """The run's environment with the reader preloaded first, and where its readings go."""
    out = workdir / "exit-reading"
    for old in workdir.glob("exit-reading.*"):
        old.unlink(missing_ok=True)
    preload = " ".join(p for p in (str(reader()), env.get("LD_PRELOAD", "")) if p)
    return env | {"LD_PRELOAD": preload, EXIT_READ_VAR: str(out)}, out


def apply(result, out: Path) -> None:
    """The program's own reading as exit() began, in place of the exit stop's, where it wrote one."""
    if result.pid is None:
        return
    try:
        anon, lazy = (int(x) for x in (out.parent / f"{out.name}.{result.pid}").read_text().split())
    except (OSError, ValueError):
        return
    if anon >= 0:
        result.end_anon_kb = anon
        result.end_lazyfree_kb = lazy
