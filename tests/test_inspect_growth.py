"""What a watch says grew (store/inspect_model.growth and its words in report/inspect.py), on
samples as the store keeps them: the part that grew most from a process's first sample to its last,
by at least 1 MiB, with its share of the anonymous RSS's growth; each process on its own."""

from __future__ import annotations

from alloclab.report.inspect import growth_line
from alloclab.store.inspect_model import Inspection, growth

MIB = 1 << 20


def sample(pid: int, t: float, anon: int, **parts: int) -> Inspection:
    return Inspection.from_dict({"snapshot": {"pid": pid, "t_s": t, "split": {"anon": anon, "parts": parts}}})


def test_the_part_that_grew_most_is_named_with_its_share():
    items = [sample(7, 0.0, 20 * MIB, live=10 * MIB, free_top=2 * MIB),
             sample(7, 1.0, 24 * MIB, live=11 * MIB, free_top=4 * MIB),
             sample(7, 2.0, 30 * MIB, live=12 * MIB, free_top=10 * MIB)]
    (g,) = growth(items)
    assert (g.pid, g.samples, g.t_s) == (7, 3, 2.0)
    assert g.grew == "free_top" and g.change == 8 * MIB and g.share == 0.8
    assert {r["part"]: r["change"] for r in g.parts} == {"live": 2 * MIB, "free_top": 8 * MIB}
    assert growth_line(g) == ("Process 7 over 2.0 s (3 samples): free at the top grew most, +8.0 MiB, 80% of "
                              "the anonymous RSS's growth (+10.0 MiB).")


def test_below_a_mebibyte_nothing_grew_and_a_shrinking_rss_has_no_share():
    (flat,) = growth([sample(1, 0, 10 * MIB, live=5 * MIB), sample(1, 1, 10 * MIB, live=5 * MIB + (512 << 10))])
    assert flat.grew is None and "no part grew by 1.0 MiB or more" in growth_line(flat)
    (moved,) = growth([sample(2, 0, 20 * MIB, live=5 * MIB, free_inside=10 * MIB),
                       sample(2, 1, 18 * MIB, live=10 * MIB, free_inside=3 * MIB)])
    assert moved.grew == "live" and moved.share is None
    assert growth_line(moved).endswith("+5.0 MiB; the anonymous RSS changed -2.0 MiB.")


def test_each_process_on_its_own_and_one_sample_is_no_growth():
    items = [sample(1, 0, MIB, live=MIB), sample(2, 0, MIB, live=MIB), sample(1, 1, 5 * MIB, live=5 * MIB),
             sample(3, 0, MIB, live=MIB), sample(2, 1, 5 * MIB, live=MIB, free_top=4 * MIB)]
    assert [(g.pid, g.grew) for g in growth(items)] == [(1, "live"), (2, "free_top")]
