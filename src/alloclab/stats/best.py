"""Which candidate is best on a metric, in one rule for tune's race (which keeps the pick running
until its cost is decided: tune/race.py) and tune's answer (stats/tune_answer.py): decided better in
at least one workload and worse in none, the largest geometric-mean gain over the workloads, leaving
out what `exclude` rules out (a peak RSS beyond --max-rss-increase).

And the two axes a candidate is judged on: speed (the primary metric) and memory (peak RSS, with RSS
at its end, after each phase and a memory metric of the user's beside it: memory_axis). A candidate
is better on both where it is decided better on one axis and better or equivalent on the other.

The lead pick of an answer (tune's, and compare's, run's, suite's and report's recommendation
through stats/recommend.py) is the least invasive fix among those whose effect lies within the
margin of the best, in points of the default's value: a setting of the allocator the program already
runs, then a glibc setting, then another allocator. Why: an effect the margin calls too small to
matter does not pay for swapping the allocator a program was built and tested with (cacheidle,
linked to jemalloc: its own dirty_decay_ms=0 gives -96.6% at its end, tcmalloc's decommit -74.5%;
msgchurn: glibc TOP_PAD=1M -95.9% against mimalloc's -96.5%). A decided cost whose estimate is
below the margin does not demote a pick (time +1.7% [+0.7, +2.7] at a 2% margin): it is printed
beside it, as every effect of a pick is.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable

from alloclab.stats.analysis import Analysis, WorkloadResult
from alloclab.stats.estimates import Comparison
from alloclab.workloads.metrics import PEAK_RSS, is_memory
from alloclab.workloads.primary import primary_metrics

MetricOf = Callable[[WorkloadResult], "str | list[str] | None"]
SYSTEM = "glibc"
OWN, GLIBC, OTHER = 0, 1, 2     # how invasive a fix is: the lead pick's order
EPS = 1e-9


def own_allocator(a: Analysis) -> str:
    """The allocator the default runs: the tune record's (a program linked to jemalloc runs jemalloc
    with nothing preloaded, tune/baseline.py), else the baseline variant's."""
    config = getattr(a.experiment, "config", None)
    rec = getattr(config, "tune", None)
    if rec is not None and (rec.baseline or {}).get("allocator"):
        return rec.baseline["allocator"]
    return a.experiment.variants[a.baseline_idx].allocator or SYSTEM


def invasiveness(a: Analysis, vi: int) -> int:
    """OWN: a setting of the allocator the default runs; GLIBC: a glibc setting; OTHER: another
    allocator, with or without settings."""
    v = a.experiment.variants[vi]
    name = v.allocator or SYSTEM
    tuned = bool(v.settings) or ":" in (v.spec or "")
    if tuned and name == own_allocator(a):
        return OWN
    return GLIBC if tuned and name == SYSTEM else OTHER


def behind(lead: Comparison, c: Comparison) -> float:
    """How far c's effect falls short of lead's, in points of the default's value (0.221 for -74.5%
    against -96.6%); negative where c's is the larger."""
    return (lead.ratio - c.ratio) if c.higher_is_better else (c.ratio - lead.ratio)


def keyed(a: Analysis, metrics_of: Callable[[WorkloadResult], Iterable["str | None"]],
          vi: int) -> dict[tuple[str, str], Comparison]:
    return {(w.name, name): c for w in a.workloads for name in metrics_of(w)
            if name and (c := w.comparison(name, vi)) is not None and math.isfinite(c.ratio)}


def shortfall(a: Analysis, lead: int, vi: int, metrics_of) -> float:
    """How far vi falls short of lead on the comparisons lead is decided better on, at the most; inf
    where vi lacks one of them."""
    mine, theirs = keyed(a, metrics_of, vi), keyed(a, metrics_of, lead)
    return max((behind(c, mine[k]) if k in mine else math.inf for k, c in theirs.items() if c.verdict == "better"),
               default=0.0)


def within(a: Analysis, lead: int, vi: int, metrics_of) -> bool:
    """vi's effect is within the margin of lead's on every comparison lead is decided better on."""
    return shortfall(a, lead, vi, metrics_of) <= a.min_effect + EPS


def least_invasive(a: Analysis, lead: int, candidates: Iterable[int], metrics_of,
                   rank: Callable[[int], float]) -> int:
    """Of `lead` and the candidates within the margin of it on `metrics_of`, the least invasive; of as
    invasive ones, the one with the smaller decided cost, then the larger `rank`."""
    close = [vi for vi in dict.fromkeys([lead, *candidates]) if vi == lead or within(a, lead, vi, metrics_of)]
    return min(close, key=lambda vi: (invasiveness(a, vi), cost(a, vi), -rank(vi), vi != lead))


def cost(a: Analysis, vi: int) -> float:
    """The largest loss decided beyond a slight cost, on speed or a memory metric in some workload, in
    points of the default's value (3.856 for +385.6% peak RSS); 0 where none is."""
    return max((abs(c.ratio - 1) for c in speed_comparisons(a, vi) + memory_comparisons(a, vi)
                if verdict_of(c, a.min_effect) == "worse"), default=0.0)


def slight(c: Comparison, margin: float) -> bool:
    """Decided worse, but by an estimate below the margin: a cost printed beside a pick, not a veto."""
    return c.verdict == "worse" and math.isfinite(c.ratio) and abs(c.ratio - 1) <= margin + EPS


def verdict_of(c: Comparison, margin: float) -> str:
    return "equivalent" if slight(c, margin) else c.verdict


def primary(w: WorkloadResult) -> str | None:
    row = w.primary()
    return row.name if row is not None else None


def primaries(w: WorkloadResult) -> list[str]:
    """The metrics the workload's verdict rests on (every one marked primary, else its first; a user's
    memory metric may be one): what the speed pick is decided on, as `primary` was for one."""
    return [r.name for r in primary_metrics(w.rows)]


def speed_metrics(w: WorkloadResult) -> list[str]:
    """The metrics speed is judged on: every primary metric that is not memory (one, unless a command
    marks several, as the Ceph client's IOPS and CPU per I/O)."""
    return [r.name for r in w.speed_rows()]


def names_of(metric_of: MetricOf, w: WorkloadResult) -> list[str]:
    found = metric_of(w)
    return [n for n in ([found] if isinstance(found, str) or found is None else found) if n]


def comparisons(a: Analysis, metric_of: MetricOf, vi: int) -> list[Comparison]:
    return [c for w in a.workloads for name in names_of(metric_of, w) if (c := w.comparison(name, vi)) is not None]


def mean_gain(cs: Iterable[Comparison]) -> float:
    """The geometric mean of the gains (above 1: better); 0 where none is defined."""
    gains = [c.gain for c in cs if math.isfinite(c.ratio) and c.ratio > 0]
    return statistics.geometric_mean(gains) if gains else 0.0


def decided_best(a: Analysis, metric_of: MetricOf, candidates: Iterable[int],
                 exclude: Callable[[int], bool] = lambda vi: False,
                 rank: Callable[[int], float] | None = None) -> int | None:
    """Of the candidates decided better on the metric in at least one workload and worse in none, the
    least invasive within the margin of the one with the largest `rank` (the geometric-mean gain on the
    metric unless given); None where none is."""
    gains = {}
    for vi in candidates:
        cs = comparisons(a, metric_of, vi)
        if not cs or not any(c.verdict == "better" for c in cs) or any(c.verdict == "worse" for c in cs):
            continue
        if exclude(vi):
            continue
        gains[vi] = mean_gain(cs)
    order = rank or gains.__getitem__
    ranked = [vi for vi in gains if order(vi) > 0]
    if not ranked:
        return None
    best = max(ranked, key=order)   # the first of equals, as candidates come
    return least_invasive(a, best, ranked, lambda w: names_of(metric_of, w), order)


BAD_STATUS = ("ineffective",)   # measure/verify.py: the setting or allocator was not in effect


def usable(a: Analysis, vi: int) -> bool:
    """Not shown out of effect by the verification in any workload."""
    return all((v := w.verification.get(vi)) is None or v.status not in BAD_STATUS for w in a.workloads)


def too_big(a: Analysis, vi: int, max_rss_increase: float | None) -> bool:
    """Its peak RSS decided above the default's by more than --max-rss-increase in a workload."""
    return max_rss_increase is not None and any(
        (c := w.comparison(PEAK_RSS, vi)) is not None and c.verdict == "worse" and c.ratio - 1 > max_rss_increase
        for w in a.workloads)


def speed_pick(a: Analysis, max_rss_increase: float | None = None) -> int | None:
    """The answer's best for speed, which the race keeps running until its cost is decided: the usable
    candidate decided best on the primary metric, within the memory budget."""
    racers = [vi for vi in range(len(a.labels)) if vi != a.baseline_idx and usable(a, vi)]
    return speed_best(a, racers, lambda vi: too_big(a, vi, max_rss_increase))


def speed_best(a: Analysis, candidates: Iterable[int], exclude: Callable[[int], bool] = lambda vi: False) -> int | None:
    """The speed pick among candidates, memory's cost weighed as in the order of those better on both:
    the largest product of the two axes' gains is the best (simple: tcmalloc-minimal at -50.7% and peak
    RSS x4.8 ranks below mimalloc at -46.5% and +23.3%), then the least invasive within the margin of
    it on speed. compare, run, suite and report pick by it too (stats/recommend.py)."""
    def rank(vi: int) -> float:
        memory = [c for w in a.workloads for name in memory_metrics(w) if name not in primaries(w)
                  and (c := w.comparison(name, vi)) is not None]
        return mean_gain(comparisons(a, primaries, vi)) * (mean_gain(memory) or 1.0)
    return decided_best(a, primaries, candidates, exclude, rank=rank)


def memory_metrics(w: WorkloadResult) -> list[str]:
    """The memory metrics a workload was judged on: peak RSS, at its end, after each phase, and any
    memory metric of the user's (the primary one is speed's only when it is not memory)."""
    return [r.name for r in w.rows if is_memory(r)]


def speed_comparisons(a: Analysis, vi: int) -> list[Comparison]:
    return comparisons(a, speed_metrics, vi)


def memory_comparisons(a: Analysis, vi: int) -> list[Comparison]:
    return [c for w in a.workloads for name in memory_metrics(w) if (c := w.comparison(name, vi)) is not None]


def axis(cs: list[Comparison], margin: float = 0.0) -> str:
    """Speed's state from its comparisons: 'better' (one decided better, every other better or
    equivalent), 'even' (all equivalent), 'worse' (one decided worse), else 'open'. One decided worse
    by an estimate below `margin` counts as equivalent (slight)."""
    verdicts = {verdict_of(c, margin) for c in cs}
    if not cs:
        return "open"
    if "worse" in verdicts:
        return "worse"
    if verdicts <= {"better", "equivalent"}:
        return "better" if "better" in verdicts else "even"
    return "open"


def memory_axis(a: Analysis, vi: int) -> str:
    """Memory's state: peak RSS, the headline, decides it ('better', 'even' as speed's), and any memory
    metric decided worse makes it 'worse'; one decided better (at the end, after a phase) makes it
    'better' where peak RSS is better or equivalent."""
    every = memory_comparisons(a, vi)
    if any(verdict_of(c, a.min_effect) == "worse" for c in every):
        return "worse"
    peak = axis([c for w in a.workloads if (c := w.comparison(PEAK_RSS, vi)) is not None], a.min_effect)
    if peak in ("better", "even") and any(c.verdict == "better" for c in every):
        return "better"
    return peak


def better_on_both(a: Analysis, vi: int) -> bool:
    """Decided better on one axis, and better or equivalent on every comparison of the other (a slight
    cost counted as equivalent)."""
    s, m = axis(speed_comparisons(a, vi), a.min_effect), memory_axis(a, vi)
    return (s == "better" and m in ("better", "even")) or (m == "better" and s in ("better", "even"))


def _gains(a: Analysis, vi: int) -> dict[tuple[str, str], float]:
    return {(w.name, name): c.gain for w in a.workloads
            for name in dict.fromkeys(primaries(w) + memory_metrics(w))
            if name and (c := w.comparison(name, vi)) is not None and math.isfinite(c.ratio) and c.ratio > 0}


def deciding_axis(a: Analysis, vi: int):
    """The axis a pick better on both owes its place to: the one of the larger mean gain over its
    decided-better comparisons (msgchurn's TOP_PAD: time, x25; cacheidle's decay: memory at its end, x29)."""
    def gain(metrics_of) -> float:
        return mean_gain(c for c in keyed(a, metrics_of, vi).values() if c.verdict == "better")
    return speed_metrics if gain(speed_metrics) >= gain(memory_metrics) else memory_metrics


def both_front(a: Analysis, candidates: Iterable[int]) -> list[int]:
    """The candidates better on both axes that no other such candidate beats on every comparison, the
    larger product of their two axes' gains first (one that gains more on both comes first); the
    first is the lead, the least invasive within the margin of the best on its deciding axis, which
    comes first even where another beats it by less than the margin."""
    found = [vi for vi in candidates if better_on_both(a, vi)]
    gains = {vi: _gains(a, vi) for vi in found}

    def beaten(vi: int) -> bool:
        mine = gains[vi]
        return any(o != vi and gains[o].keys() >= mine.keys() and all(gains[o][k] >= g for k, g in mine.items())
                   and gains[o] != mine for o in found)

    def both_gain(vi: int) -> float:
        return product(a, vi)

    front = sorted((vi for vi in found if not beaten(vi)), key=both_gain, reverse=True)
    if not front:
        return front
    lead = least_invasive(a, front[0], found, deciding_axis(a, front[0]), both_gain)
    return [lead] + [vi for vi in front if vi != lead]


def product(a: Analysis, vi: int) -> float:
    """The product of the two axes' geometric-mean gains (memory's 1 where it has no comparison)."""
    return mean_gain(speed_comparisons(a, vi)) * (mean_gain(memory_comparisons(a, vi)) or 1.0)


def costs_no_time(a: Analysis, vi: int) -> bool:
    """Decided better or equivalent on speed in every workload (a slight cost counted as equivalent)."""
    return axis(speed_comparisons(a, vi), a.min_effect) in ("better", "even")
