"""Whether the kernel gave the huge pages a setting asked for, run by run.

glibc.malloc.hugetlb=1 asks for transparent huge pages for glibc's heap (madvise); the kernel gives
them where it has free 2 MiB blocks, and on a 2-core VM it did in about half the runs. The read-back
proves the tunable was set, not that the pages came: each run's AnonHugePages at its end
(the launcher's end_huge_mb) does.

In: an Analysis whose runs read end_huge_mb, and the variants of the picks. Out: a note per workload
and pick where the pick's or the default's runs ended with huge pages: in how many runs, and how
many MiB of them, beside the default's.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from alloclab.stats.analysis import Analysis, WorkloadResult

HUGE = "end_huge_mb"
GIVEN_MB = 2.0   # one huge page: a run below it got none


@dataclass(frozen=True)
class HugeNote:
    workload: str
    label: str
    given: int              # runs that ended with huge pages
    runs: int
    given_mb: float | None  # their median MiB of huge pages
    default_given: int
    default_runs: int

    def to_dict(self) -> dict:
        return {"workload": self.workload, "label": self.label, "given": self.given, "runs": self.runs,
                "given_mb": self.given_mb, "default_given": self.default_given, "default_runs": self.default_runs}


def _values(w: WorkloadResult, vi: int) -> list[float]:
    cell = w.cell(HUGE, vi)
    return list(cell.values) if cell is not None else []


def note(a: Analysis, w: WorkloadResult, vi: int) -> HugeNote | None:
    mine, base = _values(w, vi), _values(w, a.baseline_idx)
    if not mine or not base:
        return None
    given = [v for v in mine if v >= GIVEN_MB]
    default_given = sum(1 for v in base if v >= GIVEN_MB)
    if not given and not default_given:
        return None
    return HugeNote(w.name, a.labels[vi], len(given), len(mine), statistics.median(given) if given else None,
                    default_given, len(base))


def notes(a: Analysis, variants: list[int]) -> list[HugeNote]:
    return [n for vi in dict.fromkeys(variants) if vi != a.baseline_idx
            for w in a.workloads if (n := note(a, w, vi)) is not None]
