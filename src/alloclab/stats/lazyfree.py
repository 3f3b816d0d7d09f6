"""What LazyFree carries of a verdict on RSS at the end: pages given back with MADV_FREE stay in RSS
until the kernel needs them (snmalloc#846: 1,244 of 2,198 MiB RSS was LazyFree), so a program that
reads as holding more may only be holding pages the kernel can take at no cost.

In: an Analysis whose runs read LazyFree at the end (the launcher's end_lazyfree_mb, beside
end_anon_mb and end_anon_nolazy_mb: measure/standard.py). Out: a note per workload and variant where
LazyFree is a real part of the end reading, with the comparison without it, for the answer to print
beside the verdict it qualifies.
"""

from __future__ import annotations

from dataclasses import dataclass

from alloclab.stats.analysis import Analysis, WorkloadResult
from alloclab.stats.estimates import Comparison
from alloclab.workloads.metrics import END_ANON

LAZY, WITHOUT = "end_lazyfree_mb", "end_anon_nolazy_mb"
# Below these, LazyFree changes no verdict worth a line: a few pages any allocator leaves.
MIN_MB = 2.0
MIN_SHARE = 0.05


@dataclass(frozen=True)
class LazyNote:
    workload: str
    label: str                    # the variant whose end reading LazyFree carries
    mib: float                    # its median LazyFree at the end
    end_mib: float                # its median anonymous RSS at the end, LazyFree included
    without: Comparison | None    # against the default on the anonymous RSS without LazyFree

    def to_dict(self) -> dict:
        c = self.without
        return {"workload": self.workload, "label": self.label, "lazyfree_mb": self.mib, "end_anon_mb": self.end_mib,
                "without": None if c is None else {"metric": WITHOUT, "verdict": c.verdict, "ratio": c.ratio,
                                                   "low": c.ci_low, "high": c.ci_high}}


def _median(w: WorkloadResult, metric: str, vi: int) -> float | None:
    cell = w.cell(metric, vi)
    return cell.summary.median if cell is not None and cell.summary.n else None


def note(a: Analysis, w: WorkloadResult, vi: int) -> LazyNote | None:
    lazy, end = _median(w, LAZY, vi), _median(w, END_ANON, vi)
    if lazy is None or end is None or lazy < MIN_MB or lazy < MIN_SHARE * end:
        return None
    return LazyNote(w.name, a.labels[vi], lazy, end, None if vi == a.baseline_idx else w.comparison(WITHOUT, vi))


def notes(a: Analysis, variants: list[int]) -> list[LazyNote]:
    """The notes of the default and of each given variant, in that order, each once."""
    out = []
    for vi in dict.fromkeys([a.baseline_idx, *variants]):
        out += [n for w in a.workloads if (n := note(a, w, vi)) is not None]
    return out
