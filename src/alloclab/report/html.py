"""One self-contained HTML file: tables, charts as inline SVG, the recommendation, warnings and
verification up front, the metadata at hand. No script, no stylesheet or image from elsewhere:
it works offline and can be mailed as an attachment."""

from __future__ import annotations

import json
import math
import statistics
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import jinja2

from alloclab import __version__
from alloclab.catalog.allocators import load_catalog
from alloclab.stats.analysis import Analysis
from alloclab.stats.recommend import RSS_METRIC
from alloclab.store.model import Run
from alloclab.report import fingerprint, tune
from alloclab.report.chart_style import RSS_LINES_PER_VARIANT, colour, pareto, pick_runs, strip
from alloclab.report.pen import Pen
from alloclab.workloads.metrics import PEAK_RSS
from alloclab.report.common import (FINDING_ORDER, allocator_lines, baseline_ran, baseline_warning, failed_run_lines, fmt_value, full_delta, metadata,
    shown_rows, variant_order, verdict_word, answers, statistics_line, verification_rows,
    verification_summary, warning_groups, process_lines, wrapper_answers)
from alloclab.report.across import sentence as choice_sentence
from alloclab.report.bounds import bound_answers

if TYPE_CHECKING:
    from alloclab.stats.results import Results

SUFFIX = ".html"

# The serious findings (common.WarningGroup.serious) as the banner names them.
SERIOUS_KINDS = {"all-failed": "failed runs", "failed-runs": "failed runs", "high-load": "other load on the host",
                 "drift": "drift"}

_env = jinja2.Environment(loader=jinja2.PackageLoader("alloclab.report", "templates"),
                          autoescape=jinja2.select_autoescape(["html", "j2"]),
                          trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)


def _series(run: Run) -> list:
    s = run.rss_series
    if isinstance(s, str):
        try:
            s = json.loads(s)
        except json.JSONDecodeError:
            return []
    return [p for p in (s or []) if isinstance(p, (list, tuple)) and len(p) == 2]


def _phase_marks(runs: list[Run]) -> list[tuple[str, float]]:
    """Where the memory phases (service_phases) began, as the median over the runs drawn: read
    from the summary line each run's stdout ends with."""
    starts: dict[str, list[float]] = {}
    for r in runs:
        for line in reversed((r.stdout or "").splitlines()):
            if line.startswith('{"alloclab"'):
                try:
                    phases = json.loads(line)["alloclab"].get("phases") or []
                except (json.JSONDecodeError, AttributeError):
                    phases = []
                for p in phases:
                    if isinstance(p, dict) and isinstance(p.get("t_start"), (int, float)):
                        starts.setdefault(str(p.get("name")), []).append(float(p["t_start"]))
                break
    return [(name, statistics.median(ts)) for name, ts in starts.items()]


def _table(a: Analysis, w, order: list[int], details: bool) -> dict:
    rows = []
    for row in shown_rows(w, details):
        cells = []
        for vi in order:
            c = row.cells[vi]
            s = c.summary
            interval = f"[{fmt_value(s.ci_low)}, {fmt_value(s.ci_high)}]" if math.isfinite(s.ci_low) else ""
            cells.append({"value": fmt_value(s.median), "interval": interval, "n": s.n,
                          "delta": full_delta(c.comparison) if c.comparison else "",
                          "verdict": c.comparison.verdict if c.comparison else "baseline",
                          "mark": verdict_word(c.comparison)})
        rows.append({"name": row.name, "unit": row.unit, "primary": row.primary,
                     "arrow": "higher is better" if row.higher_is_better else "lower is better", "cells": cells})
    return {"labels": [a.labels[vi] for vi in order], "baseline": a.labels[a.baseline_idx],
            "status": [w.verification[vi].status for vi in order],
            "runs": [f"{w.runs_total[vi] - len(w.runs_failed[vi])}/{w.runs_total[vi]}" for vi in order],
            "failed": [bool(w.runs_failed[vi]) for vi in order], "rows": rows}


def _intervals(w, primary, rss) -> dict[int, tuple]:
    out = {}
    for vi in range(len(primary.cells) if primary else 0):
        ps = primary.cells[vi].summary
        rs = rss.cells[vi].summary if rss else None
        out[vi] = ((rs.ci_low, rs.ci_high) if rs else (math.nan, math.nan), (ps.ci_low, ps.ci_high))
    return out


def _workload(a: Analysis, w, order: list[int], rec_choice, details: bool, pen: Pen) -> dict:
    """The workload's part of the page; its charts go to the pen (drawn later, together) and
    stand in the figures as their job numbers."""
    def chart(fn, *args):
        return pen.add("charts", fn, *args)

    figures = []
    rss = w.row(RSS_METRIC)
    primary = w.primary()
    # A chart costs ~50-90 ms to draw: the primary metric gets one, the other measures are in the
    # table (and get charts with --details). Issue 14: the demo's report in at most 3 s.
    for row in shown_rows(w, details):
        if row.name == RSS_METRIC or not (details or row is primary):
            continue
        figures.append({"svg": chart("metric_chart", a.labels, order, strip(row)), "caption": (
            f"{row.name}: every measured run is a dot; the tick is the median, the black bar its 95% interval. "
            f"Labels in green or red: significantly better or worse than {a.labels[a.baseline_idx]}.")})
    if rss:
        figures.append({"svg": chart("peak_rss_chart", a.labels, order, strip(rss)), "caption":
                        "Peak RSS of the whole process tree, sampled every 20 ms: bar and tick at the median, "
                        "dots per run."})
    if primary and rss:
        figures.append({"svg": chart("pareto_chart", pareto(rec_choice), order, f"{primary.name} (median, "
                                                   f"{'higher' if primary.higher_is_better else 'lower'} is better)",
                                                   "peak RSS (MiB, median)", _intervals(w, primary, rss)),
                        "caption": "Each variant at its median speed and peak RSS with 95% intervals; the dashed "
                                   "line joins the Pareto front (no other variant is both faster and leaner)."})
    # Only the runs drawn are parsed: the others' series are counted, not read.
    runs: dict[int, list[Run]] = {}
    for r in a.experiment.runs:
        if r.workload_idx == w.idx and not r.warmup and r.status == "ok" and r.rss_series \
                and r.rss_series not in ("[]", []):
            runs.setdefault(r.variant_idx, []).append(r)
    wide = None
    if runs:
        chosen = {vi: pick_runs(rs, RSS_LINES_PER_VARIANT) for vi, rs in runs.items()}
        picked = {vi: [_series(r) for r in rs] for vi, rs in chosen.items()}
        marks = _phase_marks([r for rs in chosen.values() for r in rs])
        total = sum(len(rs) for rs in runs.values())
        shown = sum(1 for vi in order for series in picked.get(vi, []) if series)   # as the chart counts
        wide = {"svg": chart("rss_over_time_svg", a.labels, order, picked, marks), "caption": f"RSS over time, {shown} of {total} measured runs drawn "
                                       f"(at most {RSS_LINES_PER_VARIANT} per variant, spread over "
                                       f"the experiment)." + (
                                           " Dotted lines: where the load and each memory phase began (median "
                                           "over the runs drawn); each phase ends with its RSS reading."
                                           if marks else "")}
    return {"name": w.name, "argv": " ".join(w.argv), "table": _table(a, w, order, details),
            "verification": verification_rows(a, w), "processes": process_lines(a, w), "failed": failed_run_lines(a, w),
            "warnings": warning_groups(a, w, details, limit=8), "figures": figures, "wide": wide,
            "choice": rec_choice, "fingerprint": _fingerprint_section(
                a.labels, fingerprint.for_workload(a.experiment, w.idx), order, pen)}


def _fingerprint_section(labels: list[str], fp_of: dict, order: list[int], pen: Pen) -> dict | None:
    """The workload's fingerprint part: the table the other reports print, the lines under it,
    and the two charts of report/fingerprint_charts.py (job numbers of the pen)."""
    if not fp_of:
        return None
    fp_of = fingerprint.typed(fp_of)
    ok = {vi: fp for vi, fp in fp_of.items() if not fp.failed}
    figures = []
    if any(fp.hist for fp in ok.values()):
        figures.append({"svg": pen.add("fingerprint_charts", "size_histogram_chart", labels, ok, order), "caption":
                        "Requested sizes in the untimed fingerprint run: calls per power-of-two class (log scale) "
                        "and the share of bytes in each class."})
    if any(fp.series for fp in ok.values()):
        figures.append({"svg": pen.add("fingerprint_charts", "live_vs_rss_chart", labels, ok, order), "caption":
                        "Anonymous RSS (solid) against the program's live bytes (dashed, usable sizes) over the "
                        "fingerprint run, summed over the process tree; dotted: what the allocator says it holds, "
                        "where it says. The gap between solid and dashed is the allocator's overhead (an upper "
                        "bound: stacks count too)."})
    if any(fp.books and fp.books.splits for fp in ok.values()):
        figures.append({"svg": pen.add("fingerprint_charts", "split_chart", labels, ok, order), "caption":
                        "Where the memory goes: the anonymous RSS at each reading of the fingerprint run, in its "
                        "resident parts, from the allocator's own books ("
                        + ", ".join(b.source for b in load_catalog().every_books())
                        + ") and /proc/self/smaps; the tick is the anonymous RSS itself."})
    return {"header": ["figure"] + [labels[vi] for vi in order], "rows": fingerprint.rows(fp_of, order),
            "lines": fingerprint.summary_lines(fp_of, labels), "explanation": fingerprint.explanation(fp_of),
            "errors": fingerprint.errors(fp_of, labels), "figures": figures}


# --- sweeps -----------------------------------------------------------------------------------

def _number(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _axis(points: list[dict]) -> tuple[list[float], list[str] | None, bool]:
    """x positions, tick labels for settings that are not numbers (None when they all are), log x."""
    values = [_number(p.get("value")) for p in points]
    if all(v is not None for v in values):
        return values, None, bool(values) and min(values) > 0 and max(values) / min(values) >= 100
    return [float(i) for i in range(len(points))], [str(p.get("text", p.get("value"))) for p in points], False


def _fixed(s: dict) -> str:
    fixed = s.get("fixed") or {}
    return f" ({', '.join(f'{k}={v}' for k, v in fixed.items())})" if fixed else ""


def _tunable_figures(a: Analysis, s: dict, pen: Pen) -> list[dict]:
    key = str(s["tunable"])
    labels = {label: i for i, label in enumerate(a.labels)}
    points = [p for p in s["points"] if isinstance(p, dict) and p.get("variant") in labels]
    if not points:
        return []
    xs, ticks, log_x = _axis(points)
    swept = [labels[p["variant"]] for p in points]
    figures = []
    for w in a.workloads:
        for row in (w.primary(), w.row(RSS_METRIC)):
            if row is None:
                continue
            curve = [(x, row.cells[vi].summary.median, row.cells[vi].summary.ci_low, row.cells[vi].summary.ci_high)
                     for vi, x in zip(swept, xs)]
            reference = None if a.baseline_idx in swept else (a.labels[a.baseline_idx],
                                                             row.cells[a.baseline_idx].summary.median)
            title = f"{row.name} against {key}{_fixed(s)}"
            unit = f" ({row.unit})" if row.unit else ""
            figures.append({"svg": pen.add("charts", "sweep_chart", f"{title}: {w.name}", key,
                                           [(row.name, colour(0), curve)], f"{row.name}{unit}", log_x, reference,
                                           ticks),
                            "caption": f"Median {row.name} of {w.name} at each value of {key}, shaded: 95% "
                                       f"interval" + (f"; dashed: {reference[0]}" if reference else "") + "."})
    return figures


def _param_figures(a: Analysis, s: dict, pen: Pen) -> list[dict]:
    name = str(s["param"])
    by_idx = {w.idx: w for w in a.workloads}
    points = [p for p in s["points"] if isinstance(p, dict) and p.get("workload") in by_idx]
    if not points:
        return []
    xs, ticks, log_x = _axis(points)
    figures = []
    for metric in ("primary", RSS_METRIC):
        curves, unit, title = [], "", ""
        for vi in variant_order(a):
            curve = []
            for p, x in zip(points, xs):
                w = by_idx[p["workload"]]
                row = w.primary() if metric == "primary" else w.row(metric)
                if row is None:
                    continue
                c = row.cells[vi].summary
                curve.append((x, c.median, c.ci_low, c.ci_high))
                unit, title = row.unit, row.name
            curves.append((a.labels[vi], colour(vi), curve))
        if title:
            figures.append({"svg": pen.add("charts", "sweep_chart", f"{title} against {name}{_fixed(s)}", name,
                                           curves, f"{title}{' (' + unit + ')' if unit else ''}", log_x, None,
                                           ticks),
                            "caption": f"Median {title} per variant at each value of {name}, shaded: 95% interval."})
    return figures


def sweep_figures(a: Analysis, pen: Pen) -> tuple[list[dict], str | None]:
    """Curves for the sweeps recorded in the config (config["sweeps"], or the single
    config["sweep"]); (figures, a note when there was a sweep but nothing could be drawn). Their
    charts are the pen's job numbers."""
    c = a.experiment.config
    sweeps = c.sweeps or ([c.sweep] if c.sweep else [])
    if not sweeps:
        return [], None
    figures, skipped = [], 0
    for s in sweeps if isinstance(sweeps, list) else [sweeps]:
        if not isinstance(s, dict) or not isinstance(s.get("points"), list):
            skipped += "ablation" not in s if isinstance(s, dict) else 1
            continue
        made = _tunable_figures(a, s, pen) if "tunable" in s else _param_figures(a, s, pen) if "param" in s else []
        skipped += not made
        figures += made
    note = None
    if skipped:
        note = (f"{skipped} recorded sweep{'s' if skipped != 1 else ''} had no points that match this experiment's variants or workloads "
                f"(or no list of points); no curves drawn for them.")
    return figures, note


# --- the page ---------------------------------------------------------------------------------

def _verdict_grid(a, order: list[int]) -> tuple[list[str], list[str], dict, dict]:
    """The first picture's data: per workload and variant, the primary comparison's and peak RSS's
    verdict, gain and short effect, as the analysis has them."""
    names, labels = [w.name for w in a.workloads], [a.labels[vi] for vi in order[1:]]
    cells, rss = {}, {}
    for w in a.workloads:
        primary = w.primary()
        for vi in order[1:]:
            for grid, c in ((cells, w.comparison(primary.name, vi) if primary else None),
                            (rss, w.comparison(PEAK_RSS, vi))):
                if c is not None:
                    grid[(w.name, a.labels[vi])] = (c.verdict, c.gain, _cell_text(c))
    return names, labels, cells, rss


def _cell_text(c) -> str:
    if c.verdict == "equivalent":
        return "≈"
    change = c.ratio - 1
    text = f"x{c.ratio:.3g}" if c.ratio >= 3 else f"{change * 100:+.0f}%"
    return ("? " if c.verdict == "undecided" else "") + text


def context(r: Results, options) -> dict:
    a, rec = r.analysis, r.recommendation
    order = variant_order(a)
    pen = Pen()
    workloads = [_workload(a, w, order, c, options.details, pen) for w, c in zip(a.workloads, rec.workloads)]
    overall_figure = None
    if len(a.workloads) > 1:
        overall_figure = pen.add("charts", "pareto_chart", pareto(rec.overall), order,
                                 "geomean of the primary-metric ratios (x, higher is better)",
                                 "geomean peak RSS ratio (x, lower is better)")
    grid = _verdict_grid(a, order)
    picture = pen.add("charts", "verdict_map", *grid) if grid[1] else None   # a baseline alone: no picture
    sweep, sweep_note = sweep_figures(a, pen)
    drawn = pen.draw(f"{r.key} details={options.details}" if r.key else None)
    picture = drawn[picture] if picture is not None else None
    for w in workloads:
        for f in w["figures"] + ([w["wide"]] if w["wide"] else []) + (w["fingerprint"] or {}).get("figures", []):
            f["svg"] = drawn[f["svg"]]
    for f in sweep:
        f["svg"] = drawn[f["svg"]]
    if overall_figure is not None:
        overall_figure = drawn[overall_figure]
    level, sentence = verification_summary(a)
    n_serious = sum(1 for w in workloads for g in w["warnings"] if g.serious) + \
        sum(1 for w in workloads if w["failed"])
    # The banner names the kinds that occurred, most serious first: not "failed runs" over drift alone.
    seen = {g.code for w in workloads for g in w["warnings"] if g.serious} | \
        ({"failed-runs"} if any(w["failed"] for w in workloads) else set())
    serious_kinds = list(dict.fromkeys(SERIOUS_KINDS[c] for c in FINDING_ORDER if c in seen))
    return {
        "title": a.experiment.row.title, "experiment": a.experiment,
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"), "version": __version__,
        "verification": {"level": level, "sentence": sentence}, "serious_warnings": n_serious,
        "serious_kinds": serious_kinds,
        "metadata": metadata(a), "allocators": allocator_lines(a), "rec": rec,
        "choices": rec.workloads + ([rec.overall] if len(rec.workloads) > 1 else []),
        "sentences": [choice_sentence(c) for c in rec.workloads + ([rec.overall] if len(rec.workloads) > 1 else [])],
        "overall_figure": overall_figure, "workloads": workloads, "sweep": sweep, "sweep_note": sweep_note,
        "picture": picture,
        "baseline": baseline_ran(a), "colours": {a.labels[vi]: colour(vi) for vi in order},
        "answers": answers(a), "statistics": statistics_line(a), "baseline_warning": baseline_warning(a),
        "wrappers": wrapper_answers(a) + bound_answers(a),
        "tune": r.tune and {"title": tune.title(a.experiment), "facts": tune.facts(r.tune),
                            "lead": tune.open_lead(r.tune), "picks": [tune.pick_view(p, r.tune) for p in r.tune.picks],
                            "state": (tune.state_line(r.tune) or ("", ""))[1], "sections": tune.sections(r.tune)},
    }


def export(r: Results, options) -> str:
    # Compiled before the charts are drawn: while a forked drawer draws them, not after.
    page = _env.get_template("report.html.j2")
    return page.render(**context(r, options))
