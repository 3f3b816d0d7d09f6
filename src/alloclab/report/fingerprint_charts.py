"""The fingerprint's two charts for the HTML report (report/html.py): the size histogram of the
program's requests, and live bytes against RSS over the untimed fingerprint run, per variant.
Drawn like report/charts.py (matplotlib's object API, inline SVG with its own id prefix)."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from alloclab.report.charts import _margins, colour, to_svg
from alloclab.store.fingerprint_model import Fingerprint


def size_histogram_chart(labels: list[str], fp_of: dict[int, Fingerprint], order: list[int]) -> str:
    """Calls per power-of-two size class (bars, one per variant side by side: the program's demand
    should not depend on the allocator, so a difference shows what the allocator changed, e.g. a
    library that sizes its buffers by malloc_usable_size), and the share of bytes per class (dots)."""
    fps = [(vi, fp_of[vi]) for vi in order if vi in fp_of and fp_of[vi].hist]
    classes = sorted({h.size_class for _, fp in fps for h in fp.hist})
    names = {h.size_class: h.label for _, fp in fps for h in fp.hist}
    fig = Figure(figsize=(11.5, 3.4))
    _margins(fig, [], right=0.7, bottom=0.75)
    ax = fig.add_subplot()
    x = np.arange(len(classes))
    width = 0.8 / max(len(fps), 1)
    share_ax = ax.twinx()
    share_ax.grid(False)
    for k, (vi, fp) in enumerate(fps):
        by = {h.size_class: h for h in fp.hist}
        calls = [by[c].calls if c in by else 0 for c in classes]
        total_bytes = sum(h.bytes for h in fp.hist) or 1
        shares = [(by[c].bytes / total_bytes * 100) if c in by else 0 for c in classes]
        pos = x - 0.4 + width * (k + 0.5)
        ax.bar(pos, calls, width=width, color=colour(vi), label=f"{labels[vi]}: calls")
        share_ax.plot(pos, shares, linestyle="none", marker="o", markersize=3.5, markerfacecolor="white",
                      markeredgecolor="#222222", zorder=3)
    ax.set_xticks(x, [names[c] for c in classes], rotation=45, ha="right", fontsize=7)
    ax.set_yscale("symlog", linthresh=1)
    ax.set_ylabel("allocation calls (log)")
    share_ax.set_ylabel("% of bytes (circles)")
    share_ax.set_ylim(0, 100)
    ax.set_xlabel("requested size (bytes, power-of-two classes)")
    ax.set_title("What the program asks for: calls per size class (bars) and share of bytes (circles)",
                 loc="left", fontsize=10)
    if fps:
        ax.legend(loc="upper right", fontsize=8, frameon=False, ncol=min(4, len(fps)))
    return to_svg(fig, "allocation sizes")


def live_vs_rss_chart(labels: list[str], fp_of: dict[int, Fingerprint], order: list[int]) -> str:
    """Per variant, over its fingerprint run: anonymous RSS (solid), the program's live bytes
    (dashed) and, where the allocator reports it, what the allocator says it holds (dotted). The
    gap between solid and dashed is the allocator's overhead; a server's phases are marked where
    they end."""
    fig = Figure(figsize=(11.5, 3.6))
    _margins(fig, [], bottom=0.55)
    ax = fig.add_subplot()
    drawn = 0
    ends: dict[str, float] = {}
    for vi in order:
        fp = fp_of.get(vi)
        series = fp.series if fp else []
        if not series:
            continue
        drawn += 1
        t = [pt.t_s for pt in series]
        ax.plot(t, [pt.anon_kb / 1024 for pt in series], color=colour(vi), linewidth=1.6,
                label=f"{labels[vi]}: anon RSS")
        ax.plot(t, [pt.live_kb / 1024 for pt in series], color=colour(vi), linewidth=1.2, linestyle="--",
                label=f"{labels[vi]}: live")
        held = [pt for pt in (fp.allocator.series if fp.allocator else []) if pt.held_kb is not None]
        if held:
            ax.plot([pt.t_s for pt in held], [pt.held_kb / 1024 for pt in held],
                    color=colour(vi), linewidth=1.0, linestyle=":", label=f"{labels[vi]}: allocator holds")
        for ph in fp.phases:
            ends.setdefault(ph.name, ph.t_end)
    for name, t in ends.items():
        ax.axvline(t, color="#555555", linewidth=0.8, linestyle=":")
        ax.annotate(f"end of {name}", (t, 1.0), xycoords=("data", "axes fraction"), xytext=(-9, -2),
                    textcoords="offset points", fontsize=7, color="#333333", rotation=90, va="top", ha="left")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("time since the first process started (s)")
    ax.set_ylabel("MiB (whole process tree)")
    ax.set_title("Live bytes against RSS in the fingerprint run: the gap is what the allocator keeps",
                 loc="left", fontsize=10)
    if drawn:
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)
        fig.subplots_adjust(right=0.78)
    return to_svg(fig, "live bytes against RSS")


# The parts of the split, coloured from the program's own (dark) to what is not the allocator's (grey).
PART_COLOURS = {"live": "#1b4f72", "free_top": "#e67e22", "free_inside": "#f5b041", "caches": "#af7ac5",
                "decaying": "#ec7063", "metadata": "#7f8c8d", "held": "#d4ac0d", "other": "#d5d8dc"}


def split_chart(labels: list[str], fp_of: dict[int, Fingerprint], order: list[int]) -> str:
    """Where the memory goes: per variant and reading (the peak, the end, each phase), the anonymous
    RSS as stacked bars of its resident parts, from the allocator's own books."""
    from alloclab.report.fingerprint import PART_WORDS
    from alloclab.store.fingerprint_model import PARTS

    bars = [(f"{labels[vi]} | {sp.at}", sp) for vi in order if (fp := fp_of.get(vi)) is not None and fp.books
            for sp in fp.books.splits]
    fig = Figure(figsize=(11.5, 0.8 + 0.28 * max(len(bars), 1)))
    _margins(fig, [name for name, _ in bars], right=2.0, bottom=0.5)
    ax = fig.add_subplot()
    y = np.arange(len(bars))[::-1]
    for part in PARTS:
        widths = [sp.parts.get(part, 0) / (1 << 20) for _, sp in bars]
        lefts = [sum(sp.parts.get(k, 0) for k in PARTS[:PARTS.index(part)]) / (1 << 20) for _, sp in bars]
        if any(widths):
            ax.barh(y, widths, left=lefts, color=PART_COLOURS[part], height=0.7, label=PART_WORDS[part])
    ax.plot([sp.anon / (1 << 20) for _, sp in bars], y, linestyle="none", marker="|", markersize=12, color="#222222",
            label="anonymous RSS")
    ax.set_yticks(y, [name for name, _ in bars], fontsize=7)
    ax.set_xlabel("MiB, resident")
    ax.set_title("Where the memory goes: the anonymous RSS in parts, by the allocator's own books", loc="left",
                 fontsize=10)
    if bars:
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)
    return to_svg(fig, "where the memory goes")
