"""From an analysis to a decision: the Pareto front of speed versus peak RSS, one sentence that
names what to use (or says nothing is worth changing), and exactly how to apply it.

"Better" always means the verdict of analysis.analyze (decide.py): a variant is recommended for
speed only when its primary metric is decided better than the baseline (of those, tune's pick by
stats/best.py's rule: stats/pick.py), and for memory only when its peak RSS or what it holds after a
phase (memory.py) is decided lower, nothing of either is decided higher, and its speed is not decided
worse by more than the margin. A variant decided to hold more after a phase is named with that cost
wherever it is mentioned. "Nothing is worth changing" is said only when every candidate is decided
equivalent or worse; where something is undecided, the sentence says what, by how much it might
differ, and how many runs would decide it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from alloclab.stats import estimates as stats
from alloclab.stats import memory
from alloclab.stats.apply import HowToApply, how_to_apply
from alloclab.stats import across
from alloclab.stats.pick import costs_time as _costs_time, lead as _lead, leanest as _leanest, paired_gain, passed_over
from alloclab.stats.dominance import geomean as _geomean, no_single_pick, pareto_front
from alloclab.stats.failing import failing_default
from alloclab.stats.analysis import Analysis, WorkloadResult
from alloclab.workloads.metrics import PEAK_RSS as RSS_METRIC


@dataclass(frozen=True)
class Point:
    variant_idx: int
    label: str
    speed: float            # workload: median of the primary metric; overall: geomean speed-up (>1 faster)
    rss: float              # workload: median peak RSS in MiB; overall: geomean peak-RSS ratio
    speed_ratio: float      # candidate / baseline (raw, not oriented); 1 for the baseline
    rss_ratio: float
    speed_verdict: str      # better | worse | equivalent | undecided | baseline
    rss_verdict: str
    speed_text: str         # change, interval, p
    rss_text: str
    status: str             # verification status
    usable: bool            # measured and not shown INEFFECTIVE
    more_runs: int | None = None   # undecided speed: runs per variant likely to decide it
    runs: int | None = None        # the fewer runs of the two sides of the speed comparison
    keeps_more: memory.Held | None = None   # the decisive held-memory comparison decided higher
    also_keeps: memory.Held | None = None   # decided higher too, but outweighed by what it holds less
    holds_less: memory.Held | None = None   # ... decided lower
    held_ratio: float = math.nan            # the largest held-memory ratio, decided or not


@dataclass
class Choice:
    scope: str              # the workload's name, or "overall"
    metric: str             # the primary metric the speed axis uses
    higher_is_better: bool
    points: list[Point]
    front: list[int]        # variant indices on the Pareto front
    pick: int | None
    reason: str | None      # speed | memory | fails (the default fails, another allocator hides it) | None
    sentence: str
    apply: HowToApply | None = None
    caveats: list[str] = field(default_factory=list)
    across: across.Across | None = None   # overall: the counts the pick rests on (stats/across.py)


@dataclass
class Recommendation:
    budget: float | None    # allowed peak-RSS increase as a fraction (0.10 for 10%), None: no limit
    baseline: str
    workloads: list[Choice]
    overall: Choice


# --- per workload -----------------------------------------------------------------------------

def _text(c: stats.Comparison | None) -> str:
    if c is None or not math.isfinite(c.ratio):
        return "n/a"
    lo, hi = c.ci_low, c.ci_high
    bounded = math.isfinite(lo) and math.isfinite(hi)
    p = f", {stats.format_p(c.p_adjusted)}" if math.isfinite(c.p_adjusted) else ""
    if c.ratio >= 3 and bounded and c.verdict in ("better", "worse"):
        # As the table says it (estimates.format_comparison): x219, not +21800.3%.
        return f"x{c.ratio:.3g} [x{lo:.3g}, x{hi:.3g}]{p}"
    interval = f" [{(lo - 1) * 100:+.1f}, {(hi - 1) * 100:+.1f}]" if bounded else ""
    return f"{(c.ratio - 1) * 100:+.1f}%{interval}{p}"


def _held_fields(a: Analysis, ws: list[WorkloadResult], vi: int) -> dict:
    """What `vi` holds after the phases of these workloads: Point's held-memory fields."""
    if vi == a.baseline_idx:
        return {}
    found = memory.held(ws, vi)
    worse, better = memory.headline(found, "worse"), memory.headline(found, "better")
    also = None
    if worse and better and memory.outweighs(better.ratio, worse.ratio):
        # jemalloc on redis: 2% more under load, 81% less after FLUSHALL. A saving that dwarfs the
        # cost is what the user pays for; the cost is named beside it, not a veto.
        worse, also = None, worse
    return dict(keeps_more=worse, holds_less=better, also_keeps=also, held_ratio=memory.worst_ratio(a, ws, vi))


def _workload_points(a: Analysis, w: WorkloadResult) -> tuple[list[Point], str, bool]:
    primary, rss = w.primary(), w.row(RSS_METRIC)
    server = memory.same_server(a, w)
    points = []
    for vi, label in enumerate(a.labels):
        pc = primary.cells[vi] if primary else None
        rc = rss.cells[vi] if rss else None
        base = vi == a.baseline_idx
        status = w.verification[vi].status
        speed = pc.summary.median if pc else math.nan
        points.append(Point(
            vi, label, speed, rc.summary.median if rc else math.nan,
            1.0 if base else (pc.comparison.ratio if pc and pc.comparison else math.nan),
            1.0 if base else (rc.comparison.ratio if rc and rc.comparison else math.nan),
            "baseline" if base else (pc.comparison.verdict if pc and pc.comparison else "undecided"),
            "baseline" if base else (rc.comparison.verdict if rc and rc.comparison else "undecided"),
            "" if base else _text(pc.comparison if pc else None),
            "" if base else _text(rc.comparison if rc else None),
            status, math.isfinite(speed) and status != "ineffective",
            None if base or not (pc and pc.comparison) else pc.comparison.more_runs,
            None if base or not (pc and pc.comparison) else min(pc.comparison.n_baseline, pc.comparison.n_candidate),
            **_held_fields(a, server, vi)))
    return points, primary.name if primary else "n/a", primary.higher_is_better if primary else True


def _memory_ratio(p: Point) -> float:
    """Peak or held, whichever grew more: what a memory budget is checked against."""
    ratios = [r for r in (p.rss_ratio, p.held_ratio) if math.isfinite(r)]
    return max(ratios) if ratios else math.nan


def _within(p: Point, budget: float | None) -> bool:
    if budget is None:
        return True
    r = _memory_ratio(p)
    return math.isfinite(r) and r - 1 <= budget + 1e-12


def _budget_text(budget: float | None, held: bool = False) -> str:
    if budget is None:
        return ""
    return f"the {budget * 100:+g}% {'memory (peak and held RSS)' if held else 'peak-RSS'} budget"


def _caveats(a: Analysis, ws: list[WorkloadResult], vi: int) -> list[str]:
    out = []
    for w in ws:
        status = w.verification[vi].status
        if status == "unknown":
            out.append(f"{a.labels[vi]} was not verified on {w.name} (verification off or inconclusive)")
        failed = len(w.runs_failed[vi])
        if failed:
            out.append(f"{failed} of {w.runs_total[vi]} runs of {a.labels[vi]} failed on {w.name}")
    return out


def _keeps(a: Analysis, ws: list[WorkloadResult], scope: str, points: list[Point]) -> str:
    """The decided held-memory regressions of these points, as one clause ("" if none)."""
    keepers = {p.variant_idx: p.keeps_more for p in points if p.keeps_more}
    return memory.keeps_more_text(a, ws, keepers, scope) if keepers else ""


def _said(text: str, within: str = "") -> str:
    """': text, within ...' after a name, or ' within ...' where there is no text (the overall's
    counts are said by report/across.py)."""
    return (f": {text}{',' + within if within else ''}" if text else within)


def _decide(a: Analysis, scope: str, points: list[Point], metric: str, higher_is_better: bool,
            budget: float | None, describe_speed, describe_memory,
            ws: list[WorkloadResult], rank=None, scoped: Analysis | None = None) -> tuple[int | None, str | None, str]:
    """The pick, why, and the sentence; shared by the per-workload and the overall decision.
    `ws` are the workloads whose held memory counts (the scope's, and its server's other clients).
    `rank`: the overall's counts; without it stats/best.py's pick on `scoped` (the scope's workloads)."""
    base = a.baseline_as_ran()
    goodness = rank or paired_gain(higher_is_better)
    candidates = [p for p in points if p.usable and p.variant_idx != a.baseline_idx]
    faster = [p for p in candidates if p.speed_verdict == "better"]
    fitting = [p for p in faster if _within(p, budget)]
    held_any = any(math.isfinite(p.held_ratio) for p in candidates)
    within = f" within {_budget_text(budget, held_any)}" if budget is not None else ""
    keeps = _keeps(a, ws, scope, candidates)
    memory_note = f" Memory is decided: {keeps}." if keeps else ""
    if fitting:
        # Of the faster ones, those that hold no more after a phase come first; the cost of the
        # pick, or of a faster one passed over, is named.
        clean = [p for p in fitting if p.keeps_more is None]
        pool = clean or fitting
        best = max(pool, key=goodness) if rank or scoped is None else _lead(scoped, pool, goodness)
        fastest = max(fitting, key=goodness)
        text = f"Use {best.label} for {scope}{_said(describe_speed(best), within)}."
        if best.keeps_more:
            text += f" Mind the memory: {_keeps(a, ws, scope, [best])}."
        elif fastest is not best and goodness(fastest) > goodness(best):
            text += passed_over(scoped or a, ws, scope, best, fastest, describe_speed(fastest))
        return best.variant_idx, "speed", text + _to_save_memory(candidates, best, budget, describe_memory)
    leaner = [p for p in candidates if (p.rss_verdict == "better" or p.holds_less)
              and (p.rss_verdict != "worse" or (p.holds_less and memory.outweighs(p.holds_less.ratio, p.rss_ratio)))
              and p.keeps_more is None and not _costs_time(a, p) and _within(p, budget)]
    if leaner:
        best = _leanest(a, leaner)
        note = f" Nothing is significantly faster than {base}{within}." if faster else ""
        return best.variant_idx, "memory", (f"Use {best.label} for {scope} to save memory"
                                            f"{_said(describe_memory(best), within)}.{note}{memory_note}")
    if faster:
        over = max(faster, key=goodness)
        said = describe_speed(over)
        return None, None, (f"Nothing is worth changing for {scope}{within}: {over.label} is faster"
                            f"{' (' + said + ')' if said else ''}, which is over the budget.{memory_note}")
    open_ = [p for p in candidates if p.speed_verdict == "undecided"]
    if open_:
        return None, None, _still_open(base, scope, metric, candidates, open_, keeps)
    if not candidates:
        return None, None, (f"Nothing to compare for {scope}: {base} was the only variant measured. Name others "
                            f"with -a (e.g. -a {base} -a {'glibc' if base.split()[0] == 'jemalloc' else 'jemalloc'}), or let "
                            f"alloclab tune propose them.")
    return None, None, (f"Nothing is worth changing for {scope}: every variant is decided equivalent to {base} "
                        f"(within ±{a.min_effect * 100:g}%) or worse on {metric}.{memory_note}")


def _to_save_memory(candidates: list[Point], pick: Point, budget: float | None, describe_memory) -> str:
    """A speed pick that gives back no memory after a phase, beside another variant decided to hold
    less there: the other is named, with its speed, so that the trade is the user's to make (redis:
    mimalloc fills faster, jemalloc holds 81% less RSS after FLUSHALL)."""
    if pick.holds_less:
        return ""
    lean = [p for p in candidates if p.holds_less and p.keeps_more is None and p.speed_verdict != "worse"
            and _within(p, budget)]
    if not lean:
        return ""
    other = min(lean, key=lambda p: p.holds_less.ratio)
    return f" To save memory instead: {other.label}{_said(describe_memory(other))}."


def _still_open(base: str, scope: str, metric: str, candidates: list[Point], open_: list[Point], keeps: str) -> str:
    """The sentence when no variant is decided faster and some speed comparisons are still open."""
    # The estimates are the answer's rows: here only which are open and what would close them.
    needs = sorted(p.more_runs for p in open_ if p.more_runs)
    most = needs[-1] if needs else 0
    what = ", ".join(p.label for p in open_)
    if most:
        span = f"{needs[0]} to {most}" if needs[0] != most else f"{most}"
        run = f" A verdict needs about {span} more runs per variant (a larger --budget or --max-runs)"
    elif any(p.runs is not None and p.runs < 2 for p in open_):
        run = (" One run per variant has no interval: leave --runs out so that alloclab measures until "
               "decided, or give --runs 10 or more")
    else:
        run = " More runs would not decide it at this margin; set --min-effect to the smallest difference that matters"
    if keeps:
        # Speed open, memory decided: say which is which, and why a lower peak is no saving.
        tempted = [p for p in candidates if p.keeps_more and p.rss_verdict == "better"]
        but = "".join(f"; {p.label}'s lower peak RSS{' (' + p.rss_text + ')' if p.rss_text else ''} does not make "
                      f"up for it" for p in tempted)
        them = "none of them is" if sum(1 for p in candidates if p.keeps_more) > 1 else "it is not"
        return (f"Decided on memory, undecided on speed for {scope}: {keeps}{but}, so {them} "
                f"recommended to save memory. No variant is decided faster than {base} yet: "
                f"{len(open_)} comparison{'s are' if len(open_) != 1 else ' is'} still open: {what}.{run}.")
    return (f"Undecided for {scope}: no variant is decided better than {base} yet, and "
            f"{len(open_)} comparison{'s are' if len(open_) != 1 else ' is'} still open: {what}.{run}.")


def _held_less(a: Analysis, p: Point, scope: str) -> str:
    if not p.holds_less:
        return ""
    base = a.baseline_as_ran()
    cost = p.also_keeps
    h = p.holds_less
    ws = [w for w in a.workloads if w.name == h.workload]
    return (f"; {memory.holds_less_text(h, base, scope)}"
            + memory.overhead_text(a, memory.same_server(a, ws[0]) if ws else [], [p.variant_idx, a.baseline_idx], h.phase)
            + (f", for {memory.amount(cost.ratio, cost.ratio, cost.kind, base)} {cost.after()}" if cost else ""))


def _lean_text(a: Analysis, p: Point, scope: str, peak: str) -> str:
    """Why a variant saves memory: what it gives back after a phase first, where that is decided (a
    server's users pay for what it holds in service), with its peak as the price; else its peak."""
    held = _held_less(a, p, scope)
    if not held or not peak:
        return held[2:] if held else peak
    return f"{held[2:]}; {peak if 'peak' in peak else 'peak RSS ' + peak}"


def _speed_plainly(p: Point, metric: str) -> str:
    if p.speed_verdict == "undecided":
        return f"; its speed is undecided ({metric} {p.speed_text})"
    return f", {metric} {p.speed_text} ({p.speed_verdict})"


def recommend_workload(a: Analysis, w: WorkloadResult, budget: float | None = None) -> Choice:
    points, metric, hib = _workload_points(a, w)
    front = [points[i].variant_idx for i in pareto_front(
        [((p.speed if hib else -p.speed) if p.usable else math.nan, p.rss) for p in points])]

    def speed(p: Point) -> str:
        return f"{metric} {p.speed_text} against {a.labels[a.baseline_idx]}, peak RSS {p.rss_text}"

    def lean(p: Point) -> str:
        return _lean_text(a, p, w.name, f"peak RSS {p.rss_text} against {a.labels[a.baseline_idx]}") + \
            _speed_plainly(p, metric)

    if (fails := failing_default(a).get(w.idx)) is not None:
        # No pick: an allocator that runs a program glibc aborts hides its bug.
        return Choice(w.name, metric, hib, points, front, None, "fails",
                      f"No allocator is recommended for {w.name}: {fails}.")
    if not any(math.isfinite(p.speed) for p in points):
        return Choice(w.name, metric, hib, points, front, None, None,
                      f"Nothing to recommend for {w.name}: no run succeeded and measured it (see the failed runs "
                      f"and the experiment's status).")
    pick, reason, sentence = _decide(a, w.name, points, metric, hib, budget, speed, lean, memory.same_server(a, w),
                                     scoped=replace(a, workloads=[w]))
    choice = Choice(w.name, metric, hib, points, front, pick, reason, sentence)
    if pick is not None:
        choice.apply = how_to_apply(a, pick, w.argv, w.info)
        choice.caveats = _caveats(a, [w], pick)
    return choice


# --- overall ----------------------------------------------------------------------------------

def _worst_status(statuses: list[str]) -> str:
    for status in ("ineffective", "unknown"):
        if status in statuses:
            return status
    return "verified"


def _overall_verdict(verdicts: list[str]) -> str:
    """Across workloads: worse anywhere is worse; else better anywhere is better; else undecided
    anywhere stays undecided; else equivalent."""
    for v in ("worse", "better", "undecided"):
        if v in verdicts:
            return v
    return "equivalent"


def _overall(a: Analysis, choices: list[Choice], budget: float | None) -> Choice:
    """Across workloads, by counts (stats/across.py): better on some workload and worse on none,
    within the budget everywhere; of those, better on the most. The geometric means of the ratios
    of medians only place the variants on the overall speed/memory plane (the HTML chart)."""
    if len(choices) == 1:
        return choices[0]
    points = []
    for vi, label in enumerate(a.labels):
        per = [c.points[vi] for c in choices]
        base = vi == a.baseline_idx
        # Oriented so that > 1 is faster whatever the direction of each workload's metric.
        speedups = [p.speed_ratio if c.higher_is_better else 1 / p.speed_ratio if p.speed_ratio else math.nan
                    for c, p in zip(choices, per)]
        speed = 1.0 if base else _geomean(speedups)
        rss = 1.0 if base else _geomean([p.rss_ratio for p in per])
        ratios = [p.rss_ratio for p in per]
        worst_rss = max(ratios) if ratios and all(math.isfinite(r) for r in ratios) else math.nan
        verdicts = ["baseline"] if base else [_overall_verdict([p.speed_verdict for p in per]),
                                              _overall_verdict([p.rss_verdict for p in per])]
        # No text: report/across.py says the counts the decision rests on.
        points.append(Point(vi, label, speed, rss, speed, worst_rss, verdicts[0], verdicts[-1], "", "",
                            _worst_status([p.status for p in per]), all(p.usable for p in per),
                            max((p.more_runs or 0) for p in per) or None, **_held_fields(a, a.workloads, vi)))
    front = [points[i].variant_idx for i in pareto_front(
        [(p.speed if p.usable else math.nan, p.rss) for p in points])]
    scope = "both workloads" if len(choices) == 2 else f"all {len(choices)} workloads"
    tallies = {vi: across.tally(choices, vi) for vi in range(len(a.labels)) if vi != a.baseline_idx}
    rank = lambda p: tallies[p.variant_idx].rank()  # noqa: E731
    pick, reason, sentence = _decide(a, scope, points, "the primary metrics", True, budget, lambda p: "",
                                     lambda p: _lean_text(a, p, scope, ""), a.workloads, rank=rank)
    tied = []
    if pick is not None and reason == "speed":
        peers = [p for p in points if p.usable and p.speed_verdict == "better" and _within(p, budget)
                 and (p.keeps_more is None) == (points[pick].keeps_more is None)]
        tied = [p.variant_idx for p in peers if rank(p) == rank(points[pick])]
        if len(tied) > 1:   # as many wins and as few open: no count tells them apart
            pick, reason, sentence = None, None, no_single_pick(a, choices, [a.labels[vi] for vi in tied])
    tied = tied if len(tied) > 1 else []
    choice = Choice("overall", "geomean of the primary-metric ratios", True, points, front, pick, reason, sentence,
                    across=across.Across(across.RULE, tallies, tied,
                                         across.rivals(points, tallies, pick, lambda p: _within(p, budget), tied)))
    if pick is not None:
        choice.apply = how_to_apply(a, pick, None)
        choice.caveats = _caveats(a, a.workloads, pick)
    return choice


def recommend(a: Analysis, max_rss_increase: float | None = None) -> Recommendation:
    """Per workload and overall. max_rss_increase is a fraction: 0.10 allows +10% peak RSS (and +10%
    after any phase, where the workloads measure phases)."""
    choices = [recommend_workload(a, w, max_rss_increase) for w in a.workloads]
    return Recommendation(max_rss_increase, a.labels[a.baseline_idx], choices, _overall(a, choices, max_rss_increase))
