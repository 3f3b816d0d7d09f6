"""Which candidate is best on a metric, in one rule for tune's race (which keeps the pick running
until its cost is decided: tune/race.py) and tune's answer (stats/tune_answer.py): decided better in
at least one workload and worse in none, the largest geometric-mean gain over the workloads, leaving
out what `exclude` rules out (a peak RSS beyond --max-rss-increase).

And the two axes a candidate is judged on: speed (the primary metric) and memory (peak RSS, with RSS
at its end, after each phase and a memory metric of the user's beside it: memory_axis). A candidate
is better on both where it is decided better on one axis and better or equivalent on the other.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable

from alloclab.stats.analysis import Analysis, WorkloadResult
from alloclab.stats.estimates import Comparison
from alloclab.workloads.metrics import PEAK_RSS, is_memory

MetricOf = Callable[[WorkloadResult], "str | None"]


def primary(w: WorkloadResult) -> str | None:
    row = w.primary()
    return row.name if row is not None else None


def comparisons(a: Analysis, metric_of: MetricOf, vi: int) -> list[Comparison]:
    return [c for w in a.workloads if (name := metric_of(w)) and (c := w.comparison(name, vi)) is not None]


def mean_gain(cs: Iterable[Comparison]) -> float:
    """The geometric mean of the gains (above 1: better); 0 where none is defined."""
    gains = [c.gain for c in cs if math.isfinite(c.ratio) and c.ratio > 0]
    return statistics.geometric_mean(gains) if gains else 0.0


def decided_best(a: Analysis, metric_of: MetricOf, candidates: Iterable[int],
                 exclude: Callable[[int], bool] = lambda vi: False) -> int | None:
    """The candidate decided better on the metric in at least one workload and worse in none, with the
    largest geometric-mean gain; None where none is."""
    best, best_gain = None, 0.0
    for vi in candidates:
        cs = comparisons(a, metric_of, vi)
        if not cs or not any(c.verdict == "better" for c in cs) or any(c.verdict == "worse" for c in cs):
            continue
        if exclude(vi):
            continue
        gain = mean_gain(cs)
        if gain > best_gain:
            best, best_gain = vi, gain
    return best


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
    return decided_best(a, primary, racers, lambda vi: too_big(a, vi, max_rss_increase))


def memory_metrics(w: WorkloadResult) -> list[str]:
    """The memory metrics a workload was judged on: peak RSS, at its end, after each phase, and any
    memory metric of the user's (the primary one is speed's only when it is not memory)."""
    return [r.name for r in w.rows if is_memory(r)]


def speed_comparisons(a: Analysis, vi: int) -> list[Comparison]:
    return [c for w in a.workloads if (row := w.primary()) is not None and not is_memory(row)
            and (c := w.comparison(row.name, vi)) is not None]


def memory_comparisons(a: Analysis, vi: int) -> list[Comparison]:
    return [c for w in a.workloads for name in memory_metrics(w) if (c := w.comparison(name, vi)) is not None]


def axis(cs: list[Comparison]) -> str:
    """Speed's state from its comparisons: 'better' (one decided better, every other better or
    equivalent), 'even' (all equivalent), 'worse' (one decided worse), else 'open'."""
    verdicts = {c.verdict for c in cs}
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
    if any(c.verdict == "worse" for c in every):
        return "worse"
    peak = axis([c for w in a.workloads if (c := w.comparison(PEAK_RSS, vi)) is not None])
    if peak in ("better", "even") and any(c.verdict == "better" for c in every):
        return "better"
    return peak


def better_on_both(a: Analysis, vi: int) -> bool:
    """Decided better on one axis, and better or equivalent on every comparison of the other."""
    s, m = axis(speed_comparisons(a, vi)), memory_axis(a, vi)
    return (s == "better" and m in ("better", "even")) or (m == "better" and s in ("better", "even"))


def _gains(a: Analysis, vi: int) -> dict[tuple[str, str], float]:
    return {(w.name, name): c.gain for w in a.workloads
            for name in dict.fromkeys([primary(w)] + memory_metrics(w))
            if name and (c := w.comparison(name, vi)) is not None and math.isfinite(c.ratio) and c.ratio > 0}


def both_front(a: Analysis, candidates: Iterable[int]) -> list[int]:
    """The candidates better on both axes that no other such candidate beats on every comparison, the
    larger product of their two axes' gains first (one that gains more on both comes first)."""
    found = [vi for vi in candidates if better_on_both(a, vi)]
    gains = {vi: _gains(a, vi) for vi in found}

    def beaten(vi: int) -> bool:
        mine = gains[vi]
        return any(o != vi and gains[o].keys() >= mine.keys() and all(gains[o][k] >= g for k, g in mine.items())
                   and gains[o] != mine for o in found)

    def product(vi: int) -> float:
        return mean_gain(speed_comparisons(a, vi)) * (mean_gain(memory_comparisons(a, vi)) or 1.0)

    return sorted((vi for vi in found if not beaten(vi)), key=product, reverse=True)


def costs_no_time(a: Analysis, vi: int) -> bool:
    """Decided better or equivalent on speed in every workload."""
    return axis(speed_comparisons(a, vi)) in ("better", "even")
