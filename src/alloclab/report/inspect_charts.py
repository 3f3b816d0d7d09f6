"""The picture of a watch (`alloclab inspect --watch -f html`): one process's anonymous RSS sample by
sample, stacked in the split's parts. Drawn like report/charts.py (matplotlib's object API, inline
SVG with its own id prefix) in the fingerprint's colours for the parts (report/fingerprint_charts.py),
so a part looks the same on both pages."""

from __future__ import annotations

from matplotlib.figure import Figure

from alloclab.report.charts import _margins, to_svg
from alloclab.report.fingerprint import PART_WORDS
from alloclab.report.fingerprint_charts import PART_COLOURS
from alloclab.store.fingerprint_model import PARTS
from alloclab.store.inspect_model import Growth, Snapshot

MIB = 1 << 20


def parts_over_time_chart(snaps: list[Snapshot], g: Growth | None) -> str:
    """Stacked areas of the parts (MiB) against the seconds since the first sample, the anonymous RSS
    and the RSS as lines over them, a dot at each sample (a watch of two samples is two dots, not a
    trend drawn between them), and the part that grew named in the title."""
    snaps = [s for s in snaps if s.split is not None]
    t = [s.t_s for s in snaps]
    fig = Figure(figsize=(11.5, 3.8))
    _margins(fig, [], right=2.1, bottom=0.55)
    ax = fig.add_subplot()
    shown = [k for k in PARTS if any(s.split.parts.get(k, 0) for s in snaps)]
    if shown:
        ax.stackplot(t, *[[s.split.parts.get(k, 0) / MIB for s in snaps] for k in shown],
                     colors=[PART_COLOURS[k] for k in shown], labels=[PART_WORDS[k] for k in shown])
    ax.plot(t, [s.split.anon / MIB for s in snaps], color="#222222", linewidth=1.4, marker="o", markersize=3,
            label="anonymous RSS")
    ax.plot(t, [s.rss / MIB for s in snaps], color="#555555", linewidth=1.0, linestyle="--", label="RSS")
    ax.set_ylim(bottom=0)
    if len(t) > 1:
        ax.set_xlim(t[0], t[-1])
    ax.set_xlabel("seconds since the first sample")
    ax.set_ylabel("MiB, resident")
    pid = snaps[0].pid if snaps else "?"
    grew = f": {PART_WORDS[g.grew]} grew most (+{g.change / MIB:,.1f} MiB)" if g is not None and g.grew else ""
    ax.set_title(f"Process {pid}, where its anonymous memory goes, sample by sample{grew}", loc="left",
                 fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)
    return to_svg(fig, f"process {pid} over time")
