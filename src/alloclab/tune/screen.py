"""Screening: where racing every candidate to its first look would not fit the budget (a server
whose every run costs 20 s, six candidates), a short screen of every candidate ranks them, and only
the finalists are raced. The screen's runs only choose; every verdict in the answer comes from the
race's own, later runs (a split sample: choosing on the screen cannot bias the race's intervals,
and the race's family is its finalists).

In: the candidates, what a run costs (the diagnosis's fingerprint runs, which overestimate it), the
budget left, the race's design; after the screen, its Analysis. Out: a ScreenPlan (or None: race
everything), then the finalists and, for each candidate screened out, its estimates.
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass

from alloclab.measure.blocks import PROFILE_COST
from alloclab.stats.analysis import Analysis
from alloclab.store.config_model import Candidate
from alloclab.workloads.metrics import PEAK_RSS as RSS, PHASE_RSS

FAULTS = "minflt"
PLAIN_RULES = ("allocator-bound", "cpu-share")   # rules that race the allocators as installed
FIT = 1.0          # race everything when its warm-up and first look fit in the budget left
SCREEN_SHARE = 0.25   # the screen takes at most this share of the budget left (at least one run a cell)
MAX_SCREEN_RUNS = 3
ALWAYS_SLOTS = 2   # --screen always: the finalists besides the own fixes, whatever the budget fits


@dataclass(frozen=True)
class ScreenPlan:
    runs: int          # runs per cell in the screen
    why: str           # the projected cost that called for it, in words


@dataclass(frozen=True)
class Finalists:
    kept: list[Candidate]
    screened_out: list[dict]  # label, spec, rule, expect, the screen's estimates (not verdicts)


def plan(n_candidates: int, n_workloads: int, run_s: float, left_s: float, first_look: int,
         warmup: int, force: bool = False, own: int = 0, own_runs: int = 0) -> ScreenPlan | None:
    """A screen when the race of every candidate could not reach its first look within the budget
    left, with the `own` fixes of the default's mechanisms and the default taken on to `own_runs`
    runs (or `force`); None otherwise, or when there are at most two candidates (nothing to choose).
    Every candidate that reaches the first look is judged there, and the race drops it as soon as it
    is decided or below the leader: a race is not sized as if every candidate ran to the last look.

    Why the own fixes' further runs count: a first look alone decides little where the family is
    large (recipe:ceph-rbd-client: 9 candidates x 4 workloads at 5 runs, intervals of -100% to
    +10^8%), and a race that spends the budget there answers nothing; race_slots keeps the same
    runs for them after a screen."""
    if n_candidates <= 2 or (run_s <= 0 and not force):
        return None
    block_s = max((n_candidates + 1) * n_workloads * run_s, 1e-9)
    # The warm-up block, the first look's, and the time the race keeps for the profile of what stays
    # open (measure/blocks.py): what the first look of every candidate takes.
    race_s = (max(warmup, 1) + first_look + PROFILE_COST) * block_s
    beyond = own_beyond(n_workloads, run_s, first_look, own, own_runs)
    runs = max(1, min(MAX_SCREEN_RUNS, int(SCREEN_SHARE * left_s // block_s)))
    if force:
        return ScreenPlan(runs, "--screen always")
    if race_s + beyond <= FIT * left_s:
        return None
    further = (f", and {duration(beyond)} more to take the {own} fix{'es' if own != 1 else ''} of the default's own mechanisms on "
               f"to {own_runs} runs" if beyond else "")
    return ScreenPlan(runs, f"racing all {n_candidates} candidates to their first look would take about "
                            f"{duration(race_s)} ({first_look} runs, a warm-up and a profile of {n_candidates + 1} "
                            f"variants x {n_workloads} workload{'s' if n_workloads != 1 else ''} x {run_s:.1f} s, a fingerprint run's time){further} "
                            f"of the {duration(left_s)} left")


def own_beyond(n_workloads: int, run_s: float, first_look: int, own: int, own_runs: int) -> float:
    """What taking the own fixes and the default from the first look on to `own_runs` runs costs."""
    return (own + 1) * max(0, own_runs - first_look) * n_workloads * max(run_s, 0.0) if own else 0.0


def duration(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


def race_slots(n_workloads: int, run_s: float, left_s: float, first_look: int, warmup: int, own: int = 0,
               own_runs: int = 0) -> int:
    """How many candidates the race can take to its first look in the budget left (its warm-up block,
    first look and profile, beside the default), at least one, once the `own` fixes of the default's
    mechanisms and the default have what takes them on to `own_runs` runs (the decision comes first;
    the others race where the budget allows)."""
    run_s = max(run_s, 1e-9)
    beyond = own_beyond(n_workloads, run_s, first_look, own, own_runs)
    per_candidate = (max(warmup, 1) + first_look + PROFILE_COST) * n_workloads * run_s
    return max(1, int((left_s - beyond) // per_candidate) - 1)


def screen_fits(screen_runs: int, n_candidates: int, own: int, n_workloads: int, run_s: float, left_s: float,
                warmup: int, own_runs: int) -> bool:
    """Whether a screen of every candidate leaves the time to take the `own` candidates (the fixes of
    the default's mechanisms, the file's own question) and the default to `own_runs` runs."""
    run_s = max(run_s, 0.0)
    screen_s = screen_runs * (n_candidates + 1) * n_workloads * run_s
    own_s = (max(warmup, 1) + own_runs) * (own + 1) * n_workloads * run_s
    return screen_s + own_s <= left_s


def not_raced(candidates: list[Candidate], resolved) -> list[dict]:
    """The candidates left out without a screen, as the answer lists the screened out."""
    return [{"label": resolved[c.spec].label, "spec": c.spec, "rule": c.rule, "expect": c.expect, "runs": 0,
             "estimates": [], "not_screened": "the budget fits only the race of the file's question and the "
                                              "default's own fixes; race it with a larger --budget or -a"}
            for c in candidates]


def _comparisons(a: Analysis, vi: int, metrics_of):
    return [c for w in a.workloads for name in metrics_of(w) if (c := w.comparison(name, vi)) is not None]


def _mean_gain(a: Analysis, vi: int, metrics_of) -> float | None:
    gains = [c.gain for c in _comparisons(a, vi, metrics_of) if math.isfinite(c.ratio) and c.ratio > 0]
    return statistics.geometric_mean(gains) if gains else None


def _primary(w) -> list[str]:
    return [r.name for r in w.primary_rows()]


def _memory(w) -> list[str]:
    """After each phase where the workload has phases (what a service holds once its load is gone),
    else the peak."""
    phases = [r.name for r in w.rows if PHASE_RSS.match(r.name)]
    return phases or [RSS]


def _memory_of(cand: Candidate):
    """Where a memory candidate's effect shows: its rule's metric where the workload has it."""
    if cand.metric is None:
        return _memory
    return lambda w: [cand.metric] if w.row(cand.metric) is not None else _memory(w)


def _expected(cand: Candidate):
    return _memory_of(cand) if cand.expect == "less memory" else _primary


def _speed_rank(a: Analysis, vi: int) -> tuple[float, float]:
    """What one run says reliably, first: how much the page faults were cut (a count, whatever the
    host's speed), in tenths; then the most the speed's interval allows (a noisy run ranks by what
    it may be, not by its point)."""
    faults = [c.ratio for c in _comparisons(a, vi, lambda w: [FAULTS]) if c.ratio > 0]
    cut = 1 - statistics.geometric_mean(faults) if faults else 0.0
    most = [min(c.gain_bounds[1], 100.0) for c in _comparisons(a, vi, _primary)]
    return round(max(cut, 0.0), 1), statistics.geometric_mean(most) if most else 0.0


def _both_gain(a: Analysis, vi: int, cand: Candidate) -> float | None:
    """The product of the screen's speed and memory gains where both are above 1 (better on both by
    the estimates), else None."""
    speed, memory = _mean_gain(a, vi, _primary), _mean_gain(a, vi, _memory_of(cand))
    if speed is None or memory is None or speed <= 1 or memory <= 1:
        return None
    return speed * memory


def _worse_throughout(a: Analysis, vi: int, cand: Candidate) -> bool:
    """Its interval wholly on the worse side in every workload, on the metric it was expected to move."""
    cs = _comparisons(a, vi, _expected(cand))
    return bool(cs) and all(c.gain_bounds[1] < 1 for c in cs)


def finalists(a: Analysis, candidates: list[Candidate], slots: int, fired: list[str] | None = None,
              screen_runs: int = 1) -> Finalists:
    """The finalists: every fired rule's own setting (the fix of the mechanism the diagnosis named),
    unless two or more screen runs put its interval wholly on the worse side; then, up to `slots`
    in all and at least one more, the best of the rest, taken in turn from two rankings: those
    expected faster (_speed_rank) and those expected to hold less memory (their memory where it
    shows, only where it screened below the default's); speed's ranking goes first unless the
    workloads read memory after phases and memory's leader gained more."""
    by_spec = {c.spec: c for c in candidates}
    spec_of = {i: v.spec for i, v in enumerate(a.experiment.variants)}
    scored = []
    for vi, spec in spec_of.items():
        if vi == a.baseline_idx or spec not in by_spec:
            continue
        cand = by_spec[spec]
        scored.append((cand, vi, _mean_gain(a, vi, _expected(cand)), _mean_gain(a, vi, _primary)))
    own = [s for s in scored if s[0].rule in (fired or ()) and ":" in s[0].spec and s[0].rule not in PLAIN_RULES]
    lost = [s for s in own if screen_runs >= 2 and _worse_throughout(a, s[1], s[0])]
    kept = [s[0] for s in own if s not in lost]
    rest = [s for s in scored if s[0] not in kept and s not in lost]
    speed = sorted((s for s in rest if s[0].expect != "less memory"), key=lambda s: _speed_rank(a, s[1]), reverse=True)
    memory = [s for s in sorted((s for s in rest if s[0].expect == "less memory"), key=lambda s: -(s[2] or 0))
              if (s[2] or 0) > 1]
    # Which ranking takes the first slot: memory only where the workloads ask about memory (phases
    # reading what a service holds after its load, as redis' recipe does) and its leader gained
    # more; else speed. A memory ratio dwarfs a speed ratio (x2 held against +4% IOPS), so comparing
    # the two gains alone gave the slot to jemalloc's decay on Ceph's client, whose question is
    # IOPS, and tcmalloc, the seed's answer, never raced.
    asks_memory = any(PHASE_RSS.match(r.name) for w in a.workloads for r in w.rows)
    first, second = (memory, speed) if memory and (not speed or asks_memory and (memory[0][2] or 0) > (speed[0][3] or 0)) \
        else (speed, memory)
    order = [s[0] for pair in itertools.zip_longest(first, second) for s in pair if s is not None]
    # Those the screen saw better on both axes come first, the larger product of the two gains
    # first: each may be the answer's first line. A threaded CPython program screened tcmalloc at
    # -36% time and -34% memory; speed's ranking gave the one slot to a jemalloc decay setting, and
    # tcmalloc, faster and smaller by hand, never raced.
    gains = {id(s): g for s in rest if (g := _both_gain(a, s[1], s[0])) is not None}
    both = [s[0] for s in sorted((s for s in rest if id(s) in gains), key=lambda s: -gains[id(s)])]
    order = both + [c for c in order if c not in both]
    kept += order[:max(1, slots - len(kept))]
    kept = kept or [s[0] for s in scored[:1]]
    out = []
    for cand, vi, gain, speed_gain in scored:
        if cand in kept:
            continue
        estimates = [_estimate("speed", w, m, c) for w, m, c in _each(a, vi, _primary)]
        if cand.expect == "less memory":
            estimates = [_estimate("memory", w, m, c) for w, m, c in _each(a, vi, _memory_of(cand))] + estimates
        out.append({"label": a.labels[vi], "spec": cand.spec, "rule": cand.rule, "expect": cand.expect,
                    "runs": screen_runs, "estimates": estimates,
                    "worse_throughout": (cand, vi, gain, speed_gain) in lost})
    return Finalists(kept, out)


def _each(a: Analysis, vi: int, metrics_of):
    return [(w.name, name, c) for w in a.workloads for name in metrics_of(w)
            if (c := w.comparison(name, vi)) is not None]


def _estimate(axis: str, workload: str, metric: str, c) -> dict:
    """The screen's estimate and interval of one comparison (not a verdict: it only ranks)."""
    return {"axis": axis, "workload": workload, "metric": metric, "ratio": c.ratio, "low": c.ci_low,
            "high": c.ci_high}
