"""Where one workload carries a mean across workloads: the suite's geomean of a variant's speed
against the baseline is a mean of ratios, and one workload's x200 can make it x2 while the others
are a wash. A geomean is carried when leaving one workload out takes it across 1.

In: the analysis. Out: label -> the sentence, for the variants whose geomean one workload carries.
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
