"""The glibc layouts `alloclab inspect` reads with (catalog/glibc_layouts.toml) are the ones in glibc's
own debug information: each offset and size, read again from the DWARF of Debian's libc6-dbg for
the libc installed here. A version the file does not hold has no layout (inspect refuses it)."""

from __future__ import annotations

import glob
import platform

import pytest

from alloclab.catalog import glibc_layout
from alloclab.catalog.allocators import glibc_version

# The DWARF structure -> the file's table, and member -> the file's name where they differ.
STRUCTS = {"malloc_state": ("malloc_state", {"fastbinsY": "fastbins"}),
           "malloc_par": ("malloc_par", {}),
           "_heap_info": ("heap_info", {"size": "heap_size"}),
           "tcache_perthread_struct": ("tcache_perthread_struct", {}),
           "tcache_entry": ("tcache_entry", {})}


def _debug_file() -> str:
    from conftest import missing_prerequisite
    from alloclab.measure.inspect.libc import _build_id
    bid = _build_id("/lib/x86_64-linux-gnu/libc.so.6")
    path = f"/usr/lib/debug/.build-id/{bid[:2]}/{bid[2:]}.debug" if bid else None
    if not path or not glob.glob(path):
        missing_prerequisite("glibc's debug symbols are not installed (apt-get install -y libc6-dbg)")
    return path


def _dwarf_structs(path: str) -> dict[str, dict[str, int]]:
    from elftools.elf.elffile import ELFFile
    with open(path, "rb") as fh:
        for cu in ELFFile(fh).get_dwarf_info().iter_CUs():
            top = cu.get_top_DIE()
            name = top.attributes.get("DW_AT_name")
            if not name or name.value.rsplit(b"/", 1)[-1] != b"malloc.c":
                continue
            out = {}
            for die in top.iter_children():
                n = die.attributes.get("DW_AT_name")
                if die.tag == "DW_TAG_structure_type" and n and n.value.decode() in STRUCTS \
                        and "DW_AT_byte_size" in die.attributes:
                    members = {m.attributes["DW_AT_name"].value.decode(): m.attributes["DW_AT_data_member_location"].value
                               for m in die.iter_children() if m.tag == "DW_TAG_member"}
                    out[n.value.decode()] = {**members, "(size)": die.attributes["DW_AT_byte_size"].value}
            return out
    return {}


@pytest.mark.slow
def test_the_layout_of_this_glibc_is_its_debug_informations():
    layout = glibc_layout.layout(glibc_version(), platform.machine())
    assert layout is not None, f"glibc {glibc_version()} has no layout in catalog/glibc_layouts.toml"
    dwarf = _dwarf_structs(_debug_file())
    assert set(dwarf) == set(STRUCTS), sorted(dwarf)
    for struct, (table, renamed) in STRUCTS.items():
        for member, offset in layout.structs[table].items():
            dwarf_name = "(size)" if member == "size" else next((d for d, f in renamed.items() if f == member), member)
            assert dwarf[struct][dwarf_name] == offset, (struct, member, dwarf[struct][dwarf_name], offset)
    # The figures the layout gives besides: a tcache's struct in its chunk, the bins' counts.
    assert layout.tcache_struct_chunk == dwarf["tcache_perthread_struct"]["(size)"] + 16
    assert layout.at("malloc_state", "top") - layout.at("malloc_state", "fastbins") == 8 * layout.nfastbins
    assert layout.at("malloc_state", "binmap") - layout.at("malloc_state", "bins") == 16 * (layout.nbins - 1)
    assert layout.at("tcache_perthread_struct", "entries") == 2 * layout.tcache_bins


def test_a_version_not_in_the_file_has_no_layout():
    assert glibc_layout.layout("2.99", "x86_64") is None
    assert glibc_layout.layout("2.36", "sparc64") is None
    assert "2.36 (x86_64)" in glibc_layout.known()
