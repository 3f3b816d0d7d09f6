"""What bounds an answer that stayed open: the allocator's share of the CPU in a profile of the
same cells (`--profile`, or the one-run profile a sequential run makes of what it left open)."""

from __future__ import annotations

import statistics

from alloclab.report.common import metric_title, primary_rows, variant_order
from alloclab.stats.analysis import Analysis


def _allocator_share(profile: dict) -> float | None:
    """The median share of the profiled runs' CPU samples that fell in the allocator's functions or
    in the kernel's memory management (page faults, brk, mmap, munmap, madvise), which the allocator
    drives: what any allocator could change is bounded by both."""
    shares = [r["shares"].get("allocator", 0.0) + r["shares"].get("kernel_mm", 0.0) for r in profile.get("runs", [])
              if r.get("status") == "ok" and r.get("samples")]
    return statistics.median(shares) if shares else None


def bound_answers(a: Analysis) -> list[str]:
    """Beside a primary comparison that stayed undecided (or was closed as a bound), what a profile
    of the same cells says: the allocator's share of the CPU bounds what any allocator could gain."""
    out = []
    for w in a.workloads:
        open_ = [(row, vi) for row in primary_rows(w) for vi in variant_order(a)[1:]
                 if (c := row.cells[vi].comparison) is not None and c.verdict == "undecided"]
        shares = {vi: _allocator_share(p) for (wi, vi), p in a.experiment.profiles.items() if wi == w.idx}
        shares = {vi: x for vi, x in shares.items() if x is not None}
        if not open_ or not shares:
            continue
        top = max(shares.values())
        per = ", ".join(f"{a.labels[vi]} {shares[vi] * 100:.1f}%" for vi in variant_order(a) if vi in shares)
        metrics = ", ".join(sorted({metric_title(row)[0] for row, _ in open_}))
        where = f"{w.name}: " if len(a.workloads) > 1 else ""
        kernel = all(p.get("kernel_visible", True) for (wi, _), p in a.experiment.profiles.items() if wi == w.idx)
        what = ("the allocator's functions and the kernel's memory management" if kernel else
                "the allocator's functions (the kernel's share was not visible to perf)")
        out.append(f"{where}{metrics} undecided, and {what} took at most {top * 100:.1f}% of "
                   f"the CPU in the profiled runs ({per}): no allocator can change it by much more than that")
    return out
