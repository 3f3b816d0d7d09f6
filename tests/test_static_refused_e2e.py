"""A statically linked program is refused before anything runs: no interpreter, so no preload, and
every variant would run the same program (a CGO_ENABLED=0 Go program took tune 118 s to answer "keep
the default"). The refusal is one paragraph naming what tunes such a heap instead; no child runs
(each program writes a marker file when it runs) and no store is written."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from conftest import PROGRAMS, missing_prerequisite
from native_programs import go_program, rust_program

pytestmark = pytest.mark.e2e


def _refused(cli, tmp_path, command: str, prog, *words: str) -> str:
    marker = tmp_path / "ran"
    p = cli(command, "--", str(prog), str(marker))
    said = " ".join((p.stdout + p.stderr).split())
    assert p.returncode != 0, said
    assert "is statically linked" in said and "no interpreter (PT_INTERP)" in said, said
    for w in words:
        assert w in said, (w, said)
    assert "Traceback" not in said
    assert not marker.exists(), "the program ran"
    assert not cli.db.exists(), "a store was written"
    return said


@pytest.mark.parametrize("command", ["tune", "compare"])
def test_static_go_program_is_refused_naming_gogc(cli, tmp_path, command):
    prog = go_program("gostatic")
    subprocess.run([str(prog), str(tmp_path / "by-hand")], check=True, capture_output=True)
    assert (tmp_path / "by-hand").exists()   # the marker works: the refusal, not the program, leaves none
    _refused(cli, tmp_path, command, prog, "Go program", "GOGC", "GOMEMLIMIT", "CGO_ENABLED=1")


def test_go_program_with_cgo_is_not_refused(tmp_path):
    """A Go program that calls C links libc dynamically: preloads reach its C side. (A pure Go
    program stays static under CGO_ENABLED=1 too, and is refused so.)"""
    from alloclab.measure.verify import static_refusal
    if shutil.which(os.environ.get("CC", "cc")) is None:
        missing_prerequisite("no C compiler for cgo (apt-get install -y gcc libc6-dev)")
    assert static_refusal(go_program("gocgo", cgo=True)) is None
    assert static_refusal(go_program("gostatic", cgo=True)) is not None


@pytest.mark.parametrize("cc,flags", [("cc", ["-static"]), ("musl-gcc", ["-static"]), ("cc", ["-static-pie"])])
def test_static_c_program_is_refused(cli, tmp_path, cc, flags):
    if shutil.which(cc) is None:
        missing_prerequisite(f"{cc} is not installed (apt-get install -y {'musl-tools' if cc == 'musl-gcc' else 'gcc'})")
    prog = tmp_path / "static_marker"
    built = subprocess.run([cc, "-O2", *flags, "-o", str(prog), str(PROGRAMS / "static_marker.c")],
                           capture_output=True, text=True)
    if built.returncode != 0:
        missing_prerequisite(f"{cc} {' '.join(flags)} cannot link (a static libc: libc6-dev, musl-tools)")
    said = _refused(cli, tmp_path, "tune", prog, "Link it dynamically")
    assert "Go program" not in said and "Rust" not in said
    # glibc's malloc linked in still reads its environment (a static MALLOC_MMAP_THRESHOLD_ works); musl's reads none.
    assert ("Its malloc is glibc's, linked in" in said and "MALLOC_ARENA_MAX" in said) == (cc == "cc"), said


@pytest.mark.parametrize("name,words", [
    ("rust-system", ("Rust program on the system allocator, glibc's malloc linked in statically", "MALLOC_ARENA_MAX")),
    ("rust-mimalloc", ("Rust program whose global allocator is mimalloc built into it", "MIMALLOC_PURGE_DELAY")),
])
def test_static_rust_program_is_refused_naming_what_tunes_its_heap(cli, tmp_path, name, words):
    prog = rust_program(name, static=True)
    said = _refused(cli, tmp_path, "tune", prog, *words)
    assert "Go program" not in said


def test_dynamic_program_is_not_refused(build):
    from alloclab.measure.verify import static_refusal
    assert static_refusal(build("static_marker")) is None
