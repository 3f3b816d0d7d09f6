"""Where one workload carries a mean across workloads: a geomean of ratios, where one workload's
x200 can make it x2 while the others are a wash. The suite's geomean of a variant's speed is carried
when leaving one out takes it across 1. Where the overall pick's counts tie (stats/across.py), the
best per workload and the Pareto set are said instead of a pick.

In: the analysis (and the recommendation's per-workload choices). Out: the sentences.
"""

from __future__ import annotations

import math
import statistics

from alloclab.stats.analysis import Analysis, is_speed


def carried_geomeans(a: Analysis) -> dict[str, str]:
    base = a.baseline_idx
    out = {}
    for vi, label in enumerate(a.labels):
        if vi == base:
            continue
        ratios = []   # (workload, the ratio of medians oriented so that > 1 is faster)
        for w in a.workloads:
            p = w.primary()
            if p is None or not is_speed(p):
                continue
            b, v = p.cells[base].summary.median, p.cells[vi].summary.median
            if b and v and math.isfinite(b) and math.isfinite(v) and b > 0 and v > 0:
                ratios.append((w.name, v / b if p.higher_is_better else b / v))
        if len(ratios) < 3:
            continue
        whole = statistics.geometric_mean(r for _, r in ratios)
        for name, _ in ratios:
            rest = statistics.geometric_mean(r for n, r in ratios if n != name)
            if (whole > 1) != (rest > 1):
                out[label] = (f"{label}'s geomean (x{whole:.3f}) rests on {name}: without it, "
                              f"x{rest:.3f}")
                break
    return out


def geomean(ratios: list[float]) -> float:
    """Of the finite positive ratios; nan where there is none."""
    logs = [math.log(r) for r in ratios if math.isfinite(r) and r > 0]
    return math.exp(sum(logs) / len(logs)) if logs else math.nan


def _speedups(choices: list, vi: int) -> list[float]:
    """A variant's primary-metric ratio in each workload, oriented so that > 1 is better."""
    out = []
    for c in choices:
        r = c.points[vi].speed_ratio
        out.append(r if c.higher_is_better else (1 / r if r else math.nan))
    return out


def no_single_pick(a: Analysis, choices: list, tied: list[str]) -> str:
    """Where the counts tie (stats/across.py): which variant wins where, and the Pareto set."""
    base, n = a.labels[a.baseline_idx], len(choices)
    best = [f"{c.scope}: {a.labels[c.pick]}" if c.pick is not None else f"{c.scope}: {base} (nothing decided better)"
            for c in choices]
    gains = {vi: _speedups(choices, vi) for vi in range(len(a.labels))}
    pareto = [a.labels[vi] for vi in range(len(a.labels))
              if not any(u != vi and all(x >= y for x, y in zip(gains[u], gains[vi]))
                         and any(x > y for x, y in zip(gains[u], gains[vi])) for u in gains)]
    return (f"No single variant is picked for all {n} workloads: {', '.join(tied[:-1])} and {tied[-1]} are each "
            f"decided better than {base} on as many and worse on none. Best per workload: {'; '.join(best)}. "
            f"Pareto set across the workloads (no other variant does better on every one): {', '.join(pareto)}.")


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point dominates; each point is (speed, memory) with higher
    speed and lower memory better. Points with an undefined coordinate are never on the front."""
    ok = [i for i, (s, m) in enumerate(points) if math.isfinite(s) and math.isfinite(m)]
    front = []
    for i in ok:
        si, mi = points[i]
        dominated = any(points[j][0] >= si and points[j][1] <= mi and (points[j][0] > si or points[j][1] < mi)
                        for j in ok if j != i)
        if not dominated:
            front.append(i)
    return front
