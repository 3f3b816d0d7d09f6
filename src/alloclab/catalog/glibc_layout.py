"""glibc's malloc internals per version and architecture (glibc_layouts.toml), typed: the offsets
`alloclab inspect` reads a process's heaps with. A version that is not in the file has no layout:
the caller refuses it rather than guess."""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from importlib import resources

STRUCTS = ("malloc_state", "malloc_par", "heap_info", "tcache_perthread_struct", "tcache_entry")


@dataclass(frozen=True)
class GlibcLayout:
    version: str
    arch: str
    size_sz: int
    alignment: int
    min_chunk: int
    heap_max: int
    nfastbins: int
    nbins: int
    tcache_bins: int
    tcache_struct_chunk: int
    safe_linking: bool
    max_fast_default: int
    default_mmap_threshold: int
    default_trim_threshold: int
    mmap_threshold_max: int
    structs: dict[str, dict[str, int]]

    def at(self, struct: str, member: str) -> int:
        """The offset of `member` in `struct` (or its size, member "size")."""
        return self.structs[struct][member]

    def size(self, struct: str) -> int:
        return self.structs[struct]["size"]


@functools.cache
def _table() -> dict:
    return tomllib.loads(resources.files("alloclab.catalog").joinpath("glibc_layouts.toml").read_text())


def known() -> list[str]:
    """Every "VERSION (ARCH)" the file holds, for the refusal's words."""
    return [f"{v} ({a})" for v, arches in _table().items() for a in arches]


def layout(version: str, arch: str) -> GlibcLayout | None:
    entry = _table().get(version, {}).get(arch)
    if entry is None:
        return None
    scalars = {k: v for k, v in entry.items() if k not in STRUCTS}
    return GlibcLayout(version, arch, structs={s: dict(entry[s]) for s in STRUCTS}, **scalars)
