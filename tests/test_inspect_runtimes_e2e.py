"""`alloclab inspect` names what in a process is a language runtime's heap, not glibc's: CPython's
object arenas (told by their pools' headers, so an anonymous mapping of the program's own beside
them stays its own), Go's heap in a program with cgo (apart from the glibc heap its C code uses), and
the JVM's heap (the reservation its perf counters size). Each is read in a real process of that
runtime, paused with a known amount in it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from conftest import PROGRAMS, missing_prerequisite
from inspect_helpers import inspection, pause_argv

pytestmark = [pytest.mark.e2e]
MiB = 1 << 20


def _read(cli, argv: list[str], *extra: str, env: dict | None = None):
    p = pause_argv(argv, env=env)
    try:
        r = cli("inspect", str(p.pid), *extra)
    finally:
        out, err, rc = p.go(timeout=120)
    assert rc == 0, (out, err)
    return r, out


def test_cpython_arenas_are_named_and_its_own_mapping_is_not(cli):
    r, out = _read(cli, [sys.executable, str(PROGRAMS / "pyarenas.py"), "300000", "16"], "-f", "json")
    assert out.split()[0] == b"300000"
    other = inspection(r)[0]["snapshot"]["split"]["other_parts"]
    # 300,000 tuples with a str and a list each: some 60 MiB of small objects.
    assert other.get("cpython_arenas", 0) >= 40 * MiB, other
    # The 16 MiB mapping the script made with the mmap module holds no pool.
    assert 16 * MiB <= other["own_maps"] <= 20 * MiB, other


def test_the_terminal_answer_says_cpythons_arenas(cli):
    r, _ = _read(cli, [sys.executable, str(PROGRAMS / "pyarenas.py"), "100000", "1"])
    assert r.returncode == 0 and "CPython's object arenas (pymalloc)" in r.stdout, r.stdout


@pytest.mark.slow
def test_gos_heap_is_named_apart_from_glibcs(cli, tmp_path):
    go = shutil.which("go")
    if go is None:
        missing_prerequisite("no Go toolchain (apt-get install -y golang-go)")
    exe = tmp_path / "goheap"
    env = {**os.environ, "CGO_ENABLED": "1", "GOCACHE": os.environ.get("GOCACHE", str(tmp_path / "gocache")),
           "GOFLAGS": "-mod=mod", "GO111MODULE": "off"}
    subprocess.run([go, "build", "-o", str(exe), str(PROGRAMS / "goheap.go")], check=True, capture_output=True,
                   env=env, cwd=tmp_path, timeout=300)
    r, out = _read(cli, [str(exe), "32"], "-f", "json")
    assert out.startswith(b"go: "), out
    sp = inspection(r)[0]["snapshot"]["split"]
    # 32 MiB of Go slices in Go's heap; 32 MiB of C.malloc'ed blocks live in glibc's.
    assert 32 * MiB <= sp["other_parts"].get("go_heap", 0) <= 48 * MiB, sp["other_parts"]
    assert 31 * MiB <= sp["parts"]["live"] <= 34 * MiB, sp["parts"]
    assert sp["other_parts"]["stacks"] < 4 * MiB, sp["other_parts"]


@pytest.mark.slow
@pytest.mark.parametrize("gc", ["G1", "Serial"])
def test_the_java_heap_is_named(cli, gc):
    java = shutil.which("java")
    if java is None or shutil.which("javac") is None:
        missing_prerequisite("no JDK (apt-get install -y default-jdk-headless)")
    r, out = _read(cli, [java, "-Xmx256m", f"-XX:+Use{gc}GC", str(PROGRAMS / "JavaHold.java"), "64"], "-f", "json")
    other = inspection(r)[0]["snapshot"]["split"]["other_parts"]
    # 64 MiB of arrays kept, within the 256 MiB heap.
    assert 64 * MiB <= other.get("java_heap", 0) <= 256 * MiB, other
