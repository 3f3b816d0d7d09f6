"""tune's rules as pure logic: each fires on the reading of its mechanism and stays silent on a
control; values come from the reading; the answer picks only decided effects."""

from __future__ import annotations

from alloclab.catalog.tune_rules import load_rules, number
from alloclab.tune.diagnosis import Reading, reading
from alloclab.tune.prescribe import prescribe

MiB = 1 << 20


def _glibc(**values) -> Reading:
    return Reading("glibc", "glibc", {"cpus": 2.0, "threads": 1.0, "allocs_per_s": 1000.0} | values)


def _fired(readings, allocators=("tcmalloc", "jemalloc")):
    rx = prescribe(readings, list(allocators))
    return rx, {c.rule for c in rx.candidates}


def test_every_rule_loads_with_its_fields():
    rules = load_rules()
    assert {r.name for r in rules} >= {"glibc-trim-churn", "glibc-mmap-churn", "glibc-arena-bloat",
                                       "jemalloc-decay-hold", "jemalloc-decay-churn", "tcmalloc-thread-cache",
                                       "mimalloc-purge", "allocator-bound"}
    assert all(r.expect in ("faster", "less memory") and r.tries for r in rules)
    assert number("4M") == 4 * MiB and number("128K") == 131072 and number(0.5) == 0.5


def test_trim_churn_fires_with_a_pad_above_the_measured_swing_and_the_allocators_join():
    r = _glibc(trim_bytes_per_s=200.0 * MiB, trim_regrown_share=0.99, trim_turnover=50.0, heap_swing=28.0 * MiB,
               trim_bytes=4e9, faults=1e6)
    r.words["trim_how"] = "27,832 brk calls"
    rx, rules = _fired({"glibc": r})
    pad = next(c for c in rx.candidates if c.rule == "glibc-trim-churn")
    assert pad.spec == "glibc:MALLOC_TOP_PAD_=64M"
    assert "28 MiB" in pad.mechanism and "27,832 brk calls" in pad.mechanism
    assert [c.spec for c in rx.candidates if c.rule == "glibc-trim-churn"][1:] == ["tcmalloc", "jemalloc"]


def test_trim_churn_reads_a_threads_arena_trimmed_with_madvise_and_regrown_in_faults():
    """Two threads churning 64 KiB messages (tests/programs/msgchurn.c): no brk at all; each arena's
    top goes back with madvise and faults in again. Under jemalloc the same call is a purge."""
    fp = {"wall_s": 1.3, "threads": 3, "allocs": 120000, "allocs_per_s": 92000.0, "minflt": 640148,
          "memory": {"peak_live_kb": 400, "end_live_kb": 1, "peak_anon_kb": 900, "end_anon_kb": 300},
          "syscalls": {"brk": 1, "mmap": 4, "munmap": 2, "madvise": 79998},
          "syscall_bytes": {"brk_grown": 135168, "brk_shrunk": 0, "madvise_released": 2.6e9}}
    r = reading("glibc", "glibc", fp)
    assert r.get("trim_bytes") == 2.6e9 and r.get("arena_trim_bytes") == 2.6e9 and r.get("brk_trim_bytes") == 0
    assert r.get("trim_refault_share") == 1.0 and r.get("trim_regrown_share") == 1.0 and r.get("trim_turnover") > 2
    rx, _ = _fired({"glibc": r}, ("mimalloc",))
    pad = next(c for c in rx.candidates if c.rule == "glibc-trim-churn")
    assert pad.spec == "glibc:MALLOC_TOP_PAD_=1M", pad.spec
    assert "arenas trimmed with madvise: 79,998 calls" in pad.mechanism and "640,148 page faults" in pad.mechanism
    # The allocators race for the mechanism that fired, in its words, not for the allocation rate.
    plain = next(c for c in rx.candidates if c.spec == "mimalloc")
    assert "arenas trimmed with madvise" in plain.mechanism, plain.mechanism
    assert reading("jemalloc", "jemalloc", fp).get("trim_bytes") == 0
    # Trimmed once and never regrown (few faults): not churn.
    assert "glibc-trim-churn" in _fired({"glibc": reading("glibc", "glibc", fp | {"minflt": 2000})}, ())[0].silent


def test_pads_follow_the_measured_growth():
    small = prescribe({"glibc": _glibc(trim_bytes_per_s=50.0 * MiB, trim_regrown_share=1.0, trim_turnover=10.0, heap_swing=3.0 * MiB)}, [])
    large = prescribe({"glibc": _glibc(trim_bytes_per_s=50.0 * MiB, trim_regrown_share=1.0, trim_turnover=10.0, heap_swing=30.0 * MiB)}, [])
    assert small.candidates[0].spec == "glibc:MALLOC_TOP_PAD_=8M"
    assert large.candidates[0].spec == "glibc:MALLOC_TOP_PAD_=64M"


def test_a_quiet_program_fires_nothing():
    rx, rules = _fired({"glibc": _glibc(trim_bytes_per_s=0.0, trim_regrown_share=0.0, big_bytes_per_s=0.0,
                                        overhead_peak=1.0 * MiB, overhead_peak_share=0.1)})
    assert rx.fired == [] and rx.candidates == []
    assert "glibc-trim-churn" in rx.silent


def test_a_misspelt_or_mistyped_rule_field_is_refused():
    import pytest
    from alloclab.catalog.tune_rules import _rule
    from alloclab.errors import AlloclabError
    good = {"name": "r", "reads": "glibc", "when": [["threads", ">=", 1]], "mechanism": "m", "expect": "faster",
            "try": ["tcmalloc"], "why": "w"}
    assert _rule(good | {"rate_only": True}).rate_only and not _rule(good).rate_only
    with pytest.raises(AlloclabError, match="unknown fields \\['rate_onyl'\\]"):
        _rule(good | {"rate_onyl": True})
    with pytest.raises(AlloclabError, match="malformed"):
        _rule(good | {"rate_only": "yes"})


def test_a_share_bound_takes_the_upper_limit_of_the_samples():
    from types import SimpleNamespace as NS
    from alloclab.stats.estimates import proportion_upper
    from alloclab.tune.bound import share_bound

    def summary(samples, allocator, kernel_mm=0.0):
        run = NS(samples=samples, shares={"allocator": allocator, "kernel_mm": kernel_mm})
        return NS(ok_runs=[run], kernel_visible=True, allocator=(allocator, allocator, allocator))

    # 0 of 185 samples still allows 1.6%; 75 of 21,603 (qemu-img's 0.35%) at most 0.42%.
    assert abs(proportion_upper(0, 185) - 0.0161) < 1e-3 and abs(proportion_upper(75, 21603) - 0.0042) < 1e-4
    time = share_bound("w", summary(1000, 0.004, 0.001), None)
    assert time.share == 0.005 and time.upper > 0.005 and time.bound == time.upper and time.metric is None
    rate = share_bound("w", summary(1000, 0.004, 0.001), NS(name="ops", higher_is_better=True))
    assert rate.bound == 1 / (1 - rate.upper) - 1
    assert share_bound("w", summary(10, 1.0), NS(name="ops", higher_is_better=True)).bound == float("inf")
    blind = summary(1000, 0.004)
    blind.kernel_visible = False
    assert share_bound("w", blind, None) is None


def test_rules_of_the_allocation_rate_alone_are_told_apart_from_a_mechanism():
    # qemu-img bench: many calls, nothing churned or held: only the rate fired, so a CPU-share
    # bound may rule them all out. With trim churn beside them, the mechanism races.
    busy = _glibc(allocs_per_s=241000.0, threads=63.0, trim_bytes_per_s=0.0, trim_share=0.0)
    rx, _ = _fired({"glibc": busy, "tcmalloc": Reading("tcmalloc", "tcmalloc", {"threads": 63.0,
                                                                                "allocs_per_s": 218000.0})})
    assert set(rx.fired) == {"allocator-bound", "tcmalloc-thread-cache"} and rx.rate_only
    churn = _glibc(allocs_per_s=241000.0, trim_bytes_per_s=200.0 * MiB, trim_regrown_share=0.99, trim_turnover=50.0,
                   heap_swing=28.0 * MiB)
    rx, _ = _fired({"glibc": churn})
    assert "glibc-trim-churn" in rx.fired and "allocator-bound" in rx.fired and not rx.rate_only
    assert not _fired({"glibc": _glibc()})[0].rate_only   # nothing fired is not "rate only"


def test_a_missing_reading_fails_the_condition_rather_than_guessing():
    rx, _ = _fired({"glibc": _glibc(trim_regrown_share=1.0)})   # no system-call counts: no trim rate
    assert "glibc-trim-churn" not in rx.fired


def test_mmap_churn_caps_the_threshold_at_glibcs_largest():
    r = _glibc(big_bytes_per_s=500.0 * MiB, big_unmapped_share=1.1, big_block=64.0 * MiB, munmap_calls=40,
               munmap_bytes=2.5e9, big_turnover=40.0)
    rx, _ = _fired({"glibc": r}, ())
    specs = [c.spec for c in rx.candidates]
    assert specs[0] == "glibc:MALLOC_MMAP_THRESHOLD_=32M,MALLOC_TOP_PAD_=256M"
    assert specs[1] == "glibc:MALLOC_MMAP_MAX_=0,MALLOC_TRIM_THRESHOLD_=256M"
    # The same bytes in one buffer asked once (turnover 1): its pages fault in once whatever the threshold.
    once = _glibc(big_bytes_per_s=500.0 * MiB, big_unmapped_share=1.0, big_block=64.0 * MiB, big_turnover=1.0)
    assert "glibc-mmap-churn" in _fired({"glibc": once}, ())[0].silent


def test_arena_bloat_needs_threads_and_memory_held_beyond_live():
    bloated = _glibc(threads=16.0, overhead_most=200.0 * MiB, overhead_most_share=0.9, peak_live=20.0 * MiB)
    rx, _ = _fired({"glibc": bloated}, ())
    assert [c.spec for c in rx.candidates] == ["glibc:MALLOC_ARENA_MAX=2"]
    assert rx.candidates[0].expect == "less memory"
    one_thread = _glibc(threads=1.0, overhead_most=200.0 * MiB, overhead_most_share=0.9)
    assert "glibc-arena-bloat" not in _fired({"glibc": one_thread}, ())[0].fired


def test_jemalloc_decay_rules_read_jemallocs_own_fingerprint():
    held = Reading("jemalloc", "jemalloc", {"held_after_phase": 80.0 * MiB, "held_after_phase_share": 0.6},
                   held_where="after flush")
    rx, _ = _fired({"jemalloc": held}, ())
    assert [c.spec for c in rx.candidates] == ["jemalloc:dirty_decay_ms=0,muzzy_decay_ms=0"]
    assert "after flush" in rx.candidates[0].mechanism
    quiet = Reading("jemalloc", "jemalloc", {"held_after_phase": 2.0 * MiB, "held_after_phase_share": 0.05})
    assert _fired({"jemalloc": quiet}, ())[0].fired == []


def test_a_version_specific_spelling_is_chosen_from_the_installed_version():
    held = Reading("mimalloc", "mimalloc", {"held_after_phase": 80.0 * MiB, "held_after_phase_share": 0.6})
    old = prescribe({"mimalloc": held}, [], {"mimalloc": "2.0.9"})
    new = prescribe({"mimalloc": held}, [], {"mimalloc": "2.1.2"})
    assert old.candidates[0].spec == "mimalloc:MIMALLOC_DECOMMIT_DELAY=0"
    assert new.candidates[0].spec == "mimalloc:MIMALLOC_PURGE_DELAY=0"


def test_a_refused_candidate_is_kept_with_its_reason_not_raced():
    r = _glibc(trim_bytes_per_s=200.0 * MiB, trim_regrown_share=1.0, trim_turnover=25.0, heap_swing=8.0 * MiB)
    rx = prescribe({"glibc": r}, [], check=lambda spec: "not known to this glibc" if "TOP_PAD" in spec else None)
    assert rx.candidates[0].refused == "not known to this glibc"


def test_reading_of_a_stored_fingerprint_per_unit_of_work():
    fp = {"wall_s": 30.0, "threads": 3, "allocs": 500000, "allocs_per_s": 16666.0,
          "memory": {"peak_live_kb": 50000, "end_live_kb": 1000, "overhead_at_peak_kb": 4000, "overhead_at_end_kb": 20000,
                     "peak_anon_kb": 60000, "end_anon_kb": 21000, "anon_at_peak_live_kb": 54000},
          "syscalls": {"brk": 27832, "mmap": 10, "munmap": 5, "madvise": 0},
          "syscall_bytes": {"brk_grown": 4.5e9, "brk_shrunk": 4.4e9, "munmap": 1e6, "madvise_released": 0},
          "per_work": {"work": "transaction", "rate": 12.0, "window_s": 13.0, "calls": 2030.0, "calls_in_window": 316680},
          "phases": [{"name": "disconnect", "overhead_kb": 30000, "anon_kb": 40000, "live_kb": 10000}],
          "hist": [[18, "128K-256K", 10, 2000000]]}
    r = reading("glibc", "glibc", fp)
    assert r.per == "transaction"
    # The run's trimmed bytes per allocation call, times the calls of a transaction in the window:
    # the window's 156 transactions are not all the run's (its start and warm-up trimmed too).
    assert abs(r.get("heap_swing") - 4.4e9 / 500000 * 2030) < 1 and r.get("heap_swing") < 4.4e9 / 156
    assert r.get("trim_share") > 0.97 and r.get("brk_calls") == 27832
    assert r.get("held_after_phase") == 30000 * 1024 and r.held_where == "after disconnect"
    assert r.get("big_block") == float(1 << 18)


def test_readings_of_a_load_and_of_its_memory_phases_merge_at_their_largest():
    from alloclab.tune.diagnosis import Reading, merged
    load = Reading("glibc", "glibc", {"allocs_per_s": 90000.0, "trim_bytes_per_s": 1e6}, per="request")
    phases = Reading("glibc", "glibc", {"allocs_per_s": 40000.0, "held_after_phase": 100e6,
                                        "held_after_phase_share": 0.7}, held_where="after flush")
    r = merged([load, phases])
    assert r.get("allocs_per_s") == 90000.0 and r.get("held_after_phase") == 100e6
    assert r.per == "request" and r.held_where == "after flush"


def test_the_diagnosis_fingerprints_the_workload_with_memory_phases_too():
    from types import SimpleNamespace as NS
    from alloclab.tune.diagnose_run import diagnosed
    from alloclab.measure.service.executors import CommandModeExecutor, ServiceExecutor
    session = NS(ef=NS(loads=[NS(phases=[]), NS(phases=["flush"])]))
    bench = NS(name="benchmark", executor=ServiceExecutor(session, 0))
    fill = NS(name="fill", executor=ServiceExecutor(session, 1))
    assert [w.name for w in diagnosed([bench, fill])] == ["benchmark", "fill"]
    assert [w.name for w in diagnosed([fill, bench])] == ["fill"]
    assert [w.name for w in diagnosed([NS(name="cmd", executor=None)])] == ["cmd"]
    # Commands cost a measured run each: every one is fingerprinted.
    commands = NS(ef=NS(loads=[NS(phases=[]), NS(phases=[])]))
    qcow2, raw = (NS(name=n, executor=CommandModeExecutor(commands, i)) for i, n in enumerate(("qcow2", "raw")))
    assert [w.name for w in diagnosed([qcow2, raw])] == ["qcow2", "raw"]
