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
        if kernel:
            out.append(f"{where}{metrics} undecided, and the allocator's functions and the kernel's memory "
                       f"management took at most {top * 100:.1f}% of the CPU in the profiled runs ({per}): "
                       f"no allocator can change it by much more than that")
            continue
        # Without the kernel's share the profile bounds only the allocator's own code: an allocator
        # that changes the page faults (glibc's trimming against a pad) moves what perf did not see.
        faults = _fault_changes(w, [vi for _, vi in open_], a.labels)
        out.append(f"{where}{metrics} undecided; the allocator's functions took at most {top * 100:.1f}% of the "
                   f"CPU in the profiled runs ({per}), but the kernel's share (page faults, brk, mmap) was not "
                   f"visible to perf, so this bounds only the allocator's own code, not what it changes through "
                   f"the kernel" + (f": here minor faults changed {faults}" if faults else ""))
    return out


FAULTS_WORTH_SAYING = 0.25   # a decided change of minor faults this large can carry a throughput effect


def _fault_changes(w, variants: list[int], labels: list[str]) -> str:
    """'-91.3% (tcmalloc)': the decided changes of minor faults of the open variants."""
    row = w.row("minflt")
    if row is None:
        return ""
    said = []
    for vi in dict.fromkeys(variants):
        c = row.cells[vi].comparison
        if c is not None and c.verdict in ("better", "worse") and abs(c.ratio - 1) >= FAULTS_WORTH_SAYING:
            said.append(f"{(c.ratio - 1) * 100:+.1f}% ({labels[vi]})")
    return ", ".join(said)
