"""What an ELF file says about allocation: the libraries it needs, the malloc family it defines,
exports or imports (pyelftools, read once per file).

In: a path. Out: ElfFacts; used to check that a custom allocator library exports malloc and free,
and by the verification of a program before it runs.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
from dataclasses import dataclass
from pathlib import Path

import elftools
from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from alloclab import cache

ELFTOOLS = getattr(elftools, "__version__", "?")
# Files whose facts are kept: a server's program, its libraries (PostgreSQL's pull in about 40)
# and every allocator's, with room to spare; fewer would be read and written again at each start.
KEEP_FILES = 512

MALLOC_API = ("malloc", "free", "calloc", "realloc", "posix_memalign", "aligned_alloc",
              "memalign", "valloc", "pvalloc", "malloc_usable_size")


@dataclass(frozen=True)
class ElfFacts:
    path: Path
    is_elf: bool
    is_static: bool = False
    needed: tuple[str, ...] = ()
    defined: frozenset[str] = frozenset()    # defined function symbols (dynamic + static tables)
    exported: frozenset[str] = frozenset()   # defined in the dynamic symbol table
    imported: frozenset[str] = frozenset()   # undefined in the dynamic symbol table
    # Undefined, yet with an address: a non-PIE executable that takes a function's address gets
    # a canonical PLT entry, and the loader binds every library's reference to that entry. The
    # entry is no definition: it jumps to wherever the executable's own reference is bound.
    canonical_plt: frozenset[str] = frozenset()
    # Section names and the .comment text: what says which toolchain built a program (Go's
    # .go.buildinfo survives stripping, rustc signs .comment) where its symbols are gone.
    sections: frozenset[str] = frozenset()
    comment: str = ""


@functools.cache
def elf_facts(path: Path) -> ElfFacts:
    """The facts of one file, kept in the cache under the file's identity (device, inode, size,
    modification time) and this module's: pyelftools reads libc's 2,500 symbols in 0.08 s, and a
    tune reads the program's libraries and every installed allocator's (0.16 s) at each start."""
    key = _key(path)
    kept = cache.read("elf", key) if key else None
    if kept is not None:
        try:
            return pickle.loads(kept)
        except Exception:   # noqa: BLE001 - an unreadable entry is a miss
            pass
    facts = _read(path)
    if key and facts.is_elf:
        cache.write("elf", key, pickle.dumps(facts), keep=KEEP_FILES)
    return facts


def _key(path: Path) -> str | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    # ctime too: a copy that keeps the old modification time (cp -p, rsync -t) cannot keep it.
    ident = f"{path}\0{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{_reader()}"
    return hashlib.sha256(ident.encode()).hexdigest()[:32]


@functools.cache
def _reader() -> str:
    """What read the facts: this module and pyelftools (once a process, not once a file)."""
    return f"{cache.stamp([Path(__file__)])}\0{ELFTOOLS}"


def _read(path: Path) -> ElfFacts:
    try:
        with open(path, "rb") as fh:
            elf = ELFFile(fh)
            # pyelftools' headers and entries read as attributes too (as the tags' below do).
            segments = {seg.header.p_type for seg in elf.iter_segments()}
            has_interp, has_dynamic = "PT_INTERP" in segments, "PT_DYNAMIC" in segments
            needed: list[str] = []
            defined, exported, imported, canonical_plt = set(), set(), set(), set()
            sections, comment = set(), ""
            for section in elf.iter_sections():
                sections.add(section.name)
                if section.name == ".comment":
                    comment = section.data()[:4096].replace(b"\0", b"\n").decode(errors="replace").strip()
                if isinstance(section, DynamicSection):
                    needed += [t.needed for t in section.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
                if isinstance(section, SymbolTableSection):
                    dynamic = section.name == ".dynsym"
                    for sym in section.iter_symbols():
                        if not sym.name:
                            continue
                        entry = sym.entry
                        if entry.st_shndx == "SHN_UNDEF":
                            if dynamic:
                                imported.add(sym.name.split("@")[0])
                                if entry.st_value:
                                    canonical_plt.add(sym.name.split("@")[0])
                        elif entry.st_info.type in ("STT_FUNC", "STT_GNU_IFUNC"):
                            name = sym.name.split("@")[0]
                            defined.add(name)
                            if dynamic and entry.st_info.bind in ("STB_GLOBAL", "STB_WEAK"):
                                exported.add(name)
            e_type = elf.header.e_type
            is_static = e_type == "ET_EXEC" and not has_interp and not has_dynamic or (
                not has_interp and e_type == "ET_DYN" and not needed and "malloc" in defined)
            return ElfFacts(path, True, is_static, tuple(needed), frozenset(defined),
                            frozenset(exported), frozenset(imported), frozenset(canonical_plt),
                            frozenset(sections), comment)
    except (ELFError, OSError, ValueError):
        return ElfFacts(path, False)


def exported_allocator_symbols(path: Path) -> set[str]:
    return set(MALLOC_API) & set(elf_facts(Path(path).resolve()).exported)
