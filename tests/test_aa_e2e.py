"""Does `alloclab compare` decide correctly on real runs?  A small A/A experiment (one allocator
under two labels) and a real injected slowdown, both through the real CLI and the built-in
`simple` workload.  The error rates themselves are measured by bench/aa_power.py
(docs/statistics.md); these tests check the whole pipeline on one experiment each."""

from __future__ import annotations

import pytest

from alloclab.stats import estimates as stats
from alloclab.stats.analysis import analyze
from alloclab.workloads import builtin

pytestmark = pytest.mark.e2e

NS = "ns=json:ns_per_pair:lower"
RATE = "rate=json:pairs_per_s:higher"
# The slowed variant sets this variable; a fixed wrapper turns it into the program's flag, so the
# only difference between the variants is the extra work (same allocator, same binary).
EXTRA_VAR = "AA_EXTRA_WORK"
WRAPPER = ["/bin/sh", "-c", f'exec "$@" --extra-work="${{{EXTRA_VAR}:-0}}"', "sh"]


@pytest.fixture(scope="module")
def simple():
    defn = builtin.get("simple")
    return [str(builtin.binary(defn)), *defn.quick_args]


def _only_comparison(store_of, db, metric: str, runs: int) -> stats.Comparison:
    a = analyze(store_of(db).load())
    row = a.workloads[0].row(metric)
    assert row is not None, f"metric {metric} missing"
    assert all(len(c.values) == runs for c in row.cells), [len(c.values) for c in row.cells]
    (cmp,) = [c.comparison for c in row.cells if c.comparison is not None]
    return cmp


def test_same_allocator_under_two_labels_is_no_significant_difference(cli, store_of, simple):
    p = cli("compare", "-a", "glibc@a", "-a", "glibc@b", "--runs", "7", "-m", NS, "--", *simple)
    assert p.returncode == 0, p.stderr
    c = _only_comparison(store_of, cli.db, "ns", 7)
    # Why not simply `verdict == "same"`: a correct test says "different" in 5% of A/A experiments
    # by design, so that assertion would fail one CI run in twenty.  What an honest pipeline cannot
    # produce is a complete separation of the two labels' runs: with 7 runs each that has
    # probability 2/C(14,7) = 0.06% when the runs are exchangeable, and gives the smallest exact
    # Mann-Whitney p, 0.0006.  A systematic bias (one label always run first, a different
    # environment, the verification run counted) separates them, and fails here.
    assert c.p_adjusted > 0.001, c
    # The table shows exactly what the analysis decided ("~ (p=0.41)" when not significant).
    assert stats.format_comparison(c) in p.stdout, p.stdout


def test_injected_slowdown_is_worse_with_the_right_sign(cli, store_of, simple):
    # One unit of extra work costs about 2.5-3% of a malloc+free pair on the development VM
    # (docs/statistics.md), so 48 units about double the time per pair; the test requires at
    # least +30%, measured, so that it says nothing about effects the noise could hide. 8 runs: the
    # trimmed t has h - 2 degrees of freedom (docs/statistics.md), 2 at 6 runs, and one slow block
    # on a shared CI machine then leaves the interval across 1.
    p = cli("compare", "-a", "glibc@base", "-a", f"glibc:{EXTRA_VAR}=48@slow", "--runs", "8",
            "-m", NS, "-m", RATE, "--", *WRAPPER, *simple)
    assert p.returncode == 0, p.stderr
    ns = _only_comparison(store_of, cli.db, "ns", 8)
    # Lower is better for ns: more ns per pair is a ratio above 1, printed with a + sign, "worse".
    assert ns.ratio >= 1.3 and ns.ci_low > 1, ns
    assert ns.verdict == "worse" and ns.p_adjusted < 0.05, ns
    assert stats.format_comparison(ns).startswith("+")
    # Higher is better for the rate: the same slowdown is a ratio below 1, a - sign, still "worse".
    rate = _only_comparison(store_of, cli.db, "rate", 8)
    assert rate.ratio <= 1 / 1.3 and rate.ci_high < 1, rate
    assert rate.verdict == "worse"
    assert stats.format_comparison(rate).startswith("-")
    for c in (ns, rate):
        assert stats.format_comparison(c) in p.stdout
