"""The quality checks run when a report asks for them: the per-variant subset alone gives the
same findings, in the same order, as the full checks filtered; a report that shows one metric's
warnings runs the full checks on that metric only."""

from __future__ import annotations

import math

from hypothesis import given, settings, strategies as st

from alloclab.stats import analysis
from alloclab.stats.findings import PER_VARIANT_FINDINGS, cell_findings


values = st.lists(st.one_of(st.floats(0.001, 1e6), st.just(math.nan)), max_size=30)


@settings(max_examples=200, deadline=None)
@given(vals=values, n_failed=st.integers(0, 5),
       durations=st.lists(st.floats(0.0001, 2.0), max_size=30),
       other_cpu=st.one_of(st.none(), st.lists(st.floats(0.0, 2.0), max_size=30)))
def test_the_per_variant_subset_is_the_full_checks_filtered_in_order(vals, n_failed, durations, other_cpu):
    kw = dict(n_failed=n_failed, durations_s=durations, other_cpu=other_cpu, n_cores=2, n_comparisons=3)
    full = [f for f in cell_findings(vals, **kw) if f.code in PER_VARIANT_FINDINGS]
    assert cell_findings(vals, per_variant_only=True, **kw) == full


def test_a_cell_runs_its_checks_once_and_only_when_asked():
    calls = []

    def check(per_variant_only):
        calls.append(per_variant_only)
        return cell_findings([1.0, 1.0, 50.0, 1.0], n_failed=1, durations_s=[0.001] * 4,
                             per_variant_only=per_variant_only)

    c = analysis.Cell(0, [1.0, 1.0, 50.0, 1.0], [], None, check=check)
    assert calls == []
    assert [f.code for f in c.per_variant_findings()] == ["failed-runs", "short-runs"]
    assert calls == [True]
    full = c.findings
    assert c.findings is full and calls == [True, False]
    assert [f.code for f in c.per_variant_findings()] == ["failed-runs", "short-runs"] and calls == [True, False]
