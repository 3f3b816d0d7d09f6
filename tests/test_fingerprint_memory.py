"""Pure logic of the fingerprint's memory figures: the merged series with the allocator's own
figures, the phase readings on the interposer's clock, and where the allocator's count agrees
with ours (the real thing: tests/test_fingerprint_allocstats_e2e.py)."""

from __future__ import annotations

from alloclab.measure.fingerprint import phase_memory, summarize
from alloclab.measure.service.values import summary_line
from alloclab.report.fingerprint import agreement, agreement_lines, rows


def _proc(pid, start_ns, series, source="jemalloc mallctl"):
    return {"pid": pid, "ppid": 1, "cmdline": "x", "start_ns": start_ns, "t_ns": start_ns + series[-1][0] * 1_000_000,
            "final": 1, "calls": {"malloc": 10, "free": 5}, "hist": [[5, 10, 200]], "live": 1000, "anon_kb": 10,
            "sampled": {"lifetime_decades_from_1us": [0] * 9}, "series": series,
            "allocator_stats": {"source": source, "allocated": 1, "held": 2}}


def test_allocator_figures_are_summed_over_the_processes_that_report_them():
    a = _proc(1, 10**9, [[0, 100, 500, 400, 110, 300], [1000, 200, 600, 500, 210, 400]])
    b = _proc(2, 10**9, [[0, 50, 100, 80, -1, -1], [1000, 60, 100, 80, -1, -1]], source="none")
    out = summarize([a, b], 1.0)
    assert out["allocator"]["source"] == "jemalloc mallctl"
    assert out["allocator"]["allocated_is"] == "stats.allocated"
    end = out["allocator"]["at_end"]
    # live sums both processes; the allocator's figures only the one that reports them.
    assert end == {"live_kb": 260, "allocated_kb": 210, "held_kb": 400}
    assert out["series_t0_monotonic_s"] == 1.0
    # An interposer that wrote 4 columns (before the allocator's figures) gives no allocator part.
    old = _proc(3, 10**9, [[0, 100, 500, 400], [1000, 200, 600, 500]], source="none")
    assert "allocator" not in summarize([old], 1.0)


def test_a_phase_is_read_at_its_end_on_the_interposer_clock():
    # The server was started at monotonic 99.7 s, its first process sampled at 100.0 s: the phase
    # "load" ended 1.5 s after the server's start, 1.2 s into the series. The next phase (a flush)
    # began at once; at 1.4 s into the series live is already down.
    series = [(0.0, 100, 5000, 900), (1.0, 40000, 50000, 44000), (1.4, 50, 50000, 44000)]
    own = [(0.0, 90, 1000), (1.0, 39000, 47000), (1.4, 40, 47000)]
    line = summary_line({"rss_after_load_mb": 48.8, "phases": [
        {"name": "load", "t_start": 0.5, "t_end": 1.5, "end_monotonic_s": 101.2}]})
    got = phase_memory(series, line, own, t0_monotonic_s=100.0)
    assert got == [{"name": "load", "t_end": 1.2, "live_kb": 40000, "anon_kb": 44000, "overhead_kb": 4000,
                    "rss_kb": 49971, "allocated_kb": 39000, "held_kb": 47000}]
    # Without the clock, the server's start stands for time 0 and the reading falls into the flush.
    assert phase_memory(series, line)[0]["live_kb"] == 50


def test_agreement_within_ten_percent_or_a_mebibyte():
    assert agreement(20_000, 20_800) == "agrees (+4.0%)"
    assert agreement(20_000, 26_000) == "differs (+30.0%)"
    assert agreement(100, 900) == "agrees (+800.0%)"          # within 1 MiB: a small program's noise
    assert agreement(None, 5) is None and agreement(5, None) is None
    fp = {"allocator": {"source": "glibc mallinfo2", "held_is": "arena + hblkhd",
                        "at_peak_live": {"live_kb": 20_000, "allocated_kb": 20_300, "held_kb": 30_000},
                        "at_end": {"live_kb": 3_000, "allocated_kb": 3_100, "held_kb": 9_000}},
          "phases": [{"name": "flush", "live_kb": 3_000, "allocated_kb": 9_000}]}
    mi = {"allocator": {"source": "mimalloc mi_process_info", "held_is": "current commit",
                        "at_peak_live": {"live_kb": 20_000, "allocated_kb": None, "held_kb": 30_000}}}
    lines = agreement_lines({0: fp, 1: mi}, ["glibc", "mimalloc"])
    assert lines == ["glibc (glibc mallinfo2): allocated against live at the peak agrees (+1.5%), "
                     "at the end agrees (+3.3%), after flush differs (+200.0%)",
                     "mimalloc (mimalloc mi_process_info): reports no allocated bytes, only what it holds "
                     "(current commit)"]


def test_mechanism_cites_syscalls_and_overhead_that_differ():
    from types import SimpleNamespace

    from alloclab.report.fingerprint import mechanism

    def fp(brk, madvise, overhead_kb):
        return {"syscalls": {"brk": brk, "mmap": 120, "munmap": 4, "madvise": madvise, "mprotect": 27},
                "memory": {"overhead_at_end_kb": overhead_kb}}
    e = SimpleNamespace(fingerprints={(0, 0): fp(1393, 5, 5 * 1024), (0, 1): fp(6, 4, 5 * 1024),
                                      (0, 2): fp(1200, 160, 31 * 1024), (0, 3): {"error": "x"}})
    labels = ["glibc", "glibc:TOP_PAD", "tcmalloc", "mimalloc"]
    assert mechanism(e, 0, 1, 0, labels) == ["brk 6 vs glibc 1,393 (fingerprint)"]
    assert mechanism(e, 0, 2, 0, labels) == ["madvise 160 vs glibc 5 (fingerprint)",
                                             "31.0 MiB beyond live at end vs glibc 5.0 MiB (fingerprint)"]
    assert mechanism(e, 0, 3, 0, labels) == [] and mechanism(e, 0, 0, 0, labels) == []


def test_negative_overhead_is_said_to_be_untouched_blocks():
    # PostgreSQL under glibc at full size: 85 MiB live at the peak against 60 MiB anonymous RSS, the
    # blocks handed out on a just-trimmed heap top not yet written (docs/fingerprint.md).
    a = _proc(1, 10**9, [[0, 87_000, 61_000, 61_000], [1000, 400, 2_800, 2_800]], source="none")
    fp = summarize([a], 1.0)
    assert fp["memory"]["overhead_at_peak_kb"] == -26_000
    got = dict((r[0], r[1]) for r in rows({0: fp}, [0]))
    assert got["overhead at peak live"] == "-25.4 MiB (live blocks not all touched)"
    assert got["overhead at end"] == "2.3 MiB"


def test_a_short_timeout_gives_the_fingerprint_run_a_proportionate_one():
    from alloclab.measure.fingerprint import fingerprint_timeout
    # --timeout 1 once gave each fingerprint run 120 s: `tune --timeout 1 -- sleep 30` sat through
    # four 30-s runs before its race timed out at 1 s.
    assert fingerprint_timeout(1) == 14
    assert fingerprint_timeout(60) == 120 and fingerprint_timeout(300) == 300
    assert fingerprint_timeout(None) is None
