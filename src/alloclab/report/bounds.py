"""What bounds an answer that stayed open: the allocator's share of the CPU in a profile of the
same cells (`--profile`, or the one-run profile a sequential run makes of what it left open)."""

from __future__ import annotations

import math

from alloclab.report.common import metric_title, primary_rows, variant_order
from alloclab.stats import estimates as stats
from alloclab.stats.analysis import Analysis
from alloclab.tune.bound import gain_bound, pooled_share


def _allocator_share(profile: dict) -> float | None:
    """The most the profiled runs' CPU could have been in the allocator's functions or the kernel's
    memory management (tune/bound.py's pooled share, its upper limit): what any allocator could
    change is bounded by both. `profile` is the stored summary (ProfileSummary.to_dict())."""
    pooled = pooled_share(profile)
    return pooled[1] if pooled else None


def _pct(x: float) -> str:
    return f"{x * 100:+.0f}%" if abs(x) >= 1 else f"{x * 100:+.1f}%"


def _beyond(a: Analysis, row, top: float) -> list[str]:
    """The comparisons of `row`, decided or estimated, larger than the profile allows: with every profiled variant
    spending at most `top` of its CPU where an allocator acts, any two of them differ by at most a
    factor 1/(1 - top) either way (the bound's gain, or the mirror loss). An effect beyond it was
    carried by something the profiled runs did not capture (or those runs were not typical)."""
    lo, hi = 1 + gain_bound(top, higher_is_better=False), 1 + gain_bound(top, higher_is_better=True)
    over = []
    for vi in variant_order(a)[1:]:
        c = row.comparison(vi)
        # decided beyond it, or estimated beyond it: a bound below the run's own estimate is wrong
        if c is not None and 0 < c.ratio < math.inf and not lo <= c.ratio <= hi:
            said = "decided" if c.verdict in ("better", "worse") else "estimated at"
            over.append((abs(math.log(c.ratio)), f"{a.labels[vi]} is {said} {stats.format_comparison(c)}"))
    return [text for _, text in sorted(over, key=lambda x: -x[0])]


def _bound_text(row, top: float) -> str | None:
    """What the profile bounds on one metric: the gain of a time or of a rate; None for a size (the
    CPU's share bounds no memory)."""
    if row.unit.strip().lower() in SIZE_UNITS:
        return None
    name = row.name
    gain = gain_bound(top, row.higher_is_better)
    if not row.higher_is_better:
        return f"no allocator could cut {name} by much more than {-gain * 100:.1f}%"
    if not math.isfinite(gain):
        return f"{name} is not bounded (a rate, with all of the CPU in the allocator and the kernel)"
    return (f"no allocator could raise {name} by much more than {_pct(gain)} "
            f"(for a rate, 1/(1 - share) - 1)")


SIZE_UNITS = {"b", "bytes", "kb", "kib", "mb", "mib", "gb", "gib", "pages"}


def bound_answers(a: Analysis) -> list[str]:
    """Beside a primary comparison that stayed undecided (or was closed as a bound), what a profile
    of the same cells says: the allocator's share of the CPU bounds what any allocator could gain,
    in the profiled runs (one run per variant bounds nothing for certain), per metric kind (a time
    by the share, a rate by 1/(1 - share) - 1), and never beside a decided effect larger than it."""
    out = []
    for w in a.workloads:
        rows = [row for row in primary_rows(w)
                if any((c := row.comparison(vi)) is not None and c.verdict == "undecided"
                       for vi in variant_order(a)[1:])]
        shares = {vi: _allocator_share(p) for (wi, vi), p in a.experiment.profiles.items() if wi == w.idx}
        shares = {vi: x for vi, x in shares.items() if x is not None}
        if not rows or not shares:
            continue
        top = max(shares.values())
        per = ", ".join(f"{a.labels[vi]} {shares[vi] * 100:.1f}%" for vi in variant_order(a) if vi in shares)
        metrics = ", ".join(sorted({metric_title(row)[0] for row in rows}))
        where = f"{w.name}: " if len(a.workloads) > 1 else ""
        kernel = all(p.get("kernel_visible", True) for (wi, _), p in a.experiment.profiles.items() if wi == w.idx)
        # A fault costs more than the kernel functions a profile files it under (the page cleared,
        # the cache and TLB misses after it): where a variant cuts the faults by half or more, its
        # speed moves by more than the share says, and no bound is stated.
        if kernel and (cut := _fault_changes(w, variant_order(a)[1:], a.labels, at_most=FAULTS_UNBOUNDED)):
            out.append(f"{where}{metrics} undecided; no bound from the profile is stated: minor faults changed "
                       f"{cut}, and a fault costs more than the kernel functions a profile files it under (the "
                       f"page it clears, the cache and TLB misses after it)")
            continue
        if kernel:
            bounds, missed = [], []
            for row in rows:
                text = _bound_text(row, top)
                if text is None:
                    continue   # a size: the CPU's share says nothing of it
                over = _beyond(a, row, top)
                if over:
                    others = f" (and {len(over) - 1} more variant{'s' if len(over) > 2 else ''} beyond it)" if len(over) > 1 else ""
                    missed.append(f"{row.name}: {over[0]}{others}")
                else:
                    bounds.append(text)
            if not bounds and not missed:
                continue
            line = (f"{where}{metrics} undecided; the allocator's functions and the kernel's memory "
                    f"management took at most {top * 100:.1f}% of the CPU in the profiled runs ({per})")
            if bounds:
                line += ": in those runs " + ", and ".join(bounds)
            if missed:
                line += ("; " if bounds else ", but ") + (
                    f"they did not capture what changes {'; and '.join(missed)}, more than a "
                    f"{top * 100:.1f}% share allows, so they bound nothing there")
            out.append(line)
            continue
        # Without the kernel's share the profile bounds only the allocator's own code: an allocator
        # that changes the page faults (glibc's trimming against a pad) moves what perf did not see.
        faults = _fault_changes(w, [vi for row in rows for vi in variant_order(a)[1:]
                                    if (c := row.comparison(vi)) is not None and c.verdict == "undecided"],
                                a.labels)
        out.append(f"{where}{metrics} undecided; the allocator's functions took at most {top * 100:.1f}% of the "
                   f"CPU in the profiled runs ({per}), but the kernel's share (page faults, brk, mmap) was not "
                   f"visible to perf, so this bounds only the allocator's own code, not what it changes through "
                   f"the kernel" + (f": here minor faults changed {faults}" if faults else ""))
    return out


FAULTS_WORTH_SAYING = 0.25   # a decided change of minor faults this large can carry a throughput effect
FAULTS_UNBOUNDED = 0.5       # faults cut to half or less: the profile's share bounds nothing


def _fault_changes(w, variants: list[int], labels: list[str], at_most: float | None = None) -> str:
    """'-91.3% (tcmalloc)': the decided changes of minor faults of the open variants (with `at_most`,
    only the cuts to that ratio or below)."""
    row = w.row("minflt")
    if row is None:
        return ""
    said = []
    for vi in dict.fromkeys(variants):
        c = row.comparison(vi)
        big = c is not None and c.verdict in ("better", "worse") and abs(c.ratio - 1) >= FAULTS_WORTH_SAYING
        if big and (at_most is None or c.ratio <= at_most):
            said.append(f"{(c.ratio - 1) * 100:+.1f}% ({labels[vi]})")
    return ", ".join(said)
