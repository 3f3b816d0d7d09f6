"""Under CI=true a missing prerequisite that `make test` installs fails its test instead of skipping
it: a green CI must mean the end-to-end tests ran."""

from __future__ import annotations

import pytest

import conftest


@pytest.mark.parametrize("ci, outcome", [(False, pytest.skip.Exception), (True, pytest.fail.Exception)])
def test_missing_prerequisite_skips_locally_and_fails_under_ci(monkeypatch, ci, outcome):
    monkeypatch.setattr(conftest, "IN_CI", ci)
    with pytest.raises(outcome, match="frobnicator is not installed"):
        conftest.missing_prerequisite("frobnicator is not installed (apt-get install -y frobnicator)")


def test_require_allocator_goes_through_it(monkeypatch):
    monkeypatch.setattr(conftest, "IN_CI", True)
    monkeypatch.setattr(conftest, "installed_allocators", lambda: [])
    with pytest.raises(pytest.fail.Exception, match="jemalloc is not installed"):
        conftest.require_allocator("jemalloc")
