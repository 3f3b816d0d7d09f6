"""What a variant holds beyond its peak: the memory readings after a phase, decided against the
baseline, as evidence the recommendation weighs (recommend.py) and names in its sentence.

A server's user pays for what it holds in service and after a release, not only for its peak: a
cache that keeps 5x its memory after FLUSHALL saves nothing by peaking 2% lower. The kinds of
memory metric are told apart once, here, by the names the measuring code gives them
(workloads/phases.py for services, the built-in workloads' own JSON for commands):

    held      (rss|pss)_after_<phase>_(mb|kb)   what the tree holds after <phase>; "load" is in service
    returned  returned_after_<phase>            the share of its growth it gave back after <phase>

Workloads of one server (a service's clients: the same server command) share their evidence: the
server keeps what it keeps whichever client measured it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import NamedTuple

from alloclab.stats.analysis import Analysis, MetricRow, WorkloadResult

HELD = re.compile(r"^(?P<kind>rss|pss)_after_(?P<phase>.+)_(?:mb|kb)$")
RETURNED = re.compile(r"^returned_after_(?P<phase>.+)$")


def held_phase(row: MetricRow) -> tuple[str, str] | None:
    """(rss | pss, phase) for a held-memory metric (a size where lower is better), else None."""
    m = HELD.match(row.name)
    return m.group("kind", "phase") if m and not row.higher_is_better else None


@dataclass(frozen=True)
class Held:
    """One decided comparison of a held-memory metric against the baseline."""
    workload: str
    metric: str
    kind: str          # rss | pss
    phase: str
    ratio: float       # candidate / baseline
    verdict: str       # better (holds less) | worse (holds more)

    def after(self) -> str:
        return "after the load" if self.phase == "load" else f"after {self.phase}"


def same_server(a: Analysis, w: WorkloadResult) -> list[WorkloadResult]:
    """`w` first, then the other clients of its server (none for a command)."""
    if w.info.get("mode") != "service":
        return [w]
    return [w] + [o for o in a.workloads if o is not w and o.info.get("mode") == "service" and o.argv == w.argv]


def held(ws: list[WorkloadResult], vi: int) -> list[Held]:
    """The decided (better or worse) held-memory comparisons of variant `vi` in these workloads."""
    out = []
    for w in ws:
        for row in w.rows:
            kp = held_phase(row)
            c = row.comparison(vi)
            if kp and c is not None and c.verdict in ("better", "worse") and math.isfinite(c.ratio):
                out.append(Held(w.name, row.name, kp[0], kp[1], c.ratio, c.verdict))
    return out


def worst_ratio(a: Analysis, ws: list[WorkloadResult], vi: int) -> float:
    """The largest held-memory ratio of `vi` against the baseline, decided or not (nan if none):
    what a memory budget is checked against beside the peak."""
    ratios = [c.ratio for w in ws for row in w.rows if held_phase(row) and (c := row.comparison(vi)) is not None]
    ratios = [r for r in ratios if math.isfinite(r)]
    return max(ratios) if ratios and vi != a.baseline_idx else math.nan


def headline(found: list[Held], verdict: str) -> Held | None:
    """The decisive finding: the largest (worse) or smallest (better) ratio, RSS before PSS, and
    of equal ratios the earliest phase (the metrics are stored in phase order)."""
    sel = [h for h in found if h.verdict == verdict]
    sel = [h for h in sel if h.kind == "rss"] or sel
    if not sel:
        return None
    best = max(sel, key=lambda h: h.ratio) if verdict == "worse" else min(sel, key=lambda h: h.ratio)
    # The first phase that reaches (within 2%) the decisive ratio is where the memory stayed.
    return next(h for h in sel if abs(math.log(h.ratio / best.ratio)) < 0.02)


def outweighs(saving: float, cost: float) -> bool:
    """Whether holding `saving` (a ratio below 1) somewhere outweighs holding `cost` (above 1)
    elsewhere: by more than twice as much, in log terms (x0.19 after a flush against x1.02 under
    load does; x0.95 against x1.04 does not)."""
    return (math.isfinite(saving) and math.isfinite(cost) and saving > 0 and cost > 0
            and abs(math.log(saving)) > 2 * abs(math.log(cost)))


def amount(low: float, high: float, kind: str, base: str) -> str:
    """How much memory against the baseline, for one ratio or a range of them: "x5.3 to x5.6 the
    RSS of glibc" (factors from x2 on), "24% more RSS than glibc", "95% less PSS than glibc"."""
    kind = kind.upper()
    if high >= 2:
        span = f"x{low:.2g}" if f"{low:.2g}" == f"{high:.2g}" else f"x{low:.2g} to x{high:.2g}"
        return f"{span} the {kind} of {base}"
    pct = [round(abs(r - 1) * 100) for r in (low, high)]
    span = f"{pct[0]}%" if pct[0] == pct[1] else f"{min(pct)}% to {max(pct)}%"
    return f"{span} {'more' if high > 1 else 'less'} {kind} than {base}"


def returned(ws: list[WorkloadResult], vi: int, phase: str) -> float | None:
    """The median share of its growth variant `vi` gave back after `phase`, where measured."""
    for w in ws:
        row = w.row(f"returned_after_{phase}")
        if row is not None and row.cells[vi].values:
            return row.cells[vi].summary.median
    return None


def keeps_more_text(a: Analysis, ws: list[WorkloadResult], keepers: dict[int, Held], scope: str) -> str:
    """"tcmalloc and mimalloc keep x5.3-x5.6 the RSS of glibc after flush (redis: memory), where
    glibc and jemalloc return 90% of their growth": the decided held-memory regressions, grouped by
    the phase after which they show, with what the others give back there."""
    parts = []
    by_after: dict[tuple[str, str, str], list[int]] = {}
    for vi, h in keepers.items():
        by_after.setdefault((h.after(), h.kind, h.workload), []).append(vi)
    base = a.baseline_as_ran()
    for (after, kind, workload), vis in by_after.items():
        ratios = sorted(keepers[vi].ratio for vi in vis)
        names = _and([a.labels[vi] for vi in vis])
        where = f" ({workload})" if workload != scope else ""
        text = f"{names} keep{'s' if len(vis) == 1 else ''} {amount(ratios[0], ratios[-1], kind, base)} {after}{where}"
        phase = keepers[vis[0]].phase
        text += overhead_text(a, ws, [*vis, a.baseline_idx], phase)
        others = [vi for vi in range(len(a.labels)) if vi not in keepers]
        shares = {vi: returned(ws, vi, phase) for vi in others}
        # only those that give a real part back: "returns -8% of its growth" says nothing
        shares = {vi: s for vi, s in shares.items() if s is not None and s >= 0.1}
        if shares and len({round(s, 2) for s in shares.values()}) == 1:
            s = next(iter(shares.values()))
            who = _and([a.labels[vi] for vi in shares])
            text += f", where {who} return{'s' if len(shares) == 1 else ''} {s * 100:.0f}% of {'its' if len(shares) == 1 else 'their'} growth"
        elif shares:
            text += ", where " + ", ".join(f"{a.labels[vi]} returns {s * 100:.0f}%" for vi, s in shares.items()) + \
                " of its growth"
        parts.append(text)
    return "; ".join(parts)


class Overhead(NamedTuple):
    """A fingerprint run's reading at the end of a phase (KiB): live bytes, and the anonymous RSS
    beyond them."""
    live_kb: float
    overhead_kb: float


def overhead_after(a: Analysis, ws: list[WorkloadResult], vi: int, phase: str) -> Overhead | None:
    """The fingerprint run's reading of variant `vi` at the end of `phase`, from the first of these
    workloads (one server) that has it."""
    fps = a.experiment.fingerprints
    for w in ws:
        fp = fps.get((w.idx, vi)) or {}
        # The stored fingerprint is JSON (measure/fingerprint.py): read at this edge.
        for ph in fp.get("phases", []):
            if ph["name"] == phase:
                return Overhead(ph["live_kb"], ph["overhead_kb"])
    return None


def overhead_text(a: Analysis, ws: list[WorkloadResult], vis: list[int], phase: str) -> str:
    """" (fingerprint run: tcmalloc 31.0 MiB beyond the program's 3.0 MiB live, glibc 5.6 MiB)":
    what the decided held memory is made of, where the untimed fingerprint run read it. One run,
    not a decided figure: it explains the verdict, it does not make it."""
    parts = []
    for vi in dict.fromkeys(vis):
        ph = overhead_after(a, ws, vi, phase)
        if ph is None:
            continue
        live = f" beyond the program's {ph.live_kb / 1024:.1f} MiB live" if not parts else ""
        parts.append(f"{a.labels[vi]} {ph.overhead_kb / 1024:.1f} MiB{live}")
    return f" (fingerprint run: {', '.join(parts)})" if parts else ""


def holds_less_text(h: Held, base: str, scope: str) -> str:
    return f"it holds {amount(h.ratio, h.ratio, h.kind, base)} {h.after()}" + \
        (f" ({h.workload})" if h.workload != scope else "")


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
