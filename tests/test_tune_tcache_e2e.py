"""glibc's tcache tunable proposed by a rule: a program bound by small allocations that builds and
frees bursts of dozens of small nodes (tests/programs/smallburst.c) is raced with
glibc.malloc.tcache_count=256, read back in effect (by hand, bench/tcache_hand.py: x0.55-0.6 the
CPU). A program whose allocations are large does not fire the rule (the control)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e


def test_small_bursts_are_raced_with_a_larger_tcache(cli, build, store_of):
    p = cli("tune", "--budget", "1m", "--max-runs", "5", "-a", "glibc", "--", str(build("smallburst")), "60000", "64",
            timeout=300)
    out = " ".join(p.stdout.split())
    assert p.returncode == 0, p.stdout + p.stderr
    assert "rules fired: glibc-tcache-small" in out and "of them of at most 1 KiB" in out, out
    store = store_of(cli.db)
    race = store.load(next(x.id for x in store.listing() if x.kind == "tune"))
    assert [v.spec for v in race.variants] == ["glibc", "glibc:glibc.malloc.tcache_count=256"]
    got = {race.variants[vi].label: v for (_, vi), v in race.verifications.items()}
    assert got["glibc tcache_count=256"].status == "verified", got
    assert "glibc.malloc.tcache_count = 256" in " ".join(got["glibc tcache_count=256"].notes), got


def test_large_blocks_do_not_fire_the_tcache_rule(cli, build):
    # bigheap: a few large blocks, a small allocation rate.
    p = cli("tune", "--budget", "1m", "--max-runs", "3", "-a", "glibc", "--", str(build("bigheap")), "64", timeout=300)
    assert p.returncode in (0, 3), p.stdout + p.stderr
    assert "glibc-tcache-small" not in " ".join(p.stdout.split()).split("silent:")[0], p.stdout
