"""How stats/recommend.py picks among its points (a workload's or the overall's variants) by
stats/best.py's rule, the one tune's answer follows: the paired estimates rank, not the cells' raw
medians; the least invasive within the margin leads; memory's cost is weighed as tune weighs it. Apart
from recommend.py, which words the picks, so that each stays under the layout's length."""

from __future__ import annotations

import math

from alloclab.stats import best as best_rule
from alloclab.stats import memory
from alloclab.stats.analysis import Analysis, WorkloadResult
from alloclab.stats.estimates import format_comparison
from alloclab.workloads.metrics import PEAK_RSS, memory_goal


def paired_gain(higher_is_better: bool):
    """A point's speed as its paired estimate against the default, above 1 when better: not its
    cell's raw median, which ranked tcmalloc over tcmalloc-minimal on xthread against the estimates."""
    def gain(p) -> float:
        r = p.speed_ratio
        if not math.isfinite(r) or r <= 0:
            return 0.0
        return r if higher_is_better else 1 / r
    return gain


def lead(scoped: Analysis, pool: list, gain):
    """stats/best.py's speed pick among the pool, as tune's answer picks it; the largest paired gain
    where it names none."""
    vi = best_rule.speed_best(scoped, [p.variant_idx for p in pool])
    return next((p for p in pool if p.variant_idx == vi), None) or max(pool, key=gain)


def costs_time(a: Analysis, p) -> bool:
    """Decided slower by more than the margin: a slight cost is named beside a memory pick, as tune's
    answer does (stats/best.py)."""
    return p.speed_verdict == "worse" and not (math.isfinite(p.speed_ratio) and abs(p.speed_ratio - 1)
                                               <= a.min_effect + best_rule.EPS)


def leanest(a: Analysis, leaner: list):
    """The one that holds least after a phase, then at its peak; of those within the margin of it on
    both, the least invasive (stats/best.py's order)."""
    def key(p) -> tuple[float, float]:
        return (p.holds_less.ratio if p.holds_less else 1.0, p.rss_ratio if math.isfinite(p.rss_ratio) else 1.0)
    ref = min(leaner, key=key)
    close = [p for p in leaner if all(x - y <= a.min_effect + best_rule.EPS for x, y in zip(key(p), key(ref)))]
    return min(close, key=lambda p: (best_rule.invasiveness(a, p.variant_idx), key(p)))


def passed_over(a: Analysis, ws: list[WorkloadResult], scope: str, pick, fastest, said: str) -> str:
    """Why a faster variant is not the pick: what it holds more after a phase, or stats/best.py's rule
    (within the margin, the less invasive; else the larger product of the speed and memory gains)."""
    faster = f"{fastest.label} {'is faster (' + said + ')' if said else 'ranks higher'}"
    if fastest.keeps_more:
        return f" {faster} but {memory.keeps_more_text(a, ws, {fastest.variant_idx: fastest.keeps_more}, scope)}."
    if best_rule.within(a, fastest.variant_idx, pick.variant_idx, lambda w: [best_rule.primary(w)]):
        return (f" {faster}, within the ±{a.min_effect * 100:g}% margin of {pick.label}, which changes less or "
                f"costs less memory.")
    return f" {faster}, but {pick.label} gains more on speed and memory together{_tipped(ws, pick, fastest)}."


def _tipped(ws: list[WorkloadResult], pick, fastest) -> str:
    """The memory figure beyond the peak shown where the pick gains most over the faster one, so that
    the reader sees why: ' (anonymous RSS at its end -67.5% [...] against mimalloc's ? +129.2% [...])'."""
    best = None
    for w in ws:
        for name in best_rule.memory_metrics(w):
            mine, theirs = w.comparison(name, pick.variant_idx), w.comparison(name, fastest.variant_idx)
            if name == PEAK_RSS or mine is None or theirs is None or not (mine.gain > 0 and theirs.gain > 0):
                continue
            edge = mine.gain / theirs.gain
            if edge > 1 and (best is None or edge > best[0]):
                best = (edge, name, mine, theirs)
    if best is None:
        return ""
    _, name, mine, theirs = best
    goal = memory_goal(name) or name
    words = {"memory at its end": "anonymous RSS at its end"}.get(goal, goal.replace("memory after ", "RSS after ")
                                                                   .removeprefix("memory: "))
    return f" ({words} {format_comparison(mine)} against {fastest.label}'s {format_comparison(theirs)})"
