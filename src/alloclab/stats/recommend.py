"""From an analysis to a decision: the Pareto front of speed versus peak RSS, one sentence that
names what to use (or says nothing is worth changing), and exactly how to apply it.

"Better" always means the verdict of analysis.analyze (decide.py): a variant is recommended
for speed only when its primary metric is decided better than the baseline, and for memory only
when its peak RSS is decided lower while its speed is not decided worse. "Nothing is worth
changing" is said only when every candidate is decided equivalent or worse; where something is
undecided, the sentence says what, by how much it might differ, and how many runs would decide it.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field

from alloclab.catalog import allocators as cat
from alloclab.stats import estimates as stats
from alloclab.stats.analysis import Analysis, WorkloadResult

RSS_METRIC = "peak_rss_mb"


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


@dataclass(frozen=True)
class HowToApply:
    env_line: str           # one shell line that runs the program this way
    systemd: str            # a drop-in for a service
    build: str | None       # the build-time equivalent, where the catalog knows one
    unset: tuple[str, ...]  # baseline settings the recommended variant does not have


@dataclass
class Choice:
    scope: str              # the workload's name, or "overall"
    metric: str             # the primary metric the speed axis uses
    higher_is_better: bool
    points: list[Point]
    front: list[int]        # variant indices on the Pareto front
    pick: int | None
    reason: str | None      # speed | memory | None
    sentence: str
    apply: HowToApply | None = None
    caveats: list[str] = field(default_factory=list)


@dataclass
class Recommendation:
    budget: float | None    # allowed peak-RSS increase as a fraction (0.10 for 10%), None: no limit
    baseline: str
    workloads: list[Choice]
    overall: Choice


# --- Pareto front -------------------------------------------------------------------------------

def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point dominates; each point is (speed, memory) with higher
    speed and lower memory better. Points with an undefined coordinate are never on the front."""
    ok = [i for i, (s, m) in enumerate(points) if math.isfinite(s) and math.isfinite(m)]
    front = []
    for i in ok:
        si, mi = points[i]
        dominated = any(points[j][0] >= si and points[j][1] <= mi and (points[j][0] > si or points[j][1] < mi)
                        for j in ok if j != i)
        if not dominated:
            front.append(i)
    return front


# --- how to apply -----------------------------------------------------------------------------

def _systemd_value(key: str, value: str) -> str:
    # systemd expands %-specifiers and C escapes inside Environment=; quote the whole assignment.
    text = f"{key}={value}".replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return f'Environment="{text}"'


def how_to_apply(a: Analysis, variant_idx: int, argv: list[str] | None) -> HowToApply:
    e = a.experiment
    v = e.variants[variant_idx]
    env: dict[str, str] = dict(v["env"])
    base_env = e.variants[a.baseline_idx]["env"]
    unset = tuple(k for k in base_env if k not in env)
    command = shlex.join(argv) if argv else "CMD"
    parts = (["env"] + [f"-u {k}" for k in unset] if unset else []) + \
        [f"{k}={shlex.quote(val)}" for k, val in env.items()] + [command]
    env_line = " ".join(parts)
    drop_in = ["# systemctl edit YOUR.service  (a drop-in in /etc/systemd/system/YOUR.service.d/)",
               "[Service]"]
    drop_in += [_systemd_value(k, val) for k, val in env.items()]
    drop_in += [f"UnsetEnvironment={k}" for k in unset]
    if not env and not unset:
        drop_in.append("# nothing to set: this is the default")
    allocator = cat.load_catalog().allocators.get(v.get("allocator") or "")
    build = None
    if allocator and allocator.build_option and allocator.build_option != "(default)":
        build = allocator.build_option
        tunables = {k: val for k, val in env.items() if k != "LD_PRELOAD"}
        if tunables:
            build += "; the tunables stay in the environment: " + " ".join(f"{k}={val}" for k, val in tunables.items())
    return HowToApply(env_line, "\n".join(drop_in), build, unset)


# --- per workload -----------------------------------------------------------------------------

def _text(c: stats.Comparison | None) -> str:
    if c is None or not math.isfinite(c.ratio):
        return "n/a"
    lo, hi = c.ci_low, c.ci_high
    interval = f" [{(lo - 1) * 100:+.1f}, {(hi - 1) * 100:+.1f}]" if math.isfinite(lo) and math.isfinite(hi) else ""
    p = f", {stats.format_p(c.p_adjusted)}" if math.isfinite(c.p_adjusted) else ""
    return f"{(c.ratio - 1) * 100:+.1f}%{interval}{p}"


def _workload_points(a: Analysis, w: WorkloadResult) -> tuple[list[Point], str, bool]:
    primary, rss = w.primary(), w.row(RSS_METRIC)
    points = []
    for vi, label in enumerate(a.labels):
        pc = primary.cells[vi] if primary else None
        rc = rss.cells[vi] if rss else None
        base = vi == a.baseline_idx
        status = w.verification[vi]["status"]
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
            None if base or not (pc and pc.comparison) else min(pc.comparison.n_baseline, pc.comparison.n_candidate)))
    return points, primary.name if primary else "n/a", primary.higher_is_better if primary else True


def _within(p: Point, budget: float | None) -> bool:
    if budget is None:
        return True
    return math.isfinite(p.rss_ratio) and p.rss_ratio - 1 <= budget + 1e-12


def _budget_text(budget: float | None) -> str:
    return f"the {budget * 100:+g}% peak-RSS budget" if budget is not None else ""


def _caveats(a: Analysis, ws: list[WorkloadResult], vi: int) -> list[str]:
    out = []
    for w in ws:
        status = w.verification[vi]["status"]
        if status == "unknown":
            out.append(f"{a.labels[vi]} was not verified on {w.name} (verification off or inconclusive)")
        failed = len(w.runs_failed[vi])
        if failed:
            out.append(f"{failed} of {w.runs_total[vi]} runs of {a.labels[vi]} failed on {w.name}")
    return out


def _decide(a: Analysis, scope: str, points: list[Point], metric: str, higher_is_better: bool,
            budget: float | None, describe_speed, describe_memory) -> tuple[int | None, str | None, str]:
    """The pick, why, and the sentence; shared by the per-workload and the overall decision."""
    base = a.labels[a.baseline_idx]
    goodness = (lambda p: p.speed) if higher_is_better else (lambda p: -p.speed)  # noqa: E731
    candidates = [p for p in points if p.usable and p.variant_idx != a.baseline_idx]
    faster = [p for p in candidates if p.speed_verdict == "better"]
    fitting = [p for p in faster if _within(p, budget)]
    within = f" within {_budget_text(budget)}" if budget is not None else ""
    if fitting:
        best = max(fitting, key=goodness)
        return best.variant_idx, "speed", f"Use {best.label} for {scope}: {describe_speed(best)}{',' + within if within else ''}."
    leaner = [p for p in candidates if p.rss_verdict == "better" and p.speed_verdict != "worse" and _within(p, budget)]
    if leaner:
        best = min(leaner, key=lambda p: p.rss)
        note = f" Nothing is significantly faster than {base}{within}." if faster else ""
        return best.variant_idx, "memory", (f"Use {best.label} for {scope} to save memory: {describe_memory(best)}"
                                            f"{',' + within if within else ''}.{note}")
    if faster:
        over = max(faster, key=goodness)
        return None, None, (f"Nothing is worth changing for {scope}{within}: {over.label} is faster "
                            f"({describe_speed(over)}), which is over the budget.")
    open_ = [p for p in candidates if p.speed_verdict == "undecided"]
    if open_:
        most = max((p.more_runs or 0) for p in open_)
        what = "; ".join(f"{p.label} {metric} {p.speed_text}" + (f" (~{p.more_runs} more runs per variant)"
                                                                 if p.more_runs else "") for p in open_)
        if most:
            run = f" To decide, give it about {most} more runs per variant (a larger --budget or --max-runs)"
        elif any(p.runs is not None and p.runs < 2 for p in open_):
            run = (" One run per variant has no interval: leave --runs out so that alloclab measures until "
                   "decided, or give --runs 10 or more")
        else:
            run = " More runs would not decide it at this margin; set --min-effect to the smallest difference that matters"
        
        return None, None, (f"Undecided for {scope}: no variant is decided better than {base} yet, and "
                            f"{len(open_)} comparison(s) are still open: {what}.{run}.")
    return None, None, (f"Nothing is worth changing for {scope}: every variant is decided equivalent to {base} "
                        f"(within ±{a.min_effect * 100:g}%) or worse on {metric}.")


def recommend_workload(a: Analysis, w: WorkloadResult, budget: float | None = None) -> Choice:
    points, metric, hib = _workload_points(a, w)
    front = [points[i].variant_idx for i in pareto_front(
        [((p.speed if hib else -p.speed) if p.usable else math.nan, p.rss) for p in points])]

    def speed(p: Point) -> str:
        return f"{metric} {p.speed_text} against {a.labels[a.baseline_idx]}, peak RSS {p.rss_text}"

    def memory(p: Point) -> str:
        return f"peak RSS {p.rss_text} against {a.labels[a.baseline_idx]}, {metric} {p.speed_text} ({p.speed_verdict})"

    if not any(math.isfinite(p.speed) for p in points):
        return Choice(w.name, metric, hib, points, front, None, None,
                      f"Nothing to recommend for {w.name}: no run succeeded and measured it (see the failed runs "
                      f"and the experiment's status).")
    pick, reason, sentence = _decide(a, w.name, points, metric, hib, budget, speed, memory)
    choice = Choice(w.name, metric, hib, points, front, pick, reason, sentence)
    if pick is not None:
        choice.apply = how_to_apply(a, pick, w.argv)
        choice.caveats = _caveats(a, [w], pick)
    return choice


# --- overall ----------------------------------------------------------------------------------

def _worst_status(statuses: list[str]) -> str:
    for status in ("ineffective", "unknown"):
        if status in statuses:
            return status
    return "verified"


def _geomean(ratios: list[float]) -> float:
    logs = [math.log(r) for r in ratios if math.isfinite(r) and r > 0]
    return math.exp(sum(logs) / len(logs)) if logs else math.nan


def _overall_verdict(verdicts: list[str]) -> str:
    """Across workloads: worse anywhere is worse; else better anywhere is better; else undecided
    anywhere stays undecided; else equivalent."""
    for v in ("worse", "better", "undecided"):
        if v in verdicts:
            return v
    return "equivalent"


def _overall(a: Analysis, choices: list[Choice], budget: float | None) -> Choice:
    """Across workloads. The decision rests on the per-workload Holm verdicts (better somewhere,
    worse nowhere); the geometric means of the ratios of medians place the variants on the
    overall speed/memory plane."""
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
        verdicts = [p.speed_verdict for p in per]
        rss_verdicts = [p.rss_verdict for p in per]
        speed_verdict = "baseline" if base else _overall_verdict(verdicts)
        rss_verdict = "baseline" if base else _overall_verdict(rss_verdicts)
        ratios = [p.rss_ratio for p in per]
        worst_rss = max(ratios) if ratios and all(math.isfinite(r) for r in ratios) else math.nan
        n = len(per)
        # Every workload's primary metric counts here, memory ones too (reclaim, fragment), so
        # this is not the speed-only geomean of the summary table.
        speed_text = "" if base else (f"geomean of the primary-metric ratios x{speed:.3f} (>1 better), "
                                      f"decided better in {verdicts.count('better')}, worse in "
                                      f"{verdicts.count('worse')}, equivalent in {verdicts.count('equivalent')} "
                                      f"and undecided in {verdicts.count('undecided')} of {n} workloads")
        rss_text = "" if base else (f"geomean peak RSS x{rss:.3f}, decided lower in "
                                    f"{rss_verdicts.count('better')} and higher in {rss_verdicts.count('worse')} "
                                    f"of {n} workloads")
        points.append(Point(vi, label, speed, rss, speed, worst_rss, speed_verdict, rss_verdict,
                            speed_text, rss_text, _worst_status([p.status for p in per]),
                            all(p.usable for p in per), max((p.more_runs or 0) for p in per) or None))
    front = [points[i].variant_idx for i in pareto_front(
        [(p.speed if p.usable else math.nan, p.rss) for p in points])]
    scope = f"all {len(choices)} workloads"
    pick, reason, sentence = _decide(a, scope, points, "the primary metrics", True, budget,
                                     lambda p: p.speed_text, lambda p: p.rss_text)
    choice = Choice("overall", "geomean of the primary-metric ratios", True, points, front, pick, reason, sentence)
    if pick is not None:
        choice.apply = how_to_apply(a, pick, None)
        choice.caveats = _caveats(a, a.workloads, pick)
    return choice


def recommend(a: Analysis, max_rss_increase: float | None = None) -> Recommendation:
    """Per workload and overall. max_rss_increase is a fraction: 0.10 allows +10% peak RSS."""
    choices = [recommend_workload(a, w, max_rss_increase) for w in a.workloads]
    return Recommendation(max_rss_increase, a.labels[a.baseline_idx], choices, _overall(a, choices, max_rss_increase))
