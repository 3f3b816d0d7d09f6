"""Terminal tables for sweeps, ablations and thread scaling, and `alloclab sweep` to show them again
for a stored experiment.

compare, suite and run call render_stored_sweeps() after their main table; the curves and ablations are
the Results' (stats/results.py, from the sweep structures in the experiment's config), so a stored
experiment always shows the same ones.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from alloclab import defaults
from alloclab.cli.app import ReadDbOption, app, console as default_console, min_effect_value, open_store
from alloclab.catalog.allocators import load_catalog
from alloclab.errors import AlloclabError

# The tables need the statistics (numpy, scipy), imported where a table is drawn: registering the
# `sweep` command must not load them, or every `alloclab` start would.
if TYPE_CHECKING:
    from alloclab.stats import estimates as stats
    from alloclab.stats.results import Results
    from alloclab.stats.sweep import AblationResult, CurvePoint, SweepCurve

NOISE_RULE = ("cheapest = the smallest setting not significantly worse than the best (Mann-Whitney, "
              "alpha {alpha:g}{effect}); medians with 95% intervals; n/a: too few runs for an interval")


def _median_ci(s: stats.CellSummary) -> str:
    from alloclab.report.common import fmt_value

    if s.n == 0:
        return "no runs"
    ci = f"[{fmt_value(s.ci_low)}, {fmt_value(s.ci_high)}]" if math.isfinite(s.ci_low) else "[n/a]"
    return f"{fmt_value(s.median)} {ci}"


def _ratio(c: stats.Comparison | None) -> str:
    """×1.42 [1.38, 1.47] p=0.002: ratios, since an ablation multiplies them."""
    from alloclab.stats import estimates as stats

    if c is None or not math.isfinite(c.ratio):
        return "n/a"
    ci = f"[{_x(c.ci_low)}, {_x(c.ci_high)}]" if math.isfinite(c.ci_low) else "[n/a]"
    return f"x{_x(c.ratio)} {ci} {stats.format_p(c.p_adjusted)}"


def _pct(c: stats.Comparison | None) -> str:
    """+0.4% [+0.2, +0.6]: memory changes are small next to the speed ratios of an ablation."""
    if c is None or not math.isfinite(c.ratio):
        return "n/a"
    ci = f"[{(c.ci_low - 1) * 100:+.1f}, {(c.ci_high - 1) * 100:+.1f}]" if math.isfinite(c.ci_low) else "[n/a]"
    return f"{(c.ratio - 1) * 100:+.1f}% {ci}"


def _x(r: float) -> str:
    return f"{r:,.0f}" if abs(r) >= 1000 else f"{r:.3g}"


def _marks(curve: SweepCurve, p: CurvePoint) -> str:
    marks = []
    if p is curve.best:
        marks.append("best")
    if p is curve.cheap:
        marks.append("cheapest within noise")
    return ", ".join(marks)


def _fixed(fixed: dict) -> str:
    return f" with {', '.join(f'{k}={v}' for k, v in fixed.items())}" if fixed else ""


def _choice_line(curve: SweepCurve, who: str = "") -> Text:
    from alloclab.stats import estimates as stats
    from alloclab.report.common import fmt_value

    if curve.best is None:
        return Text(f"{who}no successful point", style="red")
    b, c = curve.best, curve.cheap
    rss = lambda p: f", peak RSS {fmt_value(p.rss.median)} MiB" if p.rss and p.rss.n else ""  # noqa: E731
    line = f"{who}best {curve.axis}={b.text} ({fmt_value(b.summary.median)} {curve.unit}{rss(b)})"
    if c is b:
        line += "; nothing smaller is within the noise of it"
    else:
        line += (f"; cheapest within the noise: {curve.axis}={c.text} "
                 f"({stats.format_comparison(c.vs_best)} vs best{rss(c)})")
    return Text(line, style="bold")


def variant_table(curve: SweepCurve) -> Table:
    from alloclab.stats import estimates as stats

    arrow = "higher is better" if curve.higher_is_better else "lower is better"
    t = Table(title=Text.assemble((curve.axis + " sweep" + _fixed(curve.fixed), "bold"), f" on {curve.subject}"),
              title_justify="left")
    t.add_column(curve.axis, justify="right")
    t.add_column(f"{curve.metric} ({curve.unit}, {arrow})", justify="right")
    t.add_column("vs best", justify="right")
    t.add_column("peak RSS MiB", justify="right")
    t.add_column("runs", justify="right")
    t.add_column("")
    for p in curve.points:
        vs = "" if p is curve.best or p.vs_best is None else stats.format_comparison(p.vs_best)
        t.add_row(*map(Text, (p.text, _median_ci(p.summary), vs, _median_ci(p.rss) if p.rss else "n/a",
                              str(p.summary.n), _marks(curve, p))), style="bold" if p is curve.best else "")
    return t


def param_table(curves: list[SweepCurve]) -> Table:
    """One parameter sweep: a row per value, a column per variant (with scaling, speedup and efficiency)."""
    first = curves[0]
    arrow = "higher is better" if first.higher_is_better else "lower is better"
    scaling = any(c.scaling for c in curves)
    what = f"{first.metric} ({first.unit}, {arrow})" + ("; x speedup, per-thread efficiency" if scaling else "")
    t = Table(title=Text.assemble((first.axis + " sweep" + _fixed(first.fixed), "bold"), f" of {first.base}: {what}"),
              title_justify="left")
    t.add_column(first.axis, justify="right")
    for c in curves:
        t.add_column(Text(c.subject), justify="right")
    for p in first.points:
        cells = [Text(p.text)]
        for c in curves:
            q = next((q for q in c.points if q.text == p.text), None)
            if q is None:
                cells.append(Text("n/a"))
                continue
            text = _median_ci(q.summary)
            steps = {s.threads: s for s in c.scaling.steps} if c.scaling else {}
            step = steps.get(q.value) if isinstance(q.value, (int, float)) else None
            if step is not None:
                text += f"\nx{step.speedup:.2f}, eff {step.efficiency:.0%}"
            mark = _marks(c, q)
            cells.append(Text(text + (f"\n{mark}" if mark else "")))
        t.add_row(*cells)
    return t


def ablation_table(r: AblationResult, spec: str) -> Table:
    arrow = "higher is better" if r.higher_is_better else "lower is better"
    t = Table(title=Text.assemble((f"ablation of {spec}", "bold"), f" on {r.workload}"), title_justify="left")
    t.add_column("variant")
    t.add_column(f"{r.metric} ({r.unit}, {arrow})", justify="right")
    t.add_column(Text("vs baseline (ratio [interval], adjusted p)"), justify="right")
    t.add_column("verdict")
    t.add_column("peak RSS vs baseline", justify="right")
    t.add_row(*map(Text, (f"{r.baseline} (baseline)", _median_ci(r.baseline_summary), "", "", "")))
    for e in r.singles + [r.combined]:
        name = f"{e.name} alone" if e is not r.combined else "all together"
        t.add_row(*map(Text, (name, _median_ci(e.summary), _ratio(e.comparison), e.comparison.verdict,
                              _pct(e.rss))), end_section=e is r.combined)
    ci = f"[{_x(r.interaction_low)}, {_x(r.interaction_high)}]" if math.isfinite(r.interaction_low) else "[n/a]"
    t.add_row(*map(Text, ("product of the single effects", "", f"x{_x(r.expected)}", "", "")))
    t.add_row(*map(Text, ("interaction = together / product", "", f"x{_x(r.interaction)} {ci}", r.verdict, "")))
    return t


def render_sweeps(r: Results, console: Console | None = None) -> None:
    """The sweep, scaling and ablation tables of Results built with sweeps=True."""
    out = console or default_console
    curves = r.sweeps
    shown_notes: set[str] = set()

    def note(text: str, style: str = "yellow") -> None:
        if text not in shown_notes:
            shown_notes.add(text)
            out.print(Text(text, style=style))

    done: set[int] = set()
    for curve in curves:
        if curve.kind == "variant":
            out.print(variant_table(curve))
            out.print(_choice_line(curve))
            for n in curve.notes:
                note(f"{curve.subject}: {n}")
        elif curve.source not in done:
            done.add(curve.source)
            group = [c for c in curves if c.source == curve.source]
            out.print(param_table(group))
            for c in group:
                out.print(_choice_line(c, f"{c.subject}: "))
                if c.scaling:
                    s = c.scaling
                    where = (f"scaling stops at {s.stops_at} {c.axis}: {s.reason}" if s.stops_at is not None
                             else s.reason)
                    out.print(Text(f"{c.subject}: {where}"))
                    if s.throughput_note:
                        note(s.throughput_note, "dim")
                    if s.cores_note:
                        note("Note: " + s.cores_note)
                for n in c.notes:
                    note(f"{c.subject}: {n}")
        out.print()
    for s, ablation in r.ablations:
        out.print(ablation_table(ablation, s["ablation"].get("spec", ablation.combined.label)))
        out.print(Text(ablation.text, style="bold"))
        out.print()
    if curves:
        a = r.analysis
        effect = f", effects below {a.min_effect:.1%} count as noise" if a.min_effect else ""
        out.print(Text(NOISE_RULE.format(alpha=a.alpha, effect=effect), style="dim"))


def render_stored_sweeps(r: Results, console: Console | None = None) -> bool:
    """The sweep tables of Results built with sweeps=True; False if the experiment has no sweep."""

    if not r.experiment.config.stored_sweeps():
        return False
    render_sweeps(r, console)
    return True


@app.command("sweep")
def sweep_command(
    experiment: Optional[int] = typer.Argument(None, show_default="the latest", help="Experiment id."),
    db: Path = ReadDbOption,
    min_effect: float = typer.Option(defaults.percent_text(defaults.MARGIN), "--min-effect", parser=min_effect_value, metavar="PERCENT", help="Equivalence margin: effects within it count as noise."),
) -> None:
    """Show the sweep, ablation and thread-scaling tables of a stored experiment."""
    from alloclab.stats.results import build_results

    store = open_store(db)
    exp_id = store.latest() if experiment is None else experiment
    if not render_stored_sweeps(build_results(store.load(exp_id), min_effect=min_effect, sweeps=True)):
        raise AlloclabError(
            f"Experiment {exp_id} in {store.path} has no sweep. Sweep a setting with a range or a list in a "
            f"variant (alloclab compare -a '{load_catalog().examples['sweep']}' -- CMD), a workload parameter "
            f"(alloclab suite --workload larson --param threads=1,2,4) or --ablate 'glibc:A=1,B=2'.")
