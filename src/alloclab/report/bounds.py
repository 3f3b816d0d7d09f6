"""What bounds an answer that stayed open: the allocator's share of the CPU in a profile of the
same cells (`--profile`, or the one-run profile a sequential run makes of what it left open).

Computed once as typed records (`cpu_bounds`: the JSON's numbers), rendered as sentences by
`bound_answers` for the other formats, so that the two cannot disagree."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from alloclab.report.common import metric_title, primary_rows, variant_order
from alloclab.stats import estimates as stats
from alloclab.stats.analysis import Analysis
from alloclab.tune.bound import gain_bound, pooled_share


@dataclass
class Gain:
    """The most any allocator could change one metric, in the profiled runs (a fraction)."""
    metric: str
    title: str
    higher_is_better: bool
    gain: float


@dataclass
class Beyond:
    """A comparison larger than the profile's share allows: the profile bounds nothing there."""
    metric: str
    variant: str
    comparison: stats.Comparison
    more: int   # further variants beyond it on this metric


@dataclass
class CpuBound:
    workload: str
    metrics: list[str]          # the undecided primary metrics (names as in the results)
    titles: list[str]           # the same with their units, as the tables head them
    share: float                # the largest of the profiled variants' shares
    shares: dict[str, float]    # per variant label, in report order
    kernel_visible: bool
    # "bounded": the share bounds the gains below; "faults": a variant halves the page faults, so the
    # share bounds nothing; "allocator-only": perf saw no kernel, the share bounds the allocator's code
    kind: str
    gains: list[Gain] = field(default_factory=list)
    beyond: list[Beyond] = field(default_factory=list)
    faults: list[tuple[str, float]] = field(default_factory=list)   # (variant, ratio) of minor faults

    def to_dict(self) -> dict:
        return {"workload": self.workload, "metrics": self.metrics, "kind": self.kind, "share": self.share,
                "shares": [{"variant": k, "share": v} for k, v in self.shares.items()],
                "kernel_visible": self.kernel_visible,
                "gains": [{"metric": g.metric, "higher_is_better": g.higher_is_better, "gain": g.gain}
                          for g in self.gains],
                "beyond": [{"metric": b.metric, "variant": b.variant, "verdict": b.comparison.verdict,
                            "effect": b.comparison.ratio - 1, "low": b.comparison.ci_low - 1,
                            "high": b.comparison.ci_high - 1, "more": b.more} for b in self.beyond],
                "faults": [{"variant": v, "effect": r - 1} for v, r in self.faults]}


def _allocator_share(profile: dict) -> float | None:
    """The most the profiled runs' CPU could have been in the allocator's functions or the kernel's
    memory management (tune/bound.py's pooled share, its upper limit): what any allocator could
    change is bounded by both. `profile` is the stored summary (ProfileSummary.to_dict())."""
    pooled = pooled_share(profile)
    return pooled[1] if pooled else None


def _pct(x: float) -> str:
    return f"{x * 100:+.0f}%" if abs(x) >= 1 else f"{x * 100:+.1f}%"


def _beyond(a: Analysis, row, top: float) -> list[tuple[int, stats.Comparison]]:
    """The comparisons of `row`, decided or estimated, larger than the profile allows, largest first: with every
    profiled variant spending at most `top` of its CPU where an allocator acts, any two of them differ by at most a
    factor 1/(1 - top) either way (the bound's gain, or the mirror loss). An effect beyond it was
    carried by something the profiled runs did not capture (or those runs were not typical)."""
    lo, hi = 1 + gain_bound(top, higher_is_better=False), 1 + gain_bound(top, higher_is_better=True)
    over = []
    for vi in variant_order(a)[1:]:
        c = row.comparison(vi)
        # decided beyond it, or estimated beyond it: a bound below the run's own estimate is wrong
        if c is not None and 0 < c.ratio < math.inf and not lo <= c.ratio <= hi:
            over.append((vi, c))
    return sorted(over, key=lambda x: -abs(math.log(x[1].ratio)))


SIZE_UNITS = {"b", "bytes", "kb", "kib", "mb", "mib", "gb", "gib", "pages"}


def cpu_bounds(a: Analysis) -> list[CpuBound]:
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
        kernel = all(p.get("kernel_visible", True) for (wi, _), p in a.experiment.profiles.items() if wi == w.idx)
        names = sorted({row.name for row in rows})
        bound = CpuBound(w.name, names, sorted({metric_title(row)[0] for row in rows}), top,
                         {a.labels[vi]: shares[vi] for vi in variant_order(a) if vi in shares}, kernel, "bounded")
        # A fault costs more than the kernel functions a profile files it under (the page cleared,
        # the cache and TLB misses after it): where a variant cuts the faults by half or more, its
        # speed moves by more than the share says, and no bound is stated.
        if kernel and (cut := _fault_changes(w, variant_order(a)[1:], a.labels, at_most=FAULTS_UNBOUNDED)):
            bound.kind, bound.faults = "faults", cut
            out.append(bound)
            continue
        if kernel and top >= SHARE_BOUNDS_NOTHING:
            continue
        if kernel:
            for row in rows:
                if row.unit.strip().lower() in SIZE_UNITS:
                    continue   # a size: the CPU's share says nothing of it
                over = _beyond(a, row, top)
                if over:
                    vi, c = over[0]
                    bound.beyond.append(Beyond(row.name, a.labels[vi], c, len(over) - 1))
                else:
                    bound.gains.append(Gain(row.name, metric_title(row)[0], row.higher_is_better,
                                            gain_bound(top, row.higher_is_better)))
            if bound.gains or bound.beyond:
                out.append(bound)
            continue
        # Without the kernel's share the profile bounds only the allocator's own code: an allocator
        # that changes the page faults (glibc's trimming against a pad) moves what perf did not see.
        bound.kind = "allocator-only"
        bound.faults = _fault_changes(w, [vi for row in rows for vi in variant_order(a)[1:]
                                          if (c := row.comparison(vi)) is not None and c.verdict == "undecided"],
                                      a.labels)
        out.append(bound)
    return out


def _gain_text(g: Gain) -> str:
    if not g.higher_is_better:
        return f"no allocator could cut {g.metric} by much more than {-g.gain * 100:.1f}%"
    if not math.isfinite(g.gain):
        return f"{g.metric} is not bounded (a rate, with all of the CPU in the allocator and the kernel)"
    return f"no allocator could raise {g.metric} by much more than {_pct(g.gain)} (for a rate, 1/(1 - share) - 1)"


def _faults_text(faults: list[tuple[str, float]]) -> str:
    return ", ".join(f"{(r - 1) * 100:+.1f}% ({label})" for label, r in faults)


def bound_text(b: CpuBound, with_workload: bool) -> str:
    """One bound as every format but JSON says it."""
    where = f"{b.workload}: " if with_workload else ""
    metrics = ", ".join(b.titles)
    top = b.share * 100
    per = ", ".join(f"{label} {x * 100:.1f}%" for label, x in b.shares.items())
    if b.kind == "faults":
        return (f"{where}{metrics} undecided; no bound from the profile is stated: minor faults changed "
                f"{_faults_text(b.faults)}, and a fault costs more than the kernel functions a profile files it "
                f"under (the page it clears, the cache and TLB misses after it)")
    if b.kind == "allocator-only":
        faults = _faults_text(b.faults)
        return (f"{where}{metrics} undecided; the allocator's functions took at most {top:.1f}% of the "
                f"CPU in the profiled runs ({per}), but the kernel's share (page faults, brk, mmap) was not "
                f"visible to perf, so this bounds only the allocator's own code, not what it changes through "
                f"the kernel" + (f": here minor faults changed {faults}" if faults else ""))
    line = (f"{where}{metrics} undecided; the allocator's functions and the kernel's memory "
            f"management took at most {top:.1f}% of the CPU in the profiled runs ({per})")
    if b.gains:
        line += ": in those runs " + ", and ".join(_gain_text(g) for g in b.gains)
    if b.beyond:
        missed = []
        for x in b.beyond:
            said = "decided" if x.comparison.verdict in ("better", "worse") else "estimated at"
            others = f" (and {x.more} more variant{'s' if x.more > 1 else ''} beyond it)" if x.more else ""
            missed.append(f"{x.metric}: {x.variant} is {said} {stats.format_comparison(x.comparison)}{others}")
        line += ("; " if b.gains else ", but ") + (
            f"they did not capture what changes {'; and '.join(missed)}, more than a "
            f"{top:.1f}% share allows, so they bound nothing there")
    return line


def bound_answers(a: Analysis) -> list[str]:
    """The bounds as sentences (cpu_bounds says which are stated)."""
    return [bound_text(b, len(a.workloads) > 1) for b in cpu_bounds(a)]


FAULTS_WORTH_SAYING = 0.25   # a decided change of minor faults this large can carry a throughput effect
FAULTS_UNBOUNDED = 0.5       # faults cut to half or less: the profile's share bounds nothing
# A share of 90% or more bounds a time's cut at 90% and a rate's gain at x10: nothing a reader can
# use (the demo's simple: "no allocator could cut ns_per_pair by much more than 96.6%"), as an
# interval wider than a factor of 10 says nothing (stats/estimates WIDE).
SHARE_BOUNDS_NOTHING = 0.9


def _fault_changes(w, variants: list[int], labels: list[str], at_most: float | None = None) -> list[tuple[str, float]]:
    """(variant, ratio): the decided changes of minor faults of the open variants (with `at_most`,
    only the cuts to that ratio or below)."""
    row = w.row("minflt")
    if row is None:
        return []
    said = []
    for vi in dict.fromkeys(variants):
        c = row.comparison(vi)
        big = c is not None and c.verdict in ("better", "worse") and abs(c.ratio - 1) >= FAULTS_WORTH_SAYING
        if big and (at_most is None or c.ratio <= at_most):
            said.append((labels[vi], c.ratio))
    return said
