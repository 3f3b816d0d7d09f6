"""The split of the anonymous RSS from an allocator's books (measure/fingerprint_books.py), the
merge of a tree's processes, which metrics are memory, and when a memory rule is worth racing:
pure logic, on figures written here (tests/test_books_e2e.py reads real ones)."""

from __future__ import annotations

from alloclab.catalog.tune_rules import load_rules
from alloclab.measure.fingerprint_books import ProcessBooks, books_of, split
from alloclab.measure.fingerprint_work import ProcessFile
from alloclab.tune.diagnosis import Reading
from alloclab.tune.prescribe import gives_enough
from alloclab.workloads.metrics import memory_goal

MIB = 1 << 20
OTHER = {"stacks": 1 * MIB, "libraries": MIB // 2, "interposer": MIB // 2, "own_maps": 0}


def test_glibc_top_and_bins_are_their_resident_parts():
    v = OTHER | {"anon": 30 * MIB, "allocator_maps": 28 * MIB, "live": 1 * MIB, "live_blocks": 1000,
                 "system": 26 * MIB, "fast": 0, "bins": 10 * MIB, "top": 14 * MIB, "mmap_count": 0,
                 "mmap_bytes": 0, "heap_resident": 26 * MIB, "top_resident": 12 * MIB, "mapped_resident": 0}
    sp = split("malloc_info", "end", 1.0, v)
    in_use = 26 * MIB - 10 * MIB - 14 * MIB
    assert sp.parts["free_top"] == 12 * MIB            # resident, not the 14 MiB of address space
    # The heap's resident pages less the top and the blocks in use (12 MiB), at most what the bins
    # hold (10 MiB): the 2 MiB the books cannot place stay unexplained.
    assert sp.parts["free_inside"] == 10 * MIB and 26 * MIB - 12 * MIB - in_use == 12 * MIB
    assert sp.parts["metadata"] == 8 * 1000 and sp.parts["caches"] == in_use - 1 * MIB - 8000   # tcache
    assert sp.parts["other"] == 2 * MIB and sp.unexplained == 30 * MIB - sum(sp.parts.values())


def test_jemalloc_metadata_is_its_resident_part_at_most_its_books():
    base = OTHER | {"anon": 40 * MIB, "live": 1 * MIB, "stats.allocated": 2 * MIB, "stats.active": 3 * MIB,
                    "stats.metadata": 3 * MIB, "stats.arenas.4096.pdirty": 8 * 256,
                    "stats.arenas.4096.pmuzzy": 0, "stats.arenas.4096.tcache_bytes": MIB, "arenas.page": 4096}
    sp = split("mallctl", "end", 1.0, base | {"allocator_maps": 11 * MIB + MIB // 2})
    assert sp.parts["decaying"] == 8 * MIB and sp.parts["caches"] == MIB and sp.parts["free_inside"] == MIB
    assert sp.parts["metadata"] == MIB // 2            # the mappings' rest, not the 3 MiB booked
    assert split("mallctl", "end", 1.0, base | {"allocator_maps": 20 * MIB}).parts["metadata"] == 3 * MIB


def test_mimalloc_is_held_not_split_and_unknown_books_say_nothing():
    sp = split("mi_process_info", "end", 1.0, OTHER | {"anon": 20 * MIB, "allocator_maps": 18 * MIB, "live": MIB,
                                                       "commit": 64 * MIB})
    assert sp.parts == {"live": MIB, "held": 17 * MIB, "other": 2 * MIB}
    assert split("malloc_info", "end", 1.0, OTHER | {"anon": -1, "allocator_maps": 1}) is None


def test_a_trees_books_sum_its_processes_and_keep_the_largest_threshold():
    names = ["anon", "allocator_maps", "stacks", "libraries", "interposer", "own_maps", "live", "mmap_threshold"]

    def proc(start_s, rows):
        return ProcessFile(start_ns=int(start_s * 1e9), books=ProcessBooks(
            "none", 1000, names, [[ms, *row] for ms, row in rows]).to_dict())

    a = proc(0, [(0, [10, 8, 1, 1, 0, 0, 2, 128]), (100, [20, 18, 1, 1, 0, 0, 2, 4096])])
    b = proc(0.05, [(0, [5, 4, 1, 0, 0, 0, 1, 256])])
    books = books_of([a, b], 0, 0.06, [])
    peak, end = books.at("peak"), books.at("end")
    assert peak.anon == 15 and peak.books["mmap_threshold"] == 256   # a's first row and b's
    assert end.anon == 25 and end.books["mmap_threshold"] == 4096    # each process's last
    assert books.rows[-1][0] == 0.1


def test_a_phase_whose_books_were_not_read_after_its_action_has_no_split():
    names = ["anon", "allocator_maps", "stacks", "libraries", "interposer", "own_maps", "live"]
    # Books read at 0, 100 and 500 ms; phases ending at 200 ms (read at 100), 400 ms (nothing read
    # since 200: its action's effect is not in the books) and 600 ms (read at 500).
    p = ProcessFile(start_ns=0, books=ProcessBooks("none", 1000, names, [
        [0, 10, 8, 1, 1, 0, 0, 2], [100, 20, 18, 1, 1, 0, 0, 12], [500, 6, 4, 1, 1, 0, 0, 2]]).to_dict())
    books = books_of([p], 0, None, [("load", 0.2), ("flush", 0.4), ("idle", 0.6)])
    assert books.at("after load").anon == 20 and books.at("after idle").anon == 6
    assert books.at("after flush") is None


def test_memory_metrics_by_name_and_unit():
    assert memory_goal("end_anon_mb") == "memory at its end"
    assert memory_goal("rss_after_flush_mb") == "memory after flush"
    assert memory_goal("rss_idle", "", False, "regex") == "memory: rss_idle"
    assert memory_goal("anon", "KiB", False, "json") == "memory: anon"
    assert memory_goal("tps", "", True, "regex") is None and memory_goal("idle_rss", "", True, "regex") is None
    assert memory_goal("wall_s") is None and memory_goal("max_rss_mb") is None


def test_a_memory_rule_races_only_what_could_beat_the_default():
    rule = next(r for r in load_rules() if r.name == "jemalloc-dirty-rest")
    glibc = Reading("glibc", "glibc", {"rest_anon": 2 * MIB})
    held = Reading("jemalloc", "jemalloc", {"rest_anon": 30 * MIB, "rest_decaying": 28 * MIB})
    # glibc already gave it back: jemalloc without its dirty pages would only match it
    assert not gives_enough(rule, held, glibc)
    assert gives_enough(rule, held, Reading("glibc", "glibc", {"rest_anon": 20 * MIB}))
    # a gain too small in bytes, however large its share
    assert not gives_enough(rule, Reading("jemalloc", "jemalloc", {"rest_anon": 5 * MIB, "rest_decaying": 4 * MIB}),
                            Reading("glibc", "glibc", {"rest_anon": 6 * MIB}))
