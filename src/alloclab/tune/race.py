"""The race's judge: compare's until-decided rule, plus the racing rule that drops a candidate as
soon as it cannot be the answer.

In: the experiment as stored so far, at each of the design's looks (the runner hands it in, as it
does stats.looks.Judge). Out: the comparisons still open; what this rule closed, with its leader
(`dropped`), which the runner stores so that the analysis says "below the leader".

A candidate still undecided against the default is dropped in a workload when, on the primary
metric, the most it could gain (its interval's favourable end) is below the least a leader decided
better gains (that leader's unfavourable end), and it cannot be the memory pick either: on every
memory metric (peak RSS, at the end, after each phase, the user's) it is decided worse or equivalent, or likewise below
a memory leader. The intervals are the analysis's own, simultaneous over the family and the looks,
so the error of "below the leader" is controlled with the verdicts' (both intervals hold together).

A candidate at least x3 slower than another that holds no more memory leaves too (dominated_by),
on the two estimates, at any look: it cannot be an answer that the other is not, and every block
waits for its runs.

The speed leader (stats/best.py's decided best on the primary metric, within --max-rss-increase:
the answer's "best for speed", by the same rule) stays in the race after its verdict while its peak RSS against the default is still
undecided and other candidates run anyway: the cost beside the pick is half of the answer (the
seeds' jemalloc, 4x faster and 300 MB more per OSD), and those blocks are run whatever it does.
It never keeps the race going on its own for its cost alone. A candidate decided better on speed
whose peak RSS is still open, none of its memory decided worse, does: it may be better on both axes,
which the answer leads with (threads churning messages in CPython: glibc's pad x3 faster, its peak
RSS still undecided at 10 runs, beside allocators as fast that hold 21% more).
"""

from __future__ import annotations

import math

from alloclab.stats.analysis import WorkloadResult, analyze
from alloclab.stats import best
from alloclab.stats.best import speed_pick
from alloclab.stats.looks import Judge
from alloclab.workloads.metrics import PEAK_RSS as RSS, is_memory


def below_leader(w: WorkloadResult, metric: str, vi: int, base: int) -> int | None:
    """The candidate decided better on `metric` whose least gain is above the most `vi` can gain;
    None where no such leader is there."""
    row, mine = w.row(metric), w.comparison(metric, vi)
    if mine is None:
        return None
    most = mine.gain_bounds[1]
    best, best_least = None, most
    for cell in row.cells:
        c = cell.comparison
        if cell.variant_idx in (vi, base) or c is None or c.verdict != "better":
            continue
        least = c.gain_bounds[0]
        if least > best_least:
            best, best_least = cell.variant_idx, least
    return best


DOMINATED_SLOWER = 3.0   # a candidate this many times slower than another that holds no more leaves


def dominated_by(w: WorkloadResult, vi: int, base: int, margin: float) -> int | None:
    """The candidate that makes `vi` pointless to race on in this workload: at least x3 faster than
    `vi` by the two estimates against the default, and holding no more memory on any memory metric
    (its estimate no more than the margin above `vi`'s); None where none does.

    Why on estimates, not intervals: at the early look a slow candidate's interval spans x2 either
    way, and every block waits for its runs (a threaded CPython program: five memory settings at
    x4.4-4.9 the time held each block for five times a fast candidate's run). A factor of 3 is far
    beyond run-to-run noise, and the candidate is not said to be worse: it is said to be below the
    one that dominates it, with the interval it had."""
    row = w.primary()
    mine = w.comparison(row.name, vi) if row is not None else None
    if mine is None or not math.isfinite(mine.gain) or mine.gain <= 0:
        return None
    for cell in row.cells:
        u, c = cell.variant_idx, cell.comparison
        if u in (vi, base) or c is None or not math.isfinite(c.gain) or c.gain < DOMINATED_SLOWER * mine.gain:
            continue
        holds_no_more = True
        for name in memory_metrics(w):
            mv, uv = w.comparison(name, vi), w.comparison(name, u)
            if mv is None:
                continue
            if uv is None or not (math.isfinite(uv.ratio) and math.isfinite(mv.ratio)):
                holds_no_more = False
                break
            # Memory is lower-is-better: u's ratio against the default no more than v's (and the margin).
            if uv.ratio > mv.ratio * (1 + margin):
                holds_no_more = False
                break
        if holds_no_more:
            return u
    return None


def cost_open(w: WorkloadResult, vi: int) -> bool:
    """Whether `vi`'s peak RSS against the default is undecided, and more runs may decide it."""
    c = w.comparison(RSS, vi)
    return c is not None and c.verdict == "undecided" and not c.futile


def may_be_better_on_both(a, w: WorkloadResult) -> set[int]:
    """The candidates decided better on one of the workload's speed metrics whose peak RSS more runs may
    still decide, with no memory comparison decided worse: each may turn out better on both axes,
    the answer's first line, so each races on while the budget allows (the budget's narrowing and
    the futility bound close it where it does not)."""
    out = set()
    for vi in range(len(a.labels)):
        cs = [w.comparison(r.name, vi) for r in w.primary_rows()]
        if vi == a.baseline_idx or not any(c is not None and c.verdict == "better" for c in cs) or not cost_open(w, vi):
            continue
        if any((m := w.comparison(name, vi)) is not None and m.verdict == "worse" for name in memory_metrics(w)):
            continue
        out.add(vi)
    return out


def memory_metrics(w: WorkloadResult) -> list[str]:
    return [r.name for r in w.rows if is_memory(r)]


def could_hold_least(w: WorkloadResult, vi: int, base: int) -> bool:
    """Whether `vi` may still be the memory pick on any memory metric of this workload."""
    for name in memory_metrics(w):
        c = w.comparison(name, vi)
        if c is None or c.verdict in ("worse", "equivalent"):
            continue
        if below_leader(w, name, vi, base) is None:
            return True
    return False


class RaceJudge(Judge):
    def _narrow(self, a, out: dict[int, set[int]], experiment) -> None:
        """Where the budget left cannot take every open candidate to the next look, the others close
        for the budget (open in the answer, with their intervals), so that what is kept gets decided."""
        if self.budget is None:
            return
        specs = {vi: v.spec for vi, v in enumerate(experiment.variants)}
        own = {vi for vi, spec in specs.items() if spec in own_fixes(experiment)}
        vis = set().union(*out.values()) if out else set()
        most = {vi: max(_most(w, vi) for w in a.workloads) for vi in vis}
        keep = narrowed(out, self.budget, own, most, {vi for vi in vis if hopeful(a, vi)})
        for w in a.workloads:
            for vi in sorted(out.get(w.idx, set()) - keep):
                out[w.idx].discard(vi)
                self.dropped.setdefault(w.idx, {})[vi] = ""


    def __init__(self, max_rss_increase: float | None = None) -> None:
        super().__init__()
        self.max_rss_increase = max_rss_increase

    def open_comparisons(self, experiment, workload_idxs: set[int], margin: float,
                         reachable: int | None = None) -> dict[int, set[int]]:
        # One full analysis serves both rules: the memory metrics are not primary.
        a = analyze(experiment, min_effect=margin, workload_idxs=workload_idxs, reachable=reachable)
        out = self.open_in(a)
        self.dropped = {}
        for w in a.workloads:
            rows = w.primary_rows()
            if not rows:
                continue
            for vi in sorted(out[w.idx]):
                # Below a leader on every speed metric (IOPS and CPU per I/O alike) before it leaves.
                leaders = [below_leader(w, row.name, vi, a.baseline_idx) for row in rows]
                leader = leaders[0] if None not in leaders else None
                if leader is not None and not could_hold_least(w, vi, a.baseline_idx):
                    out[w.idx].discard(vi)
                    self.dropped.setdefault(w.idx, {})[vi] = a.labels[leader]
                elif (over := dominated_by(w, vi, a.baseline_idx, margin)) is not None:
                    out[w.idx].discard(vi)
                    self.dropped.setdefault(w.idx, {})[vi] = a.labels[over]
        for w in a.workloads:
            out[w.idx] = out.get(w.idx, set()) | may_be_better_on_both(a, w)
        self._narrow(a, out, experiment)
        pick = speed_pick(a, self.max_rss_increase)
        for w in a.workloads:
            if pick is not None and out.get(w.idx, set()) - {pick} and cost_open(w, pick):
                out[w.idx].add(pick)
        return out


def _most(w: WorkloadResult, vi: int) -> float:
    """The most `vi` may gain in a workload, on its speed or on any memory metric: where it could
    still be an answer."""
    names = [r.name for r in w.primary_rows()] + memory_metrics(w)
    return max((c.gain_bounds[1] for n in names if (c := w.comparison(n, vi)) is not None), default=0.0)


def own_fixes(experiment) -> set[str]:
    """The specs of the fixes of the default's own mechanisms (the rules that read the allocator the
    default runs), as the race's record names them, and the file's own question among the candidates
    (PostgreSQL's recipe asks about tcmalloc: dropped for the budget at 4 runs, it answered nothing)."""
    from alloclab.catalog.tune_rules import load_rules

    rec = experiment.config.tune
    if rec is None:
        return set()
    reads = (rec.baseline or {}).get("allocator", "glibc")
    own = {r.name for r in load_rules() if r.reads == reads}
    return {c.spec for c in rec.candidates if c.rule in own and ":" in c.spec or c.spec in set(rec.question)}


def hopeful(a, vi: int) -> bool:
    """Whether `vi` may still be better on both axes, the answer's first line: no comparison of it, on
    speed or on any memory metric, decided worse beyond a slight cost."""
    cs = best.speed_comparisons(a, vi) + best.memory_comparisons(a, vi)
    return not any(best.verdict_of(c, a.min_effect) == "worse" for c in cs)


def narrowed(open_: dict[int, set[int]], budget, own: set[int], most: dict[int, float],
             hopeful_: set[int] = frozenset()) -> set[int]:
    """The candidates the race keeps where the budget left cannot take every open one to the next
    look, and the default's own fix one look beyond it: the own fixes first, then the others; among
    each, those that may still be better on both first (a threaded CPython program: glibc's
    ARENA_MAX=2, -26% peak at 4 runs, its speed open, went for the budget while the pad, +23% peak,
    went on), then those that may gain the most; as many as fit (one at least).

    Why the own fix's further look: a recipe's looks end at its cap (PostgreSQL's 4, 7, 12). With the
    others kept to 7, the pad reached 10 runs of its 12 and stayed undecided at one client count;
    with that look kept for it first, the others get what the budget has beyond it."""
    left_s, run_s, measured, following, after = budget
    vis = set().union(*open_.values()) if open_ else set()
    workloads = sum(1 for vs in open_.values() if vs)
    own_open = vis & own
    cost = lambda blocks, k: blocks * (k + 1) * workloads * run_s   # k candidates and the default
    reach = own_open and after and cost(after - measured, len(own_open)) <= left_s
    further = cost(after - following, len(own_open)) if reach else 0.0
    need = lambda k: cost(following - measured, k) + (further if k > len(own_open) else 0.0)
    if len(vis) <= 1 or run_s <= 0 or need(len(vis)) <= left_s:
        return vis
    rank = lambda vi: (vi not in hopeful_, -most.get(vi, 0.0), vi)
    order = sorted(own_open, key=rank) + sorted(vis - own_open, key=rank)
    keep = [vi for k, vi in enumerate(order, 1) if need(k) <= left_s] or order[:1]
    return set(keep)
