"""Where one workload carries a mean across workloads: a geomean of ratios, where one workload's
x200 can make it x2 while the others are a wash. The overall pick is carried when leaving one
workload out changes its sign or the pick (then no single variant is picked: the best per workload,
who is decided no worse anywhere, and the Pareto set are said instead); the suite's geomean of a
variant's speed is carried when leaving one out takes it across 1.

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


def carried_pick(a: Analysis, choices: list, points: list, pick: int, overall_verdict) -> str | None:
    """Where one workload carries the overall pick (stats/recommend.py's Choices and Points): without
    it, the pick's geomean is a loss, or another of the variants it was chosen among (decided better
    somewhere and worse nowhere: `overall_verdict` reads that across workloads) has the largest
    geomean. Says which workload and how, or None."""
    # The variants the pick was chosen among (decided better somewhere, worse nowhere): leaving a
    # workload out re-weighs their means; it does not make eligible one that lost there.
    eligible = [vi for vi in range(len(a.labels)) if vi != a.baseline_idx and points[vi].usable
                and overall_verdict([x.points[vi].speed_verdict for x in choices]) == "better"]
    for k, c in enumerate(choices):
        rest = [x for j, x in enumerate(choices) if j != k]

        def without(vi: int) -> float:
            return geomean(_speedups(rest, vi))

        other = max(eligible, key=without, default=None)
        if without(pick) <= 1 or other != pick:
            then = (f"{a.labels[other]} would be the pick (x{without(other):.3f})" if other is not None and other != pick
                    else "nothing would be")
            return (f"the largest geomean (x{points[pick].speed:.3f}, {a.labels[pick]}) rests on {c.scope}: without it "
                    f"{a.labels[pick]}'s is x{without(pick):.3f} and {then}")
    return None


def no_single_pick(a: Analysis, choices: list, carried: str) -> str:
    """Which variant wins where, whether one is decided no worse anywhere, and the Pareto set."""
    base, n = a.labels[a.baseline_idx], len(choices)
    others = [vi for vi in range(len(a.labels)) if vi != a.baseline_idx]
    best = [f"{c.scope}: {a.labels[c.pick]}" if c.pick is not None else f"{c.scope}: {base} (nothing decided better)"
            for c in choices]
    safe = [a.labels[vi] for vi in others if all(c.points[vi].speed_verdict in ("better", "equivalent")
                                                  for c in choices)
            and any(c.points[vi].speed_verdict == "better" for c in choices)]
    gains = {vi: _speedups(choices, vi) for vi in range(len(a.labels))}
    pareto = [a.labels[vi] for vi in range(len(a.labels))
              if not any(u != vi and all(x >= y for x, y in zip(gains[u], gains[vi]))
                         and any(x > y for x, y in zip(gains[u], gains[vi])) for u in gains)]
    lead = (f"{', '.join(safe)} {'is' if len(safe) == 1 else 'are'} decided no worse than {base} anywhere and "
            f"better somewhere" if safe else f"No single variant is best for all {n} workloads")
    return (f"{lead}: {carried}. Best per workload: {'; '.join(best)}. Pareto set across the workloads (no other "
            f"variant does better on every one): {', '.join(pareto)}.")
