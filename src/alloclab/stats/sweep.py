"""Sweeps and ablations read back: the curves of a sweep and the contributions of an ablation.

In: an Analysis and the sweep structures stored with the experiment (see plan/sweep.py for how
they are written). Out: SweepCurves (median and 95% interval of every headline metric per point,
the best point, the cheapest within noise, thread scaling for `threads`) and AblationResults
(each setting's contribution, the combination, the interaction with its interval).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from alloclab.stats import decide
from alloclab.stats import estimates as stats
from alloclab.stats.analysis import Analysis, Cell, MetricRow, judge_cells

SCALING_GAIN = 1.10      # adding threads must give at least +10% to count as scaling
SCALING_PARAMS = ("threads",)


# --- the stored structures ------------------------------------------------------------
# Written by plan/sweep.py and plan/param_sweep.py into the experiment's config (JSON); read here
# into typed values, keeping the keys each type has (another alloclab version may add some).

def _typed(cls, d: dict, **parsed):
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in d.items() if k in names} | parsed)


@dataclass(frozen=True)
class SweepPoint:
    value: int | float | str
    text: str | None = None          # as written; the value's text where not stored
    variant: str | None = None       # variant sweeps: the point's variant
    workload: int | None = None      # parameter sweeps: the point's workload

    @property
    def shown(self) -> str:
        return str(self.value if self.text is None else self.text)


@dataclass(frozen=True)
class VariantSweep:
    tunable: str
    points: list[SweepPoint]
    fixed: dict = field(default_factory=dict)   # the other tunables' values
    setting: str = ""                # the swept setting's key


@dataclass(frozen=True)
class ParamSweep:
    param: str
    points: list[SweepPoint]
    base: str = ""                   # the swept program
    fixed: dict = field(default_factory=dict)   # the other parameters' values


@dataclass(frozen=True)
class AblationSetting:
    setting: str                     # as written, e.g. "MALLOC_ARENA_MAX=2"
    variant: str                     # the variant that has it alone


@dataclass(frozen=True)
class Ablation:
    baseline: str                    # the variant without the settings
    combined: str                    # the variant with all of them
    settings: list[AblationSetting]
    spec: str = ""                   # the --ablate text


def _sweep(cls, s: dict):
    return _typed(cls, s, points=[_typed(SweepPoint, p) for p in s["points"]])


def _ablation(structure: dict) -> Ablation:
    abl = structure["ablation"]
    return _typed(Ablation, abl, settings=[_typed(AblationSetting, x) for x in abl["settings"]])


# --- curves ----------------------------------------------------------------------

@dataclass
class CurvePoint:
    text: str
    value: int | float | str
    label: str                          # the variant (variant sweeps) or the workload (param sweeps)
    summary: stats.CellSummary          # the decisive metric
    values: list[float]
    rss: stats.CellSummary | None       # peak RSS: the memory cost of the point
    metrics: dict[str, stats.CellSummary] = field(default_factory=dict)   # every headline metric
    vs_best: stats.Comparison | None = None
    within_noise: bool = False          # not significantly worse than the best
    cell: Cell | None = field(default=None, repr=False, compare=False)   # its runs, for paired verdicts


@dataclass
class ScalingStep:
    threads: int
    throughput: float
    speedup: float          # throughput / throughput at the fewest threads
    efficiency: float       # speedup / (threads / fewest threads)
    gain: float             # throughput / throughput at the previous point
    gain_low: float
    gain_high: float
    dropped: bool           # significantly lower than at the previous point


@dataclass
class Scaling:
    steps: list[ScalingStep]
    stops_at: int | None            # the last thread count worth having; None: still scaling at the end
    reason: str
    usable_cores: int | None
    cores_note: str | None
    throughput_note: str | None


@dataclass
class SweepCurve:
    kind: str                       # "variant" or "param"
    axis: str                       # the tunable or parameter swept
    source: int                     # index of its sweep structure (param curves of one sweep share it)
    base: str                       # the workload (variant sweeps) or the swept program (param sweeps)
    subject: str                    # the workload (variant sweeps) or the variant (param sweeps)
    fixed: dict
    metric: str
    unit: str
    higher_is_better: bool
    points: list[CurvePoint]
    best: CurvePoint | None
    cheap: CurvePoint | None
    notes: list[str] = field(default_factory=list)
    scaling: Scaling | None = None


def _order(points: list[CurvePoint]) -> list[CurvePoint]:
    if all(isinstance(p.value, (int, float)) for p in points):
        return sorted(points, key=lambda p: p.value)
    return points


def _point(text, value, label, row: MetricRow, vi: int, rows: dict[str, MetricRow]) -> CurvePoint:
    c = row.cells[vi]
    rss = rows.get("peak_rss_mb")
    return CurvePoint(str(text), value, label, c.summary, list(c.values),
                      rss.cells[vi].summary if rss else None,
                      {name: r.cells[vi].summary for name, r in rows.items()}, cell=c)


def _decide(curve: SweepCurve, a: Analysis) -> SweepCurve:
    """The best median, and the smallest setting not significantly worse than it: each point against
    the best by the one engine (paired in blocks, at the alpha the looks left, Bonferroni over the
    points compared)."""
    measured = [p for p in curve.points if p.summary.n > 0]
    if not measured:
        curve.notes.append("no point has a successful run")
        return curve
    hib = curve.higher_is_better
    best = max(measured, key=lambda p: p.summary.median if hib else -p.summary.median)
    family = max(1, len(measured) - 1)
    for p in measured:
        p.vs_best = judge_cells(a, best.cell, p.cell, hib, family)
        p.within_noise = p is best or p.vs_best.verdict != "worse"
    curve.best = best
    curve.cheap = next(p for p in curve.points if p.within_noise)
    n = min(p.summary.n for p in measured)
    if n < 2:
        curve.notes.append(f"{n} run(s) per point: too few for an interval, so every point counts as within "
                           f"the noise of the best; use --runs 10 or more")
    failed = [p.label for p in curve.points if p.summary.n == 0]
    if failed:
        curve.notes.append("no successful run at: " + ", ".join(failed))
    return curve


def _rows(w) -> dict[str, MetricRow]:
    return {r.name: r for r in w.rows if r.headline}


def sweep_results(a: Analysis, sweeps: list[dict]) -> list[SweepCurve]:
    """Every variant or parameter sweep as curves with the best and the cheap choice."""
    curves = []
    for i, s in enumerate(sweeps):
        if "tunable" in s:
            curves += _variant_curves(a, _sweep(VariantSweep, s), i)
        elif "param" in s:
            curves += _param_curves(a, _sweep(ParamSweep, s), i)
    return curves


def _variant_curves(a: Analysis, s: VariantSweep, source: int) -> list[SweepCurve]:
    idx = {label: i for i, label in enumerate(a.labels)}
    points = [p for p in s.points if p.variant in idx]
    out = []
    for w in a.workloads:
        row = w.primary()
        if row is None or len(points) < 2:
            continue
        rows = _rows(w)
        curve = SweepCurve("variant", s.tunable, source, w.name, w.name, s.fixed, row.name, row.unit,
                           row.higher_is_better,
                           _order([_point(p.shown, p.value, p.variant, row, idx[p.variant], rows)
                                   for p in points]), None, None)
        out.append(_decide(curve, a))
    return out


def _param_curves(a: Analysis, s: ParamSweep, source: int) -> list[SweepCurve]:
    by_idx = {w.idx: w for w in a.workloads}
    points = [p for p in s.points if p.workload in by_idx]
    if len(points) < 2:
        return []
    first = by_idx[points[0].workload].primary()
    if first is None:
        return []
    cores = a.experiment.machine.usable_cores
    out = []
    for vi, label in enumerate(a.labels):
        made = []
        for p in points:
            w = by_idx[p.workload]
            row = w.row(first.name)
            if row is not None:
                made.append(_point(p.shown, p.value, w.name, row, vi, _rows(w)))
        curve = SweepCurve("param", s.param, source, s.base, label, dict(s.fixed), first.name, first.unit,
                           first.higher_is_better,
                           _order(made), None, None)
        curve = _decide(curve, a)
        if s.param in SCALING_PARAMS:
            curve.scaling = scaling_result(curve, cores, a)
        out.append(curve)
    return out


# --- thread scaling -----------------------------------------------------------------------------

def scaling_result(curve: SweepCurve, usable_cores: int | None, a: Analysis) -> Scaling | None:
    """Throughput against threads: speedup, per-thread efficiency, and where adding threads stops paying."""
    pts = [p for p in curve.points if p.summary.n > 0 and isinstance(p.value, (int, float)) and p.value > 0]
    if len(pts) < 2:
        return None
    hib = curve.higher_is_better
    note = None if hib else (f"throughput taken as 1/{curve.metric} (assumes the same total work at every "
                             f"thread count)")

    def tput(p: CurvePoint) -> float:
        m = p.summary.median
        return m if hib else (1 / m if m else math.nan)

    n0, t0 = pts[0].value, tput(pts[0])
    steps = [ScalingStep(int(n0), t0, 1.0, 1.0, math.nan, math.nan, math.nan, False)]
    stops_at, reason = None, ""
    for prev, cur in zip(pts, pts[1:]):
        c = judge_cells(a, prev.cell, cur.cell, hib, len(pts) - 1)
        gain, lo, hi = (c.ratio, c.ci_low, c.ci_high) if hib else (1 / c.ratio, 1 / c.ci_high, 1 / c.ci_low)
        t = tput(cur)
        speedup = t / t0
        steps.append(ScalingStep(int(cur.value), t, speedup, speedup * n0 / cur.value, gain, lo, hi,
                                 c.verdict == "worse"))
        if stops_at is None and (c.verdict == "worse" or gain < SCALING_GAIN):
            stops_at = int(prev.value)
            why = "a significant drop" if c.verdict == "worse" else f"less than +{SCALING_GAIN - 1:.0%}"
            ci = f"[{lo - 1:+.1%}, {hi - 1:+.1%}]" if math.isfinite(lo) and math.isfinite(hi) else "[n/a]"
            reason = f"{int(cur.value)} {curve.axis} give {gain - 1:+.1%} {ci} over {int(prev.value)} ({why})"
    if stops_at is None:
        last = steps[-1]
        reason = f"still scaling at {last.threads} {curve.axis} ({last.gain - 1:+.1%} over {steps[-2].threads})"
    most = max(s.threads for s in steps)
    cores_note = None
    if usable_cores and most > usable_cores:
        cores_note = (f"the sweep asks for up to {most} {curve.axis} but only {usable_cores} cores are usable here "
                      f"(os.sched_getaffinity): points above {usable_cores} measure oversubscription, not "
                      f"parallel scaling")
    return Scaling(steps, stops_at, reason, usable_cores, cores_note, note)


# --- ablation -----------------------------------------------------------------------------------

@dataclass
class Effect:
    name: str                       # the setting, or "all together"
    label: str
    summary: stats.CellSummary
    comparison: stats.Comparison    # against the baseline: the answer's own verdict where the baseline is the
                                    # experiment's, else the same engine over the ablation's variants
    rss: stats.Comparison | None    # peak RSS against the baseline


@dataclass
class AblationResult:
    workload: str
    metric: str
    unit: str
    higher_is_better: bool
    baseline: str
    baseline_summary: stats.CellSummary
    singles: list[Effect]
    combined: Effect
    expected: float                 # product of the single ratios
    interaction: float              # combined ratio / expected
    interaction_low: float
    interaction_high: float
    verdict: str                    # "none" | "synergy" | "antagonism" | "undetermined"
    text: str


def _interaction_ci(base: Cell, singles: list[Cell], combined: Cell, a: Analysis) -> tuple[float, float, float]:
    """Interval of combined/base / prod(single_i/base), paired: per block, the log of that quotient
    of the runs measured side by side, Yuen's interval at the alpha the looks left (decide.yuen)."""
    cells = [base, *singles, combined]
    maps = [dict(zip(c.blocks, c.values)) for c in cells]
    common = set(maps[0]).intersection(*maps[1:])
    logs = []
    for blk in common:
        v = [m[blk] for m in maps]
        if all(x > 0 for x in v):
            logs.append(math.log(v[-1] / v[0]) - sum(math.log(x / v[0]) for x in v[1:-1]))
    if len(logs) < 2:
        return math.nan, math.nan, math.nan
    design = a.design or decide.Design.fixed(1, a.alpha)
    level = design.alpha_at(max(c.n_blocks for c in cells))
    est, lo, hi, *_ = decide.yuen(np.array(logs), 1 - level, df_drop=design.df_drop,
                                trim_from=design.trim_from, plain_t=design.plain_t)
    return decide.safe_exp(est), decide.safe_exp(lo), decide.safe_exp(hi)   # as paired_effect: never a range error


def ablation_result(a: Analysis, structure: dict) -> list[AblationResult]:
    """Per workload: each setting's contribution alone, all together, and whether they interact."""
    abl = _ablation(structure)
    idx = {label: i for i, label in enumerate(a.labels)}
    labels = [abl.baseline] + [s.variant for s in abl.settings] + [abl.combined]
    if any(lab not in idx for lab in labels):
        return []
    out = []
    for w in a.workloads:
        row = w.primary()
        if row is None:
            continue
        rss = w.row("peak_rss_mb")
        hib = row.higher_is_better
        base = row.cells[idx[abl.baseline]]
        others = [row.cells[idx[lab]] for lab in labels[1:]]
        # One engine: the answer's verdict where it exists, so the ablation table can never disagree with
        # the answer; judged the same way (paired, the alpha the looks left) where the baseline differs.
        own = idx[abl.baseline] == a.baseline_idx
        comps = [c.comparison if own and c.comparison else judge_cells(a, base, c, hib, len(others)) for c in others]
        effects = []
        for name, lab, cell, comp in zip([s.setting for s in abl.settings] + ["all together"],
                                         labels[1:], others, comps):
            mem = None
            if rss:
                rb, rc = rss.cells[idx[abl.baseline]], rss.cells[idx[lab]]
                mem = rc.comparison if own and rc.comparison else judge_cells(a, rb, rc, False, len(others))
            effects.append(Effect(name, lab, cell.summary, comp, mem))
        singles, combined = effects[:-1], effects[-1]
        expected = math.prod(e.comparison.ratio for e in singles)
        est, lo, hi = _interaction_ci(base, others[:-1], others[-1], a)
        inter = est if math.isfinite(est) else (combined.comparison.ratio / expected if expected else math.nan)
        verdict, text = _interaction_words(inter, lo, hi, hib, row.name)
        out.append(AblationResult(w.name, row.name, row.unit, hib, abl.baseline, base.summary, singles,
                                  combined, expected, inter, lo, hi, verdict, text))
    return out


def _interaction_words(inter: float, lo: float, hi: float, hib: bool, metric: str) -> tuple[str, str]:
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "undetermined", "interaction undetermined (too few successful runs for an interval)"
    ci = f"{inter:.3f} [{lo:.3f}, {hi:.3f}]"
    if lo <= 1 <= hi:
        return "none", (f"no interaction: together = product of the single effects within the noise "
                        f"(combined / product {ci})")
    better = (inter > 1) == hib
    if better:
        return "synergy", (f"synergy: together they do better on {metric} than the product of the single "
                           f"effects (combined / product {ci})")
    return "antagonism", (f"they overlap or conflict: together they do worse on {metric} than the product of the "
                          f"single effects (combined / product {ci})")


def ablations(a: Analysis, sweeps: list[dict]) -> list[AblationResult]:
    return [r for s in sweeps if "ablation" in s for r in ablation_result(a, s)]
