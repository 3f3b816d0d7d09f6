"""The measures every run has (workloads.metrics.STANDARD), read from its RunResult."""

from __future__ import annotations

from alloclab.measure.run import RunResult


def standard_values(r: RunResult) -> dict[str, float]:
    """Every standard measure the run has; end_anon_mb only where the launcher read it (a command's
    run, where ptrace is allowed)."""
    return {
        "wall_s": r.wall_s, "cpu_s": r.user_s + r.sys_s, "user_s": r.user_s, "sys_s": r.sys_s,
        "peak_rss_mb": r.peak_rss_kb / 1024, "max_rss_mb": r.max_rss_kb / 1024,
        "final_rss_mb": r.final_rss_kb / 1024,
        **({"end_anon_mb": r.end_anon_kb / 1024} if r.end_anon_kb >= 0 else {}),
        # MADV_FREE'd pages stay in RSS until the kernel reclaims them: an allocator that frees so
        # (jemalloc's muzzy pages) looks as if it held them. Beside the end reading, and without them.
        **({"end_lazyfree_mb": r.end_lazyfree_kb / 1024,
            "end_anon_nolazy_mb": max(0, r.end_anon_kb - r.end_lazyfree_kb) / 1024}
           if r.end_anon_kb >= 0 and r.end_lazyfree_kb >= 0 else {}),
        # Whether the kernel gave the huge pages a setting asked for (glibc.malloc.hugetlb=1), run by run.
        **({"end_huge_mb": r.end_huge_kb / 1024} if r.end_anon_kb >= 0 and r.end_huge_kb >= 0 else {}),
        "minflt": r.minflt, "majflt": r.majflt, "nvcsw": r.nvcsw, "nivcsw": r.nivcsw,
    }
