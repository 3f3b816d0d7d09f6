"""The answer of an inspection from a snapshot's figures (pure logic: the snapshots of real processes
are tests/test_inspect_*_e2e.py's): the memory rules read the split through the fingerprint's
readings; where glibc's thresholds could not be read no threshold is claimed, and the answer says
what the walk shows; jemalloc's malloc_stats_print text becomes the mallctl names of its books."""

from __future__ import annotations

from alloclab.measure.inspect.channels import parse_malloc_stats
from alloclab.store.fingerprint_model import MemorySplit
from alloclab.store.inspect_model import Snapshot
from alloclab.tune.inspection import answer, diff

MiB = 1 << 20


def _snap(thresholds: dict, **parts) -> Snapshot:
    parts = {"live": 2 * MiB, "free_top": 0, "free_inside": 0, "caches": 0, "metadata": 0, "other": MiB} | parts
    anon = sum(parts.values())
    books = {"arenas": 1, "arena_free": 0} | thresholds
    return Snapshot(pid=1, cmdline=["/usr/bin/prog", "--serve"], exe="/usr/bin/prog", allocator="glibc", threads=1,
                    thresholds=thresholds, split=MemorySplit("inspect", None, anon, parts, {}, 0, books, 0),
                    source="glibc's heaps, walked from outside")


RAISED = {"trim_threshold": 62 * MiB, "mmap_threshold": 31 * MiB, "thresholds_fixed": 0, "raised_by": 31 * MiB}


def test_a_top_kept_under_a_raised_threshold_fires_the_trim_rule_with_its_lines():
    a = answer(_snap(RAISED, free_top=48 * MiB))
    (f,) = [f for f in a.fired if f.rule == "glibc-trim-raised"]
    assert "48 MiB free at the heap's top now" in f.mechanism
    (s,) = f.settings
    assert s.spec == "glibc:MALLOC_TRIM_THRESHOLD_=8M"
    assert s.env_line == "MALLOC_TRIM_THRESHOLD_=8388608 /usr/bin/prog --serve"
    assert 'Environment="MALLOC_TRIM_THRESHOLD_=8388608"' in s.systemd
    assert a.race == "alloclab tune -- /usr/bin/prog --serve" and not a.said


def test_without_thresholds_no_threshold_is_claimed():
    a = answer(_snap({}, free_top=48 * MiB))
    assert "glibc-trim-raised" not in {f.rule for f in a.fired}
    assert a.said == ["48 MiB free at the top, kept"]


def test_a_fixed_threshold_is_no_raised_one():
    a = answer(_snap(RAISED | {"thresholds_fixed": 1}, free_top=48 * MiB))
    assert "glibc-trim-raised" not in {f.rule for f in a.fired}


def test_a_small_top_is_not_worth_a_rule():
    a = answer(_snap(RAISED, free_top=4 * MiB))
    assert not a.fired


def test_the_diff_says_which_part_grew():
    a, b = _snap({}, free_inside=MiB), _snap({}, free_inside=9 * MiB, live=3 * MiB)
    d = diff(a, b)
    assert d["same_process"] and d["grew_most"] == "free_inside"
    assert {r["part"]: r["change"] for r in d["parts"]}["live"] == MiB


STATS = """___ Begin jemalloc statistics ___
Page size: 4096
Allocated: 1000, active: 8192, metadata: 5000 (n_thp 0), resident: 20480, mapped: 40960, retained: 0
Merged arenas stats:
decaying:  time       npages       sweeps     madvises       purged
   dirty: 10000            3            1          158         5867
   muzzy:     0            2            0            0            0
tcache_bytes:                   700
arenas[0]:
decaying:  time       npages       sweeps     madvises       purged
   dirty: 10000            3            1          158         5867
   muzzy:     0            2            0            0            0
tcache_bytes:                   700
--- End jemalloc statistics ---
"""


def test_malloc_stats_print_text_becomes_the_mallctl_names():
    got = parse_malloc_stats(STATS)
    assert got["stats.allocated"] == 1000 and got["stats.active"] == 8192 and got["stats.metadata"] == 5000
    # The merged arenas once, not the merged and each arena again.
    assert got["stats.arenas.4096.pdirty"] == 3 and got["stats.arenas.4096.pmuzzy"] == 2
    assert got["stats.arenas.4096.tcache_bytes"] == 700 and got["arenas.page"] == 4096
