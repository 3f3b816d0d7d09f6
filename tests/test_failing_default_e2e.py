"""A program with a double free (tests/programs/doublefree.c): glibc aborts it every run, the
other allocators do not check and it exits 0. tune and compare answer that the program fails under
the default, with the signal and glibc's own message, name the allocators that hide the fault, and
point to a check; neither picks an allocator nor says "keep the default". Real allocators."""

from __future__ import annotations

import pytest

from conftest import require_allocator

pytestmark = [pytest.mark.e2e]


def _says_the_program_fails(out: str) -> None:
    text = " ".join(out.split())
    assert "fails under the default (glibc)" in text and "SIGABRT" in text, text
    assert 'glibc wrote "free(): double free detected in tcache 2"' in text, text
    assert "jemalloc" in text and "hide the fault" in text and "AddressSanitizer" in text, text
    assert "keep the default" not in text and "Best for" not in text and "Use jemalloc" not in text, text


def test_tune_answers_that_the_program_fails_under_the_default(cli, build):
    require_allocator("jemalloc")
    proc = cli("tune", "--budget", "60s", "-a", "glibc", "-a", "jemalloc", "--", str(build("doublefree")))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    _says_the_program_fails(proc.stdout)


def test_compare_gives_the_same_answer(cli, build):
    require_allocator("jemalloc")
    proc = cli("compare", "--runs", "2", "--warmup", "0", "-a", "glibc", "-a", "jemalloc", "--",
               str(build("doublefree")))
    _says_the_program_fails(proc.stdout)
    assert "No allocator is recommended" in proc.stdout
