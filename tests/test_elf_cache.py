"""catalog/elf.py keeps each file's facts in the cache under the file's identity: a second
process reads them back instead of parsing the symbols again, and a file rewritten in place (an
upgraded library, a rebuilt program) is parsed afresh, never served its old facts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from alloclab.catalog import elf
from alloclab.catalog.allocators import find_library

PROBE = "import sys; from pathlib import Path; from alloclab.catalog.elf import elf_facts; f = elf_facts(Path(sys.argv[1])); print(len(f.exported), 'malloc' in f.exported)"


def _facts_in_another_process(path: Path, cache: Path) -> str:
    env = os.environ | {"ALLOCLAB_CACHE": str(cache)}
    return subprocess.run([sys.executable, "-c", PROBE, str(path)], env=env, capture_output=True, text=True,
                          check=True).stdout.split()


def test_facts_kept_and_a_rewritten_file_read_again(tmp_path, monkeypatch):
    libc = find_library("libc.so.6")
    other = Path(sys.executable).resolve()   # an ELF file that defines no malloc
    assert libc is not None
    lib = tmp_path / "lib.so"
    shutil.copyfile(libc, lib)
    cache = tmp_path / "cache"
    first = _facts_in_another_process(lib, cache)
    assert first[1] == "True" and int(first[0]) > 1000, first
    assert len(list((cache / "elf").glob("*"))) == 1
    # Kept: the same answer from the entry (what a parse would give too).
    assert _facts_in_another_process(lib, cache) == first
    # Served from the entry: with the parser gone, this process still gets the same facts.
    monkeypatch.setenv("ALLOCLAB_CACHE", str(cache))
    parsed = elf._read(lib)
    monkeypatch.setattr(elf, "_read", lambda path: pytest.fail(f"{path} parsed again"))
    assert elf.elf_facts.__wrapped__(lib) == parsed
    monkeypatch.undo()
    # Rewritten in place: other bytes, other facts, a second entry.
    shutil.copyfile(other, lib)
    again = _facts_in_another_process(lib, cache)
    assert again != first and again[1] == "False", again
    assert len(list((cache / "elf").glob("*"))) == 2
