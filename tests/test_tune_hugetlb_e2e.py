"""glibc's tunables proposed by a rule: a program that faults in a large heap page by page, where the
kernel gives transparent huge pages on request only (THP "madvise"), is raced with
glibc.malloc.hugetlb=1, which asks for them for glibc's heap (512 MiB: 131,000 faults -> 1,100 by
hand). Where THP is "always" or "never" the tunable changes nothing, and the rule stays silent."""

from __future__ import annotations

import os
import statistics
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def _thp_madvise() -> bool:
    try:
        return "[madvise]" in THP.read_text()
    except OSError:
        return False


def test_a_heap_faulted_in_page_by_page_is_raced_with_hugetlb(cli, build, store_of):
    prog = build("bigheap")
    p = cli("tune", "--budget", "3m", "-a", "glibc", "--", str(prog), "512", timeout=300)
    out = " ".join(p.stdout.split())
    assert p.returncode in (0, 3), p.stdout + p.stderr
    if not _thp_madvise():
        # The tunable asks for huge pages with madvise: under "always" or "never" it changes nothing.
        assert "rules fired: glibc-heap-faults" not in out and "hugetlb" not in out, out
        return
    assert p.returncode == 0, p.stdout + p.stderr
    assert "rules fired: glibc-heap-faults" in out and "faults in 513 MiB of heap page by page" in out, out
    # By hand: the huge pages were given (AnonHugePages), where the default got none.
    hand = {}
    for env in ({}, {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}):
        text = subprocess.run([str(prog), "512"], capture_output=True, text=True, check=True,
                              env={"PATH": os.environ["PATH"], **env}).stdout
        hand[bool(env)] = int(text.split("anon_huge_kb:")[1].split()[0])
    assert hand[True] >= 256 << 10 and hand[False] < 64 << 10, hand
    store = store_of(cli.db)
    race = store.load(next(x.id for x in store.listing() if x.kind == "tune"))
    assert [v.spec for v in race.variants] == ["glibc", "glibc:glibc.malloc.hugetlb=1"]
    got = {race.variants[vi].label: v for (_, vi), v in race.verifications.items()}
    assert "glibc.malloc.hugetlb = 1" in " ".join(got["glibc hugetlb=1"].notes) and \
        got["glibc hugetlb=1"].status == "verified", got
    faults = {vi: statistics.median(r.metrics["minflt"] for r in race.runs
                                    if r.variant_idx == vi and r.status == "ok" and not r.warmup) for vi in (0, 1)}
    assert faults[1] < faults[0] / 20, faults
