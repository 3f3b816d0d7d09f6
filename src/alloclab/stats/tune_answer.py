"""From a tune race to tune's answer, as data: the picks (better on both axes first, then the best for
speed, for memory, at its end, after each memory phase), each with its comparisons, its cost on the
other axis and how to apply it; every other candidate with its outcome and why, in numbers. The
words are report/tune.py's alone.

In: the race's Analysis (stats.analysis) and its record (tune/prescribe.py's candidates, the
baseline, the screen, as the race stored them). Out: a TuneAnswer, part of the race's Results
(stats/results.py). Only decided verdicts pick; "best" is stats/best.py's rule, which the race
also follows.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from alloclab.stats import best, hugepages, lazyfree, two_groups
from alloclab.stats.hugepages import HugeNote
from alloclab.stats.lazyfree import LazyNote
from alloclab.stats.two_groups import TwoGroups
from alloclab.stats.analysis import Analysis
from alloclab.stats.apply import HowToApply, how_to_apply
from alloclab.stats.estimates import Comparison
from alloclab.store.config_model import Candidate
from alloclab.workloads.metrics import END_ANON, PEAK_RSS as RSS, PHASE_RSS as PHASE, memory_goal

FAULTS = "minflt"
# A memory pick that costs more than this factor of the time names the best candidate that costs none.
SLOW = 1.5
SCHEMA = 2   # the JSON of the answer: numbers, no sentences (docs/reports.md)


class Outcome(str, enum.Enum):
    PICKED = "picked"
    ALSO_BETTER = "also better"     # decided better too, not picked
    RULED_OUT = "ruled out"         # decided worse or equivalent, or dropped below a leader
    OPEN = "open"                   # its speed still undecided at the stop
    NOT_IN_EFFECT = "not in effect"
    REFUSED = "refused"             # by the installed allocator, never raced
    SCREENED_OUT = "screened out"   # ranked below the finalists by a short screen, never raced


class Reason(str, enum.Enum):
    BETTER = "decided better"
    WORSE = "decided worse"
    EQUIVALENT = "decided equivalent"
    BELOW_LEADER = "below the leader"
    UNDECIDED = "undecided"
    NOT_IN_EFFECT = "not in effect"
    REFUSED = "refused"
    SCREENED_OUT = "screened out"


class State(str, enum.Enum):
    PICKED = "picked"           # at least one pick
    KEEP = "keep the default"   # every candidate decided not better
    OPEN = "open"               # no pick, candidates still open: "keep" is not shown to be right


@dataclass(frozen=True)
class Effect:
    """One comparison against the default: its numbers are the Comparison's (verdict, ratio, interval)."""
    workload: str
    metric: str
    comparison: Comparison

    def to_dict(self) -> dict:
        c = self.comparison
        return {"workload": self.workload, "metric": self.metric, "verdict": c.verdict, "ratio": c.ratio,
                "low": c.ci_low, "high": c.ci_high, "stopped": c.stopped, "more_runs": c.more_runs}


@dataclass(frozen=True)
class Pick:
    goals: tuple[str, ...]     # "both", "speed", "memory", "memory at its end", "memory after PHASE", "memory: NAME"
    variant_idx: int
    label: str
    candidate: Candidate | None
    effects: tuple[Effect, ...]    # the deciding metrics, goal by goal
    costs: tuple[Effect, ...]      # the other axis: what it costs or saves, decided or not
    faults: tuple[Effect, ...]     # minor page faults, where decided in every workload
    plain: bool                    # an allocator as installed, picked for a goal its rule did not expect
    apply: HowToApply
    instead: "Pick | None" = None  # a memory pick at more than SLOW the time: the best that costs none

    def to_dict(self) -> dict:
        return {"goals": list(self.goals), "label": self.label, "spec": self.candidate.spec if self.candidate else None,
                "rule": self.candidate.rule if self.candidate else None,
                "effects": [e.to_dict() for e in self.effects], "costs": [e.to_dict() for e in self.costs],
                "faults": [e.to_dict() for e in self.faults], "env_line": self.apply.env_line,
                "systemd": self.apply.systemd, "build": self.apply.build,
                "instead": self.instead.label if self.instead else None}


@dataclass(frozen=True)
class Other:
    label: str
    spec: str
    rule: str | None
    expect: str | None
    outcome: Outcome
    reason: Reason
    effects: tuple[Effect, ...] = ()   # speed, peak RSS, and its rule's own memory metric
    leader: str | None = None          # below the leader: which, and at how many runs
    runs: int | None = None
    detail: str | None = None          # the installed allocator's refusal, as it said it

    def to_dict(self) -> dict:
        return {"label": self.label, "spec": self.spec, "rule": self.rule, "expect": self.expect,
                "outcome": self.outcome.value, "reason": self.reason.value,
                "effects": [e.to_dict() for e in self.effects], "leader": self.leader, "runs": self.runs,
                "detail": self.detail}


@dataclass
class TuneAnswer:
    state: State = State.KEEP
    picks: list[Pick] = field(default_factory=list)
    others: list[Other] = field(default_factory=list)
    baseline: dict | None = None              # tune/baseline.py's record, where the program runs another allocator
    failures: list[dict] = field(default_factory=list)   # fingerprints that failed only under alloclab
    screened_out: list[dict] = field(default_factory=list)   # tune/screen.py's estimates of what was not raced
    largest_open: Other | None = None         # State.OPEN: the open candidate with the largest estimate
    # Open, and may be better on both, where the first pick is a memory pick at more than SLOW the
    # time: the answer leads with it, not with the slow pick (a threaded CPython program: the mmap
    # threshold fixed at x4.83 the time led while tcmalloc, faster and smaller by hand, stayed open).
    open_on_both: Other | None = None
    # The default's and each pick's end reading, where pages freed with MADV_FREE are a real part of it.
    lazyfree: list[LazyNote] = field(default_factory=list)
    # Each pick's metrics whose runs fell into two groups: its effect there is a mixture.
    two_groups: list[TwoGroups] = field(default_factory=list)
    # Each pick's runs that ended with transparent huge pages, beside the default's.
    hugepages: list[HugeNote] = field(default_factory=list)

    def of(self, outcome: Outcome) -> list[Other]:
        return [o for o in self.others if o.outcome == outcome]

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "state": self.state.value, "picks": [p.to_dict() for p in self.picks],
                "others": [o.to_dict() for o in self.others], "baseline": self.baseline,
                "failures": self.failures, "screened_out": self.screened_out,
                "largest_open": self.largest_open.label if self.largest_open else None,
                "open_on_both": self.open_on_both.label if self.open_on_both else None,
                "lazyfree": [n.to_dict() for n in self.lazyfree],
                "two_groups": [n.to_dict() for n in self.two_groups],
                "hugepages": [n.to_dict() for n in self.hugepages]}


def _effects(a: Analysis, metric_of, vi: int) -> tuple[Effect, ...]:
    """`metric_of` gives a workload's metric, or its list of metrics (best.primaries)."""
    return tuple(Effect(w.name, name, c) for w in a.workloads for name in best.names_of(metric_of, w)
                 if (c := w.comparison(name, vi)) is not None)


def _faults(a: Analysis, vi: int) -> tuple[Effect, ...]:
    """The page faults' change, where decided in every workload that has them."""
    found = _effects(a, lambda w: FAULTS, vi)
    return found if found and all(e.comparison.verdict in ("better", "worse") for e in found) else ()


def _phases(a: Analysis) -> list[str]:
    return list(dict.fromkeys(row.name for w in a.workloads for row in w.rows if PHASE.match(row.name)))


def _has(metric: str):
    return lambda w: metric if w.row(metric) else None


def _own_metric(cand: Candidate | None):
    """A memory candidate's own metric, as a per-workload chooser; None for the others."""
    if cand is None or not cand.metric or cand.metric == RSS:
        return None
    return _has(cand.metric)


def _memory_goal_of_primary(a: Analysis) -> str | None:
    """A primary metric of the user's that measures memory (lower is better) makes speed's pick a memory goal."""
    return next((g for w in a.workloads if (row := w.primary()) is not None
                 and (g := memory_goal(row.name, row.unit, row.higher_is_better, row.source))), None)


class _Answerer:
    def __init__(self, a: Analysis, candidates: list[Candidate], max_rss_increase: float | None):
        self.a, self.max_rss_increase = a, max_rss_increase
        spec_of = {v.label: v.spec for v in a.experiment.variants}
        self.by_label = {label: c for c in candidates for label, spec in spec_of.items() if spec == c.spec}
        self.racers = [vi for vi in range(len(a.labels)) if vi != a.baseline_idx]
        self.usable = [vi for vi in self.racers if best.usable(a, vi)]

    def cand(self, vi: int) -> Candidate | None:
        return self.by_label.get(self.a.labels[vi])

    def too_big(self, vi: int) -> bool:
        return best.too_big(self.a, vi, self.max_rss_increase)

    def pick(self, goal: str, vi: int, metric_of, cost_of, effects: tuple[Effect, ...] | None = None) -> Pick:
        a, cand = self.a, self.cand(vi)
        effects = _effects(a, metric_of, vi) if effects is None else effects
        own = _own_metric(cand)
        if own is not None and not any(e.metric == cand.metric for e in effects) \
                and any(e.comparison.verdict == "better" for e in _effects(a, own, vi)):
            # A memory rule's candidate picked for another goal shows its own metric's effect too.
            effects += _effects(a, own, vi)
        plain = cand is not None and goal == "speed" and cand.expect != "faster" and ":" not in cand.spec
        return Pick((goal,), vi, a.labels[vi], cand, effects, _effects(a, cost_of, vi), _faults(a, vi), plain,
                    how_to_apply(a, vi, a.workloads[0].argv, a.workloads[0].info))

    def both(self) -> list[Pick]:
        """The candidates decided better on one axis and better or equivalent on the other that no other
        such candidate beats everywhere, the larger gain first (stats/best.py)."""
        a = self.a
        out = []
        for vi in best.both_front(a, [vi for vi in self.usable if not self.too_big(vi)]):
            # Both axes in full: speed, then every memory metric (the claim is "better or equivalent" on each).
            effects = tuple(Effect(w.name, name, c) for w in a.workloads
                            for name in dict.fromkeys(best.primaries(w) + best.memory_metrics(w))
                            if name and (c := w.comparison(name, vi)) is not None)
            out.append(self.pick("both", vi, None, lambda w: None, effects))
        return out

    def goals(self) -> list[Pick]:
        a, out = self.a, []
        speed = best.speed_pick(a, self.max_rss_increase)
        if speed is not None:
            # Its cost on every memory metric: peak RSS, at its end, after each phase (a speed pick that
            # holds x4 at its end says so beside it, not only its peak).
            out.append(self.pick(_memory_goal_of_primary(a) or "speed", speed, best.primaries,
                                 lambda w: [m for m in best.memory_metrics(w) if m not in best.primaries(w)]))
        for goal, metric in [("memory", RSS), ("memory at its end", END_ANON)] + \
                [(f"memory after {PHASE.match(m).group(1)}", m) for m in _phases(a)]:
            vi = best.decided_best(a, _has(metric), self.usable)
            if vi is not None:
                p = self.pick(goal, vi, _has(metric), best.primaries)
                out.append(self._instead(p))
        return out

    def _instead(self, p: Pick) -> Pick:
        """A memory pick at more than SLOW the time: the candidate that holds the least on the same metric
        among those that cost no time."""
        slow = [e for e in p.costs if e.comparison.gain < 1 / SLOW]
        if not slow:
            return p
        metric = p.effects[0].metric
        cheap = [vi for vi in self.usable if vi != p.variant_idx and best.costs_no_time(self.a, vi)]
        vi = best.decided_best(self.a, _has(metric), cheap)
        if vi is None:
            return p
        return Pick(p.goals, p.variant_idx, p.label, p.candidate, p.effects, p.costs, p.faults, p.plain, p.apply,
                    self.pick(p.goals[0], vi, _has(metric), best.primaries))

    def other(self, vi: int) -> Other:
        a, cand = self.a, self.cand(vi)
        own = _own_metric(cand)
        effects = _effects(a, best.primaries, vi) + _effects(a, _has(RSS), vi) + (_effects(a, own, vi) if own else ())
        dropped = {v: (leader, runs) for _, v, leader, runs in a.experiment.config.dropped if leader}
        leader, runs = dropped.get(vi, (None, None))
        speed_v = {e.comparison.verdict for e in _effects(a, best.primaries, vi)}
        memory = [_effects(a, m, vi) for m in (_has(RSS), _has(END_ANON), own) if m is not None]
        if any({e.comparison.verdict for e in es} >= {"better"} and "worse" not in {e.comparison.verdict for e in es}
               for es in [_effects(a, best.primaries, vi)] + memory):
            outcome, reason = Outcome.ALSO_BETTER, Reason.BETTER
        elif "undecided" in speed_v and not _dropped(a, vi):
            outcome, reason = Outcome.OPEN, Reason.UNDECIDED
        else:
            outcome = Outcome.RULED_OUT
            reason = (Reason.BELOW_LEADER if leader is not None or _dropped(a, vi) else
                      Reason.WORSE if "worse" in speed_v else Reason.EQUIVALENT if "equivalent" in speed_v
                      else Reason.UNDECIDED)
        return Other(a.labels[vi], a.experiment.variants[vi].spec, cand.rule if cand else None,
                     cand.expect if cand else None, outcome, reason, effects, leader, runs)


def answer(a: Analysis, candidates: list[Candidate], max_rss_increase: float | None = None, record=None) -> TuneAnswer:
    """The answer of a race; `record`: its TuneRecord (the screen's, the baseline, the failures)."""
    ans = _Answerer(a, candidates, max_rss_increase)
    out = TuneAnswer(baseline=getattr(record, "baseline", None), failures=list(getattr(record, "failures", []) or []),
                     screened_out=[s for s in getattr(record, "screened_out", []) or [] if isinstance(s, dict)])
    for c in candidates:
        if c.refused:
            out.others.append(Other(c.spec, c.spec, c.rule, c.expect, Outcome.REFUSED, Reason.REFUSED, detail=c.refused))
    for vi in ans.racers:
        if vi not in ans.usable:
            out.others.append(Other(a.labels[vi], a.experiment.variants[vi].spec, None, None, Outcome.NOT_IN_EFFECT,
                                    Reason.NOT_IN_EFFECT))
    out.picks = _merged(ans.both() + ans.goals())
    picked = {p.variant_idx for p in out.picks}
    out.others[:0] = [ans.other(vi) for vi in ans.usable if vi not in picked]
    for s in out.screened_out:
        out.others.append(Other(s["label"], s["spec"], s.get("rule"), s.get("expect"), Outcome.SCREENED_OUT,
                                Reason.SCREENED_OUT))
    opened = out.of(Outcome.OPEN)
    # A later pick may be the one: the memory pick whose speed is still open beside a speed pick at x3 the memory.
    out.open_on_both = _open_on_both(a, out.picks, opened + out.of(Outcome.ALSO_BETTER)
                                     + [ans.other(p.variant_idx) for p in out.picks[1:]])
    out.lazyfree = lazyfree.notes(a, [p.variant_idx for p in out.picks])
    out.two_groups = two_groups.notes(a, [(p.variant_idx, e.workload, e.metric) for p in out.picks
                                          for e in p.effects + p.costs + p.faults])
    out.hugepages = hugepages.notes(a, [p.variant_idx for p in out.picks])
    if out.picks:
        out.state = State.PICKED
    elif opened:
        out.state = State.OPEN
        out.largest_open = max(opened, key=lambda o: best.mean_gain(e.comparison for e in o.effects
                                                                     if e.metric == _primary_of(a, e.workload)))
    return out


def _open_on_both(a: Analysis, picks: list[Pick], opened: list[Other]) -> Other | None:
    """The open candidate that may still turn out better on both axes (no comparison decided worse,
    every estimate on the better side or even), where the first pick costs more than SLOW times the
    default on its other axis: a memory pick at x1.5 the time, or a speed pick that holds x1.5 the
    memory (a threaded CPython program: tcmalloc -35% wall at x3.97 at its end, beside glibc's
    ARENA_MAX=2 -65% at its end with its speed open); the largest product of its estimates first.
    None otherwise."""
    if not picks or not any(e.comparison.gain < 1 / SLOW for e in picks[0].costs):
        return None
    label_vi = {label: vi for vi, label in enumerate(a.labels)}

    def promise(o: Other) -> float | None:
        vi = label_vi.get(o.label)
        if vi is None:
            return None
        cs = best.speed_comparisons(a, vi) + best.memory_comparisons(a, vi)
        if not cs or any(c.verdict == "worse" for c in cs) or not any(c.verdict == "undecided" for c in cs):
            return None
        speed, memory = best.mean_gain(best.speed_comparisons(a, vi)), best.mean_gain(best.memory_comparisons(a, vi))
        # Speed may still come out even: an estimate within the margin on the slower side is open too
        # (glibc's ARENA_MAX=2 at +1.7% on 4 runs, -26% peak, beside a memory pick at x2 the time).
        if speed < 1 / (1 + a.min_effect) or memory < 1:
            return None
        return speed * memory
    scored = [(g, o) for o in opened if (g := promise(o)) is not None]
    return max(scored, key=lambda x: x[0])[1] if scored else None


def _primary_of(a: Analysis, workload: str) -> str | None:
    w = next((w for w in a.workloads if w.name == workload), None)
    return best.primary(w) if w is not None else None


def _merged(picks: list[Pick]) -> list[Pick]:
    """A variant that wins several goals, once, at its first place: its goals joined, its effects one
    after another (a metric shown once)."""
    out: list[Pick] = []
    for p in picks:
        first = next((q for q in out if q.variant_idx == p.variant_idx), None)
        if first is None:
            out.append(p)
            continue
        shown = {(e.workload, e.metric) for e in first.effects}
        effects = first.effects + tuple(e for e in p.effects if (e.workload, e.metric) not in shown)
        out[out.index(first)] = Pick(first.goals + p.goals, first.variant_idx, first.label, first.candidate, effects,
                                     first.costs, first.faults, first.plain, first.apply, first.instead or p.instead)
    return out


def _dropped(a: Analysis, vi: int) -> bool:
    """Every undecided speed comparison of `vi` was dropped by the race below a leader (tune/race.py):
    ruled out, not open."""
    cs = [c for c in best.comparisons(a, best.primaries, vi) if c.verdict == "undecided"]
    return bool(cs) and all(c.stopped == "leader" for c in cs)
