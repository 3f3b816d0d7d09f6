"""need_program (tests/conftest.py): a program `make test` installs skips its test where it is missing
on a developer's machine and fails it under CI=true; and what the tests ask of it, make test does
install."""

from __future__ import annotations

import pytest

import conftest
from test_setup_deb import makefile_packages


@pytest.mark.parametrize("ci, outcome", [(False, pytest.skip.Exception), (True, pytest.fail.Exception)])
def test_a_missing_program_skips_locally_and_fails_under_ci(monkeypatch, ci, outcome):
    monkeypatch.setattr(conftest, "IN_CI", ci)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(outcome, match=r"^redis-cli is not installed \(apt-get install -y redis-tools\)"):
        conftest.need_program("redis-cli", "redis-tools")


def test_a_program_there_is_its_path(monkeypatch):
    monkeypatch.setattr(conftest, "IN_CI", True)
    assert conftest.need_program("sh").endswith("/sh")


# The programs whose absence fails a test under CI=true (through need_program, or in
# test_fingerprint_e2e strace, where perf cannot count system calls), and the package of each.
NEEDED = {"redis-server": "redis-server", "redis-cli": "redis-tools", "heaptrack": "heaptrack",
          "heaptrack_print": "heaptrack", "strace": "strace"}


@pytest.mark.parametrize("program", sorted(NEEDED))
def test_make_test_installs_what_the_tests_need(program):
    assert NEEDED[program] in makefile_packages("DEB_PACKAGES") + makefile_packages("DEB_TEST_PACKAGES")
