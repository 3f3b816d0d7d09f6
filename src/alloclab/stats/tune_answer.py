"""From a tune race to tune's answer: the best setting for speed, the best for memory, the best after
each memory phase, each with the mechanism that explains it and how to apply it; what was ruled
out, with its interval; what the installed allocators refused or did not take.

In: the race's Analysis (stats.analysis) and its candidates (tune/prescribe.py's, as the race
stored them). Out: a TuneAnswer, part of the race's Results (stats/results.py), which report/tune.py
renders in every format. Only decided verdicts pick: "best" is the largest decided effect
among the candidates decided better and decided worse nowhere.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from alloclab.stats.analysis import Analysis, WorkloadResult
from alloclab.stats.apply import HowToApply, how_to_apply
from alloclab.stats.estimates import Comparison, format_comparison
from alloclab.store.config_model import Candidate
from alloclab.workloads.metrics import END_ANON, PEAK_RSS as RSS, PHASE_RSS as PHASE, memory_goal

FAULTS = "minflt"
BAD_STATUS = ("ineffective",)   # measure/verify.py: the setting or allocator was not in effect


@dataclass(frozen=True)
class Pick:
    goal: str                  # "speed" | "memory" | "memory at its end" | "memory after PHASE" | "memory: NAME"
    variant_idx: int
    label: str
    effect: str                # the deciding metric's change per workload, with intervals
    mechanism: str             # the rule's reading, and the decided change of page faults
    cost: str                  # the other axis: what the pick costs or saves, decided or not
    apply: HowToApply


@dataclass
class TuneAnswer:
    picks: list[Pick] = field(default_factory=list)
    also_better: list[str] = field(default_factory=list)   # decided better too, below the pick's estimate
    ruled_out: list[str] = field(default_factory=list)     # decided worse or equivalent on speed, or
                                                           # dropped by the race below a leader
    open: list[str] = field(default_factory=list)          # speed still undecided at the stop
    not_in_effect: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    screened_out: list[str] = field(default_factory=list)   # ranked below the finalists by the screen
    nothing: str | None = None   # every candidate decided, none better: keep the default
    undecided: str | None = None # no pick, and candidates still open: what stayed open, not "keep"


def _comp(w: WorkloadResult, metric: str, vi: int) -> Comparison | None:
    return w.comparison(metric, vi)


def _primary(w: WorkloadResult) -> str | None:
    row = w.primary()
    return row.name if row is not None else None


def _texts(a: Analysis, metric_of, vi: int, say: str | None = None) -> str:
    """The metric's change per workload: 'tps +6.2% [+2.9, +9.6]' (`say` names the metric instead)."""
    parts = []
    for w in a.workloads:
        name = metric_of(w)
        c = _comp(w, name, vi) if name else None
        if c is not None:
            where = f"{w.name}: " if len(a.workloads) > 1 else ""
            parts.append(f"{where}{say or name} {format_comparison(c)}")
    return "; ".join(parts)


def _verdicts(a: Analysis, metric_of, vi: int) -> set[str]:
    return {c.verdict for w in a.workloads if (name := metric_of(w)) and (c := _comp(w, name, vi)) is not None}


def _faults(a: Analysis, vi: int) -> str:
    """'faults -93%' where the page faults' change is decided in every workload that has them."""
    cs = [c for w in a.workloads if (c := _comp(w, FAULTS, vi)) is not None]
    if not cs or any(c.verdict not in ("better", "worse") for c in cs):
        return ""
    lo, hi = min(c.ratio for c in cs), max(c.ratio for c in cs)
    span = f"{(lo - 1) * 100:+.0f}%" if abs(hi - lo) < 0.01 else f"{(lo - 1) * 100:+.0f}% to {(hi - 1) * 100:+.0f}%"
    return f"minor page faults {span}"


def _usable(a: Analysis, vi: int) -> bool:
    return all((v := w.verification.get(vi)) is None or v.status not in BAD_STATUS for w in a.workloads)


def _decided_best(a: Analysis, metric_of, candidates: list[int], exclude=lambda vi: False) -> int | None:
    """The candidate decided better on the metric in at least one workload and worse in none, with the
    largest geometric-mean gain."""
    best, best_gain = None, 0.0
    for vi in candidates:
        cs = [c for w in a.workloads if (name := metric_of(w)) and (c := _comp(w, name, vi)) is not None]
        if not cs or not any(c.verdict == "better" for c in cs) or any(c.verdict == "worse" for c in cs):
            continue
        if exclude(vi):
            continue
        gain = statistics.geometric_mean(c.gain for c in cs)
        if gain > best_gain:
            best, best_gain = vi, gain
    return best


def _mechanism(a: Analysis, vi: int, by_label: dict[str, Candidate], goal: str = "") -> str:
    cand = by_label.get(a.labels[vi])
    parts = [f"{cand.mechanism}; {cand.why}"] if cand else []
    if cand and goal == "speed" and cand.expect != "faster" and ":" not in cand.spec:
        # A plain allocator raced for memory that won on speed: the memory rule's reading is not why.
        parts = ["the allocator as installed, with its defaults"]
    if f := _faults(a, vi):
        parts.append(f"measured: {f}")
    return ". ".join(parts)


def _apply(a: Analysis, vi: int) -> HowToApply:
    w = a.workloads[0]
    return how_to_apply(a, vi, w.argv, w.info)


def _phases(a: Analysis) -> list[str]:
    names = []
    for w in a.workloads:
        for row in w.rows:
            if PHASE.match(row.name) and row.name not in names:
                names.append(row.name)
    return names


def answer(a: Analysis, candidates: list[Candidate], max_rss_increase: float | None = None,
           screened_out: list[str] | None = None) -> TuneAnswer:
    out = TuneAnswer(screened_out=list(screened_out or []))
    by_label = {}
    for c in candidates:
        if c.refused:
            out.refused.append(f"{c.spec} ({c.rule}): {c.refused}")
    spec_of = {v.label: v.spec for v in a.experiment.variants}
    for c in candidates:
        for label, spec in spec_of.items():
            if spec == c.spec:
                by_label[label] = c
    racers = [vi for vi in range(len(a.labels)) if vi != a.baseline_idx]
    for vi in racers:
        if not _usable(a, vi):
            out.not_in_effect.append(f"{a.labels[vi]}: the verification found the setting or allocator not in "
                                     f"effect, so it was left out of the answer")
    usable = [vi for vi in racers if _usable(a, vi)]

    def too_big(vi: int) -> bool:
        if max_rss_increase is None:
            return False
        return any((c := _comp(w, RSS, vi)) is not None and c.verdict == "worse" and c.ratio - 1 > max_rss_increase
                   for w in a.workloads)

    picked: set[int] = set()
    speed = _decided_best(a, _primary, usable, too_big)
    if speed is not None:
        # A primary metric of the user's that measures memory (an RSS it prints, lower is better) is
        # a memory goal, not speed.
        goal = next((g for w in a.workloads if (row := w.primary()) is not None
                     and (g := memory_goal(row.name, row.unit, row.higher_is_better, row.source))), "speed")
        out.picks.append(Pick(goal, speed, a.labels[speed], _texts(a, _primary, speed),
                              _mechanism(a, speed, by_label, goal), _texts(a, lambda w: RSS, speed, "peak RSS"),
                              _apply(a, speed)))
        picked.add(speed)
    memory = _decided_best(a, lambda w: RSS, usable)
    if memory is not None:
        out.picks.append(Pick("memory", memory, a.labels[memory], _texts(a, lambda w: RSS, memory, "peak RSS"),
                              _mechanism(a, memory, by_label), _texts(a, _primary, memory), _apply(a, memory)))
        picked.add(memory)
    end = _decided_best(a, lambda w: END_ANON if w.row(END_ANON) else None, usable)
    if end is not None:
        out.picks.append(Pick("memory at its end", end, a.labels[end],
                              _texts(a, lambda w: END_ANON if w.row(END_ANON) else None, end, "anonymous RSS at its end"),
                              _mechanism(a, end, by_label), _texts(a, _primary, end), _apply(a, end)))
        picked.add(end)
    for metric in _phases(a):
        vi = _decided_best(a, lambda w, m=metric: m if w.row(m) else None, usable)
        if vi is not None:
            phase = PHASE.match(metric).group(1)
            out.picks.append(Pick(f"memory after {phase}", vi, a.labels[vi],
                                  _texts(a, lambda w, m=metric: m if w.row(m) else None, vi, f"RSS after {phase}"),
                                  _mechanism(a, vi, by_label), _texts(a, _primary, vi), _apply(a, vi)))
            picked.add(vi)
    leads: list[int] = []   # speed still undecided: the answer may not say "keep the default"
    dropped = {vi: (leader, runs) for _, vi, leader, runs in a.experiment.config.dropped}
    for vi in usable:
        if vi in picked:
            continue
        cand = by_label.get(a.labels[vi])
        rule = f" ({cand.rule}, expected {cand.expect})" if cand else ""
        line = f"{a.labels[vi]}{rule}: {_texts(a, _primary, vi)}; {_texts(a, lambda w: RSS, vi, 'peak RSS')}"
        own = _own_metric(cand)
        if own is not None:   # a memory rule's candidate: where its effect was expected to show
            line += f"; {_texts(a, own, vi, _metric_words(cand.metric))}"
        own_v = _verdicts(a, own, vi) if own is not None else set()
        if vi in dropped:
            leader, runs = dropped[vi]
            line += (f" (dropped at {runs} runs: the most its interval allows is below the least {leader}'s "
                     f"allows)")
        speed_v, rss_v = _verdicts(a, _primary, vi), _verdicts(a, lambda w: RSS, vi)
        end_v = _verdicts(a, lambda w: END_ANON if w.row(END_ANON) else None, vi)
        if any("better" in v and "worse" not in v for v in (speed_v, rss_v, end_v, own_v)):
            out.also_better.append(line)
        elif "undecided" in speed_v and not _dropped(a, vi):
            out.open.append(line)
            leads.append(vi)
        else:
            out.ruled_out.append(line)
    out.picks = _merged([_with_own_metric(a, p, by_label) for p in out.picks])
    if not out.picks and leads:
        top = max(leads, key=lambda vi: _mean_gain(a, vi))
        out.undecided = (f"nothing decided better within the budget, and {len(leads)} candidate(s) still open; the "
                         f"largest estimate is {a.labels[top]} ({_texts(a, _primary, top)}). Keeping the default is "
                         f"not shown to be right: a larger --budget (or --max-runs) decides it.")
    elif not out.picks:
        who = "every finalist of the screen" if out.screened_out else "every candidate"
        out.nothing = (f"{who} was decided worse or equivalent on speed, and none decided to hold less "
                       "memory: keep the default")
    return out


def _with_own_metric(a: Analysis, p: Pick, by_label: dict[str, Candidate]) -> Pick:
    """A memory rule's candidate picked for another goal (glibc's own trim fix, best for peak RSS by
    a few percent) also shows the effect where its rule expected it (RSS at its end), where that
    effect is decided better: a gain of the pick, not its cost."""
    cand = by_label.get(p.label)
    own = _own_metric(cand)
    if own is None:
        return p
    words = _metric_words(cand.metric)
    if words in p.effect or "better" not in _verdicts(a, own, p.variant_idx):
        return p
    return Pick(p.goal, p.variant_idx, p.label, f"{p.effect}; {_texts(a, own, p.variant_idx, words)}", p.mechanism,
                p.cost, p.apply)


def _own_metric(cand: Candidate | None):
    """A memory candidate's own metric, as a per-workload chooser; None for the others."""
    if cand is None or not cand.metric or cand.metric in (RSS,):
        return None
    return lambda w, m=cand.metric: m if w.row(m) else None


def _metric_words(name: str) -> str:
    goal = memory_goal(name) or name
    return {"memory at its end": "anonymous RSS at its end"}.get(goal, goal.replace("memory after ", "RSS after "))


def _merged(picks: list[Pick]) -> list[Pick]:
    """A variant that wins several goals, once: its goals joined, its effects one after another."""
    out: list[Pick] = []
    for p in picks:
        first = next((q for q in out if q.variant_idx == p.variant_idx), None)
        if first is None:
            out.append(p)
            continue
        goals = first.goal.replace(" and ", ", ").split(", ") + [p.goal]
        out[out.index(first)] = Pick(", ".join(goals[:-1]) + " and " + goals[-1], first.variant_idx, first.label,
                                     f"{first.effect}; {p.effect}", first.mechanism, first.cost, first.apply)
    return out


def _dropped(a: Analysis, vi: int) -> bool:
    """Every undecided speed comparison of `vi` was dropped by the race below a leader (tune/race.py):
    ruled out, not open."""
    cs = [c for w in a.workloads if (name := _primary(w)) and (c := _comp(w, name, vi)) is not None
          and c.verdict == "undecided"]
    return bool(cs) and all(c.stopped == "leader" for c in cs)


def _mean_gain(a: Analysis, vi: int) -> float:
    cs = [c for w in a.workloads if (name := _primary(w)) and (c := _comp(w, name, vi)) is not None
          and math.isfinite(c.ratio) and c.ratio > 0]
    return statistics.geometric_mean(c.gain for c in cs) if cs else 0.0
