"""Runs that fall into two groups (stats/two_groups.py): said beside the pick whose effect is a
mixture, and never said of noise, a drift of a few percent or a tail of slow runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from alloclab.stats.two_groups import MIN_RUNS, split


def test_hugetlbs_runs_on_the_vm_split_where_the_kernel_gave_the_pages():
    # The 2026-12-02 bigheap race's shape: 0.07-0.10 s with the huge pages, 0.43-0.61 s without.
    rng = np.random.default_rng(7)
    fast, slow = rng.uniform(0.07, 0.10, 9), rng.uniform(0.43, 0.61, 11)
    lo, hi = split(list(rng.permutation(np.concatenate([fast, slow]))))
    assert (len(lo), len(hi)) == (9, 11) and max(lo) < 0.11 < 0.42 < min(hi)


@pytest.mark.parametrize("shape", ["normal 5%", "lognormal 30%", "t3 10%", "drift 8%", "slow tail 20%"])
def test_one_group_is_split_in_under_half_a_percent_of_draws(shape):
    rng = np.random.default_rng(11)
    for n in (MIN_RUNS, 20, 40, 93):
        def draw():
            if shape == "normal 5%":
                return 1 + 0.05 * rng.standard_normal(n)
            if shape == "lognormal 30%":
                return np.exp(0.3 * rng.standard_normal(n))
            if shape == "t3 10%":
                return np.exp(0.1 * rng.standard_t(3, n))
            if shape == "drift 8%":   # the machine slowing by 8% over the race
                return np.linspace(1, 1.08, n) * (1 + 0.02 * rng.standard_normal(n))
            # a fifth of the runs (in expectation) twice as slow: a tail, mostly under a quarter
            return np.where(rng.random(n) < 0.2, 2.0, 1.0) * (1 + 0.03 * rng.standard_normal(n))
        draws = [draw() for _ in range(2000)]
        said = sum(split(list(x)) is not None for x in draws)
        if shape.startswith("slow tail"):   # said only where the slow runs reached a quarter
            assert all((x > 1.5).mean() >= 0.25 for x in draws if split(list(x)) is not None), n
        else:
            assert said <= 10, (shape, n, said)


def test_too_few_runs_or_a_figure_that_never_varies_is_not_split():
    assert split([0.1] * 3 + [0.5] * 4) is None                  # 7 runs: below MIN_RUNS
    assert split([1000.0] * 20) is None
    assert split([1000.0] * 10 + [1010.0] * 10) is None          # 1% apart: below the 15% gap
    assert split([1_000.0] * 10 + [131_000.0] * 10) is not None  # page faults: none given, or all


def test_the_stored_hugetlb_race_says_its_runs_split_beside_the_pick(tmp_path):
    """`alloclab tune --budget 3m -a glibc -- tests/programs/bigheap 512` on the 2-core AMD EPYC VM
    (2026-12-03, THP madvise): the kernel gave huge pages in 6 of the 12 runs of hugetlb=1 (0.081 s)
    and not in the others (0.363 s; the default 0.389 s). The pick says so, in every format."""
    import json
    import shutil

    import jsonschema

    from alloclab.report import Options, export
    from alloclab.stats.results import build_results
    from alloclab.store.db import Store
    from test_report_schema import SCHEMA

    copy = tmp_path / "hugetlb.db"
    shutil.copyfile(Path(__file__).parent / "fixtures" / "hugetlb-tune.db", copy)
    results = build_results(Store(copy).load(None))
    tune = json.loads(export(results, "json", Options()))
    jsonschema.validate(tune, SCHEMA)
    (note,) = [n for n in tune["tune"]["two_groups"] if n["metric"] == "wall_s"]
    assert note["label"] == "glibc hugetlb=1" and (note["low"]["runs"], note["high"]["runs"]) == (6, 6), note
    assert note["low"]["median"] < 0.1 < 0.3 < note["high"]["median"] and not note["default_split"], note
    assert tune["tune"]["picks"][0]["label"] == "glibc hugetlb=1"
    for fmt in ("terminal", "md"):
        text = " ".join(export(results, fmt, Options()).split())
        assert ("two groups: /tmp/bigheap 512: its wall time runs (and its minor page faults alike) fell into two "
                "groups, 6 of 12 at 0.0809 s and 6 at 0.363 s (the default: 0.389 s): the setting acted in only "
                "some runs") in text, (fmt, text[:3000])
    assert "Two groups: /tmp/bigheap 512: its wall time runs" in export(results, "html", Options())
