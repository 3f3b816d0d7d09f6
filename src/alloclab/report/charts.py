"""Charts for the HTML report, drawn by matplotlib and returned as inline SVG text.

Every chart shows the data behind the numbers: each run is a dot, each median carries its
interval. Figures are built with the object API (no pyplot state), so rendering is safe to call
repeatedly, and every SVG gets its own id prefix because many share one HTML document.
"""

from __future__ import annotations

import io
import itertools
import math
import multiprocessing as mp
import os
import re
import signal
import threading
from typing import Callable

import matplotlib
import numpy as np

matplotlib.use("Agg")

from matplotlib.collections import LineCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from alloclab.report.chart_style import Pareto, Strip, colour  # noqa: E402

# Beyond this many dots per variant they are drawn as one embedded bitmap inside the SVG: the
# chart stays one self-contained element and renders fast at 10,000 runs.
RASTER_ABOVE = 400
VERDICT_COLOUR = {"better": "#1a7f37", "worse": "#cf222e"}

matplotlib.rcParams.update({
    "svg.fonttype": "none",         # text stays text: smaller, selectable, the page's font
    "svg.hashsalt": "alloclab",     # the same data gives the same SVG
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
})

_ids = itertools.count(1)


def reset_ids(start: int = 1) -> None:
    """Start the SVG id prefixes again: one report renders the same bytes every time."""
    global _ids
    _ids = itertools.count(start)


_jobs: list[Callable[[], str]] | None = None
FORK_FROM = 6   # charts per extra worker below which forking costs more than it saves


def draw_all(jobs: list[Callable[[], str]], first_id: int = 1, costs: list[float] | None = None) -> list[str]:
    """Each job draws one chart (its SVG). A chart costs 50-90 ms, most of it matplotlib's own
    Python: with more than one core and a dozen charts, forked workers draw them side by side
    (forked: they inherit the jobs and the imported matplotlib; only SVG text comes back), the
    costliest first (`costs`, estimates), so that no worker is left with a long one at the end.
    Job k gets id prefix first_id + k either way, so the page is the same bytes; ids go on after them."""
    global _jobs
    workers = min(len(os.sched_getaffinity(0)), 4, len(jobs) // FORK_FROM)
    # Forking a process with other threads running (a fleet client, a progress display) could
    # copy a lock that one of them holds: draw in this process then.
    if workers < 2 or threading.active_count() > 1 or "fork" not in mp.get_all_start_methods():
        out = [_draw(k, jobs, first_id) for k in range(len(jobs))]
    else:
        _jobs = jobs
        try:
            # The CLI turns SIGTERM into KeyboardInterrupt (cli/core.py); forked workers would
            # inherit that, and the pool ends them with SIGTERM: a traceback each. They are forked
            # with the default action (the only thread is this one: signal.signal may be called).
            previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
            try:
                pool = mp.get_context("fork").Pool(workers)
            finally:
                signal.signal(signal.SIGTERM, previous)
            first = sorted(range(len(jobs)), key=lambda k: -costs[k]) if costs else range(len(jobs))
            with pool:
                drawn = pool.starmap(_draw_forked, [(k, first_id) for k in first], chunksize=1)
            out = [""] * len(jobs)
            for k, svg in zip(first, drawn):
                out[k] = svg
        finally:
            _jobs = None
    reset_ids(first_id + len(jobs))
    return out


def _draw(k: int, jobs: list[Callable[[], str]], first_id: int) -> str:
    reset_ids(first_id + k)
    return jobs[k]()


def _draw_forked(k: int, first_id: int) -> str:
    return _draw(k, _jobs, first_id)


def _margins(fig: Figure, labels: list[str] = (), right: float = 0.25, top: float = 0.35,
             bottom: float = 0.5) -> None:
    """Fixed margins in inches, the left one wide enough for the longest y label: one draw
    instead of the two a tight bounding box costs."""
    w, h = fig.get_size_inches()
    left = 0.55 + 0.065 * max((len(s) for s in labels), default=6)
    fig.subplots_adjust(left=left / w, right=1 - right / w, top=1 - top / h, bottom=bottom / h)


def to_svg(fig: Figure, title: str) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", dpi=110, metadata={"Date": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    # The RDF block names matplotlib's web site and a date: neither belongs in a reproducible report.
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, count=1, flags=re.DOTALL)
    prefix = f"c{next(_ids)}-"
    svg = re.sub(r'\bid="([^"]+)"', rf'id="{prefix}\1"', svg)
    svg = re.sub(r'(href=")#', rf"\1#{prefix}", svg)
    svg = svg.replace("url(#", f"url(#{prefix}")
    # Scale with the page: keep the viewBox, drop the fixed size.
    head, rest = svg.split(">", 1)
    head = re.sub(r'\s(width|height)="[^"]*"', "", head)
    safe = title.replace("&", "&amp;").replace("<", "&lt;").replace('"', "&quot;")
    return f'{head} class="chart" role="img" aria-label="{safe}"><title>{safe}</title>{rest}'


def short_number(v: float, _pos=None) -> str:
    """Tick labels without matplotlib's detached "1e6" offset: 4.7M, 12.6k, 0.075."""
    a = abs(v)
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= div:
            return f"{v / div:.4g}{suffix}"
    return f"{v:.4g}"


SHORT = FuncFormatter(short_number)


def _jitter(n: int, seed: int, width: float = 0.28) -> np.ndarray:
    return (np.random.default_rng(seed).random(n) - 0.5) * width


def _strip(ax, labels: list[str], order: list[int], row: Strip, bars: bool = False) -> None:
    """Per variant (one line each, baseline on top): every run a dot, the median a tick, its
    interval a thick bar. One artist per kind for all variants together (the dots one scatter,
    the intervals one line collection, the medians one marker line): a scatter call costs ~8 ms,
    and three artists per variant made each chart cost ~100 ms."""
    intervals, medians, bar_rows = [], [], []
    xs, ys, colours = [], [], []
    many = max((len(row.cells[vi].values) for vi in order), default=0) > RASTER_ABOVE
    for y, vi in enumerate(order):
        c = row.cells[vi]
        if bars and math.isfinite(c.median):
            bar_rows.append((y, c.median, colour(vi)))
        if c.values:
            xs.append(np.asarray(c.values, dtype=float))
            ys.append(y + _jitter(len(c.values), vi, 0.5))
            colours += [colour(vi)] * len(c.values)
        if c.interval:
            intervals.append([(c.interval[0], y), (c.interval[1], y)])
        if math.isfinite(c.median):
            medians.append((c.median, y))
    if bar_rows:
        ax.barh([y for y, _, _ in bar_rows], [m for _, m, _ in bar_rows], height=0.6,
                color=[c for _, _, c in bar_rows], alpha=0.25, zorder=1)
    if xs:
        # Arrays, not lists: matplotlib masks a list element by element.
        ax.scatter(np.concatenate(xs), np.concatenate(ys), s=8 if many else 26, c=colours,
                   alpha=0.35 if many else 0.75, edgecolors="white", linewidths=0 if many else 0.6,
                   zorder=2, rasterized=many)
    if intervals:
        ax.add_collection(LineCollection(intervals, colors="black", linewidths=2.5, capstyle="butt", zorder=3,
                                         alpha=0.8))
    if medians:
        # Over the dots: with thousands of runs the median must still show.
        ax.plot([m for m, _ in medians], [y for _, y in medians], linestyle="none", marker="|", markersize=20,
                markeredgewidth=2, color="black", zorder=4)
    ax.xaxis.set_major_formatter(SHORT)
    ax.set_yticks(range(len(order)))
    ticks = ax.set_yticklabels([labels[vi] for vi in order])
    for vi, label in zip(order, ticks):
        verdict = row.cells[vi].verdict
        if verdict in VERDICT_COLOUR:
            label.set_color(VERDICT_COLOUR[verdict])
            label.set_fontweight("bold")
    ax.set_ylim(len(order) - 0.5, -0.5)
    ax.grid(axis="y", visible=False)


def metric_chart(labels: list[str], order: list[int], row: Strip) -> str:
    fig = Figure(figsize=(5.6, 0.42 * len(order) + 0.95))
    _margins(fig, [labels[vi] for vi in order], bottom=0.3)
    ax = fig.add_subplot()
    _strip(ax, labels, order, row)
    unit = f" ({row.unit})" if row.unit else ""
    better = "higher is better" if row.higher_is_better else "lower is better"
    ax.set_title(f"{row.name}{unit}: {better}", loc="left", fontsize=10)
    return to_svg(fig, f"{row.name} per variant: every run, median and interval")


def peak_rss_chart(labels: list[str], order: list[int], row: Strip) -> str:
    fig = Figure(figsize=(5.6, 0.42 * len(order) + 1.2))
    _margins(fig, [labels[vi] for vi in order])
    ax = fig.add_subplot()
    _strip(ax, labels, order, row, bars=True)
    ax.set_xlim(left=0)
    ax.set_xlabel("peak RSS of the process tree (MiB)")
    ax.set_title("Peak RSS per variant", loc="left", fontsize=10)
    return to_svg(fig, "Peak RSS per variant")


def rss_over_time_chart(labels: list[str], order: list[int], series: dict[int, list[list]],
                        marks: list[tuple[str, float]] = ()) -> tuple[str, int]:
    """series: variant -> the [[t, kb], ...] of the runs to draw; marks: (phase, start time) drawn
    as labelled vertical lines. Returns (svg, lines drawn)."""
    fig = Figure(figsize=(11.5, 3.4))
    _margins(fig, [], bottom=0.55)
    ax = fig.add_subplot()
    shown = 0
    for vi in order:
        runs = [s for s in series.get(vi, []) if s]
        if not runs:
            continue
        shown += len(runs)
        # The run with the median peak stands for the variant; the others show the spread.
        ranked = sorted(runs, key=lambda s: max(kb for _, kb in s))
        typical = ranked[len(ranked) // 2]
        others = [[(t, kb / 1024) for t, kb in s] for s in runs if s is not typical]
        if others:
            ax.add_collection(LineCollection(others, colors=colour(vi), linewidths=0.8, alpha=0.45))
        # Runs of a few samples would draw as nothing at all without markers.
        ax.plot([t for t, _ in typical], [kb / 1024 for _, kb in typical], color=colour(vi), linewidth=1.8,
                marker="o" if len(typical) < 8 else None, markersize=4, label=labels[vi])
    ax.autoscale()
    ax.set_ylim(bottom=0)
    for name, t in marks:
        ax.axvline(t, color="#555555", linewidth=0.8, linestyle=":")
        ax.annotate(name, (t, 1.0), xycoords=("data", "axes fraction"), xytext=(2, -2), textcoords="offset points",
                    fontsize=7, color="#333333", rotation=90, va="top", ha="left")
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("RSS of the process tree (MiB)")
    ax.set_title("RSS over time: a typical run per variant (bold) and others (thin)", loc="left", fontsize=10)
    if shown:
        ax.legend(loc="lower right", fontsize=8, frameon=False, ncol=min(5, len(order)))
    return to_svg(fig, "RSS over time per variant"), shown


def rss_over_time_svg(*args) -> str:
    return rss_over_time_chart(*args)[0]


def pareto_chart(choice: Pareto, order: list[int], speed_label: str, rss_label: str,
                 intervals: dict[int, tuple] | None = None) -> str:
    """Speed against memory, one point per variant; the Pareto front joined and ringed.
    intervals: variant -> ((rss_lo, rss_hi), (speed_lo, speed_hi)) where known."""
    fig = Figure(figsize=(5.6, 4.0))
    _margins(fig, [], bottom=0.55)
    ax = fig.add_subplot()
    pts = {p.variant_idx: p for p in choice.points}
    drawn = [vi for vi in order if math.isfinite(pts[vi].speed) and math.isfinite(pts[vi].rss)]
    # One collection for every interval and one scatter for every point: errorbar() per point
    # builds a dozen artists each.
    segments = []
    for vi in drawn:
        p = pts[vi]
        if intervals and vi in intervals:
            (xl, xh), (yl, yh) = intervals[vi]
            if math.isfinite(xl) and math.isfinite(xh):
                segments.append([(xl, p.speed), (xh, p.speed)])
            if math.isfinite(yl) and math.isfinite(yh):
                segments.append([(p.rss, yl), (p.rss, yh)])
    if segments:
        ax.add_collection(LineCollection(segments, colors="#555555", linewidths=1, zorder=2))
    ax.scatter([pts[vi].rss for vi in drawn], [pts[vi].speed for vi in drawn], s=55, zorder=3,
               c=[colour(vi) for vi in drawn], alpha=[0.95 if pts[vi].usable else 0.35 for vi in drawn])
    ax.margins(0.15)
    x_lo, x_hi = ax.get_xlim()
    for vi in drawn:
        p = pts[vi]
        # Labels of points in the right half go to their left, so none runs off the figure.
        right_half = p.rss > (x_lo + x_hi) / 2
        ax.annotate(p.label + ("" if p.usable else " (unusable)"), (p.rss, p.speed),
                    xytext=(-7 if right_half else 7, 6), textcoords="offset points", fontsize=8,
                    ha="right" if right_half else "left")
    front = sorted((pts[vi] for vi in choice.front), key=lambda p: p.rss)
    if front:
        ax.plot([p.rss for p in front], [p.speed for p in front], color="black", linewidth=1, linestyle="--",
                zorder=2, label="Pareto front")
        ax.scatter([p.rss for p in front], [p.speed for p in front], s=190, facecolors="none",
                   edgecolors="black", linewidths=1.2, zorder=4)
        ax.legend(loc="best", fontsize=8, frameon=False)
    if choice.pick is not None:
        p = pts[choice.pick]
        right_half = p.rss > (x_lo + x_hi) / 2
        ax.annotate("recommended", (p.rss, p.speed), xytext=(-7 if right_half else 7, -13),
                    textcoords="offset points", fontsize=8, color=VERDICT_COLOUR["better"], fontweight="bold",
                    ha="right" if right_half else "left")
    ax.set_xlabel(rss_label)
    ax.set_ylabel(speed_label)
    ax.yaxis.set_major_formatter(SHORT)
    ax.set_title("Speed versus memory", loc="left", fontsize=10)
    return to_svg(fig, "Speed versus memory with the Pareto front")


def sweep_chart(title: str, xlabel: str, curves: list[tuple[str, str, list[tuple[float, float, float, float]]]],
                ylabel: str, log_x: bool = False, reference: tuple[str, float] | None = None,
                ticks: list[str] | None = None) -> str:
    """curves: (label, colour, [(x, median, ci_low, ci_high), ...]) each drawn as a line with
    its intervals; reference: (label, y) of a variant outside the sweep, drawn dashed; ticks:
    labels at x = 0, 1, ... for settings that are not numbers."""
    fig = Figure(figsize=(5.6, 3.6))
    _margins(fig, [], bottom=0.55)
    ax = fig.add_subplot()
    for label, col, pts in curves:
        pts = sorted((p for p in pts if math.isfinite(p[0]) and math.isfinite(p[1])), key=lambda p: p[0])
        if not pts:
            continue
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        ax.plot(xs, ys, marker="o", color=col, label=label, linewidth=1.5, markersize=5)
        lo = [p[2] if math.isfinite(p[2]) else p[1] for p in pts]
        hi = [p[3] if math.isfinite(p[3]) else p[1] for p in pts]
        ax.fill_between(xs, lo, hi, color=col, alpha=0.15, linewidth=0)
    if reference and math.isfinite(reference[1]):
        ax.axhline(reference[1], color="#555555", linestyle="--", linewidth=1, label=reference[0])
    if log_x:
        ax.set_xscale("log")
    if ticks:
        ax.set_xticks(range(len(ticks)), ticks)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.yaxis.set_major_formatter(SHORT)
    ax.set_title(title, loc="left", fontsize=10)
    if len(curves) > 1 or reference:
        ax.legend(fontsize=8, frameon=False)
    return to_svg(fig, title)


# The page's first picture: who wins where. Verdict colours, deeper for a larger effect.
_MAP_COLOURS = {"better": (0.10, 0.55, 0.25), "worse": (0.80, 0.15, 0.15), "equivalent": (0.30, 0.65, 0.75),
                "undecided": (0.75, 0.75, 0.75)}


def verdict_map(workloads: list[str], variants: list[str], cells: dict, rss: dict) -> str:
    """Workloads by variants, two panels: the primary metric and, beside it, peak RSS. `cells` and
    `rss`: (workload, variant) -> (verdict, gain, text), gain > 1 better whatever the metric's
    direction. A cell's colour is its verdict, deeper for a larger effect (log scale, full at 4x);
    its text, the effect."""
    rows, cols = len(workloads), len(variants)
    fig = Figure(figsize=(min(16.0, 2.0 + 2.2 * cols), 1.2 + 0.42 * rows))
    fig.subplots_adjust(left=0.5 / fig.get_size_inches()[0] + 0.012 * max(len(w) for w in workloads),
                        right=0.99, top=1 - 0.85 / fig.get_size_inches()[1], bottom=0.3 / fig.get_size_inches()[1],
                        wspace=0.06)
    for k, (title, data) in enumerate((("primary metric against the baseline", cells),
                                       ("peak RSS against the baseline", rss))):
        ax = fig.add_subplot(1, 2, k + 1)
        img = np.ones((rows, cols, 3))
        for i, w in enumerate(workloads):
            for j, v in enumerate(variants):
                verdict, gain, text = data.get((w, v), ("undecided", None, ""))
                base = np.array(_MAP_COLOURS.get(verdict, _MAP_COLOURS["undecided"]))
                depth = 1.0
                if verdict in ("better", "worse") and gain and gain > 0:
                    depth = 0.35 + 0.65 * min(1.0, abs(math.log(gain)) / math.log(4))
                img[i, j] = 1 - depth * (1 - base)
                ax.text(j, i, text, ha="center", va="center", fontsize=7,
                        color="white" if depth > 0.7 and verdict in ("better", "worse") else "#111111")
        ax.imshow(img, aspect="auto")
        ax.set_xticks(range(cols), variants, rotation=30, ha="left", fontsize=7)
        ax.xaxis.tick_top()
        ax.set_yticks(range(rows), workloads if k == 0 else [""] * rows, fontsize=8)
        ax.set_xlabel(title, fontsize=9)
        ax.tick_params(length=0)
        for side in ax.spines.values():
            side.set_visible(False)
    return to_svg(fig, "who wins where")
