"""Profiling: attribution of perf samples, callgrind counts, and `alloclab profile` end to end.

The parsing and attribution tests read perf output recorded here, from real programs under real
allocators, and cross-check it against `perf report`; the pure-logic tests use hand-written
frames. Every degraded path (perf missing, perf_event_paranoid, a stripped binary, a timeout)
runs for real except paranoid values this machine does not have, which are passed in.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import psutil
import pytest

from alloclab.measure import machine
from alloclab.measure.callgrind import count, self_costs
from alloclab.cli.profile import render_profiles, sparkline
from alloclab.errors import AlloclabError
from alloclab.workloads.metrics import MetricDef
from alloclab.measure.profile.attribution import Attribution, Frame, RunProfile, Sample, attribute, parse_perf_script
from alloclab.measure.profile.perf import perf_access, perf_script, sampling_event, wrap_perf_record
from alloclab.measure.profile.record import profile_workload
from alloclab.store.model import Run
from alloclab.measure.profile.summary import (ProfileSummary, _finish, counters_of, headline, load_profiles,
                                              store_profiles)
from alloclab.store.db import Store
from alloclab.workloads import builtin
from alloclab.catalog.variants import parse_variants
from alloclab.workloads.command import Workload
from conftest import ALLOCLAB, missing_prerequisite, require_allocator, run_cli

pytestmark = pytest.mark.e2e
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"
OPS = MetricDef("ops", "ops/s", True, "regex", r"ops/s: (\d+)", True)
DOCS = MetricDef("docs", "docs/s", True, "regex", r"docs/s: ([\d.]+)", True)


def needs_perf():
    if not shutil.which("perf"):
        missing_prerequisite("perf is not installed (apt-get install -y linux-perf)")
    try:
        return perf_access()
    except AlloclabError as exc:
        pytest.skip(str(exc))


# --- pure logic: which frame is what ----------------------------------------------------------------

def _k(sym):
    return Frame(0xFFFFFFFF81000000, sym, "[kernel.kallsyms]")


def _u(sym, dso=LIBC):
    return Frame(0x98000, sym, dso)


@pytest.mark.parametrize("frame, expected", [
    (_u("cfree@GLIBC_2.2.5"), "allocator"),
    (_u("unlink_chunk.constprop.0"), "allocator"),
    (_u("_int_free_merge_chunk"), "allocator"),
    (_u("tcache_init.part.0"), "allocator"),
    (_u("__memmove_avx512_unaligned_erms"), "user_other"),
    (_u("[unknown]"), "user_other"),                     # stripped libc: cannot tell malloc apart
    (_u("malloc", "/tmp/own_malloc"), "user_other"),     # the program's own malloc is not glibc's
    (_u("malloc@plt", "/tmp/prog"), "allocator"),        # the stub a program calls malloc through
    (_u("operator delete[]@plt", "/tmp/prog"), "allocator"),
    (_u("memcpy@plt", "/tmp/prog"), "user_other"),
    (_k("clear_page_erms"), "kernel_mm"),
    (_k("do_anonymous_page"), "kernel_mm"),
    (_k("__do_sys_brk"), "kernel_mm"),
    (_k("_raw_spin_unlock_irqrestore"), "kernel_other"),  # ambiguous without a call graph
])
def test_leaf_attribution_under_glibc(frame, expected):
    cat, _, _ = Attribution(None).classify(Sample("p", 1, 1, [frame]))
    assert cat == expected


def test_the_variants_library_is_allocator_code_whatever_the_symbol(tmp_path):
    lib = tmp_path / "liballoc.so.1.2"
    lib.write_bytes(b"")
    (tmp_path / "liballoc.so.1").symlink_to(lib.name)
    a = Attribution(str(tmp_path / "liballoc.so.1"))
    assert a.classify(Sample("p", 1, 1, [_u("[unknown]", str(lib))]))[0] == "allocator"
    assert a.classify(Sample("p", 1, 1, [_u("_int_malloc")]))[0] == "allocator"   # glibc's, if reached
    assert a.classify(Sample("p", 1, 1, [_u("main", "/tmp/prog")]))[0] == "user_other"


def test_call_graphs_tell_the_kernel_work_apart():
    a = Attribution(None)
    brk = [_k("mas_find"), _k("__do_sys_brk"), _k("do_syscall_64"), _u("__brk"), _u("__sbrk"),
           _u("sysmalloc"), _u("_int_malloc"), _u("malloc"), _u("main", "/tmp/prog")]
    assert a.classify(Sample("p", 1, 1, brk)) == ("kernel_mm", "brk", True)
    fault_in_app = [_k("_raw_spin_unlock_irqrestore"), _k("do_anonymous_page"), _k("handle_mm_fault"),
                    _k("exc_page_fault"), _k("asm_exc_page_fault"), _u("main", "/tmp/prog")]
    assert a.classify(Sample("p", 1, 1, fault_in_app)) == ("kernel_mm", "page faults", False)
    file_fault = [_k("next_uptodate_folio"), _k("filemap_map_pages"), _k("do_fault"), _k("exc_page_fault"),
                  _k("asm_exc_page_fault"), _u("_dl_relocate_object", "/lib64/ld-linux-x86-64.so.2")]
    assert a.classify(Sample("p", 1, 1, file_fault))[0] == "kernel_other"
    populate = [_k("clear_page_erms"), _k("do_anonymous_page"), _k("exc_page_fault"), _k("__get_user_8"),
                _k("do_mmap"), _k("vm_mmap_pgoff"), _k("__x64_sys_mmap"), _u("mmap64")]
    assert a.classify(Sample("p", 1, 1, populate))[1] == "mmap"     # the outermost entry wins
    teardown = [_k("zap_pte_range"), _k("unmap_vmas"), _k("exit_mmap"), _k("do_exit")]
    assert a.classify(Sample("p", 1, 1, teardown))[0] == "kernel_other"
    arena_lock = [_k("finish_task_switch"), _k("schedule"), _k("futex_wait"), _k("__x64_sys_futex"),
                  _u("__lll_lock_wait_private"), _u("_int_free"), _u("completer", "/tmp/prog")]
    assert a.classify(Sample("p", 1, 1, arena_lock)) == ("kernel_other", None, True)
    queue_wait = [_k("finish_task_switch"), _k("futex_wait"), _u("pthread_cond_wait"), _u("queue_pop", "/tmp/prog")]
    assert a.classify(Sample("p", 1, 1, queue_wait)) == ("kernel_other", None, False)
    r = attribute([Sample("p", 1, 2, [_u("malloc")]), Sample("p", 1, 1, brk), Sample("p", 1, 1, arena_lock),
                   Sample("p", 1, 1, queue_wait), Sample("p", 1, 1, fault_in_app)], a, call_graph=True)
    assert r.kernel_mm_from_allocator == pytest.approx(1 / 6) and r.kernel_other_from_allocator == pytest.approx(1 / 6)
    s = ProfileSummary("w", "glibc", 0, None, "cpu-clock", 999, True, True, [r])
    assert s.allocator_with_kernel() == pytest.approx((4 / 6, 4 / 6, 4 / 6))    # malloc + brk + arena lock


def test_shares_are_weighted_by_period_and_unresolved_dsos_are_counted():
    samples = [Sample("p", 1, 3, [_u("malloc")]), Sample("p", 1, 1, [_u("[unknown]", "/tmp/stripped")]),
               Sample("p", 1, 1, [_k("clear_page_erms")]), Sample("p", 1, 1, [_u("main", "/tmp/prog")])]
    r = attribute(samples, Attribution(None), call_graph=False)
    assert r.samples == 4
    assert r.shares == {"allocator": 0.5, "kernel_mm": 1 / 6, "kernel_other": 0.0, "user_other": 1 / 3}
    assert r.allocator_symbols == {"malloc [libc.so.6]": 0.5}
    assert r.unresolved == {"/tmp/stripped": [1 / 6, 1.0]}
    assert r.kernel_mm_from_allocator is None


def test_perf_script_lines_with_and_without_call_graphs():
    text = """\
           churn   441/441      1001001 cpu-clock:  ffffffff813437d5 pte_mkwrite ([kernel.kallsyms])
my prog 12 7/7    2002 cpu-clock:u:      7faef75c331a operator delete(void*) (/usr/lib/libtcmalloc.so.4)
churn 14316/14316    1001001 cpu-clock: 
\tffffffff815f34b4 __do_sys_brk ([kernel.kallsyms])
\t           fdc47 __brk (/usr/lib/x86_64-linux-gnu/libc.so.6)
\t               0 [unknown] ([unknown])

"""
    samples = list(parse_perf_script(text.splitlines()))
    assert [(s.comm, s.pid, s.period, len(s.frames)) for s in samples] == [
        ("churn", 441, 1001001, 1), ("my prog 12", 7, 2002, 1), ("churn", 14316, 1001001, 3)]
    assert samples[1].frames[0] == Frame(0x7FAEF75C331A, "operator delete(void*)", "/usr/lib/libtcmalloc.so.4")
    assert samples[2].frames[0].kernel and not samples[2].frames[1].kernel


# --- pure logic: perf access, summaries, storage -----------------------------------------------------

def test_perf_missing_names_the_install_line():
    with pytest.raises(AlloclabError, match=r"apt-get install -y linux-perf"):
        perf_access(which=lambda name: None)


def test_perf_event_paranoid_is_explained_never_changed():
    perf = lambda name: "/usr/bin/perf"  # noqa: E731
    with pytest.raises(AlloclabError) as exc:
        perf_access(paranoid=3, is_privileged=False, which=perf)
    assert "kernel.perf_event_paranoid is 3" in str(exc.value)
    assert "sysctl -w kernel.perf_event_paranoid=1" in str(exc.value) and "will not change" in str(exc.value)
    user_only = perf_access(paranoid=2, is_privileged=False, which=perf)
    assert not user_only.kernel_visible and "will not change" in user_only.note
    assert sampling_event(user_only).endswith(":u")
    assert perf_access(paranoid=3, is_privileged=True, which=perf).kernel_visible
    assert perf_access(paranoid=1, is_privileged=False, which=perf).kernel_visible


def _summary(label, shares, walls=(1.1, 1.2), plain=(1.0, 1.0), **kw):
    runs = [RunProfile("ok", w, 500, {"allocator": a, "kernel_mm": 0.02, "kernel_other": 0.0,
                                      "user_other": 0.98 - a}, {"page faults": 0.02}, None,
                       {"malloc [libc.so.6]": a}, {}, None, m)
            for w, a, m in zip(walls, shares, (100.0, 90.0))]
    return ProfileSummary("w", label, 0, None, "cpu-clock", 999, False, True, runs,
                          [{"wall_s": p, "ops": 100.0, "cpu_s": 0.5} for p in plain], metric="ops", **kw)


def test_summary_spread_overheads_and_headline():
    s = _summary("glibc", [0.081, 0.087], perf_fixed_s=0.05)
    assert s.allocator == pytest.approx((0.084, 0.081, 0.087))
    assert s.wall_overhead() == pytest.approx(0.15)
    assert s.sampling_overhead() == pytest.approx(0.10)
    assert s.throughput_overhead() == pytest.approx(100 / 95 - 1)     # ops while sampled: median 95
    assert s.overhead() == s.throughput_overhead()
    assert s.allocator_seconds() == pytest.approx(0.084 * 0.5)      # share x unprofiled CPU time
    t = _summary("tcmalloc", [0.011, 0.013])
    assert headline([s, t]) == "glibc 8.4% (8.1-8.7) -> tcmalloc 1.2% (1.1-1.3)"


def test_samples_standing_for_too_little_cpu_time_get_a_note():
    s = _summary("glibc", [0.08, 0.09])
    assert s.coverage() is None and not _finish(s).notes      # no sampled time known: no claim
    for r, sampled in zip(s.runs, (0.45, 0.47)):
        r.sampled_s = sampled
    assert s.coverage() == pytest.approx(0.46 / 0.5)
    assert not _finish(s).notes
    for r in s.runs:
        r.sampled_s = 0.1
    (note,) = _finish(s).notes
    assert "20% of the CPU time" in note and "1.0 ms" in note and "Raise --frequency" in note


def test_profiles_are_stored_with_the_experiment(tmp_path):
    store = Store(tmp_path / "p.db")
    summaries = [_summary("glibc", [0.08, 0.09]), _summary("jemalloc", [0.02, 0.03])]
    summaries[1].variant_idx = 1
    store_profiles(store, 7, summaries)
    store_profiles(store, 7, summaries)          # idempotent per (experiment, workload, variant)
    back = load_profiles(Store(tmp_path / "p.db"), 7)
    assert [b.to_dict() for b in back] == [s.to_dict() for s in summaries]
    assert load_profiles(store, 8) == []


def test_counters_give_ipc_from_the_timed_runs():
    class Exp:
        def cell_runs(self, wi, vi):
            return [Run(0, 0, status="ok", metrics={"cycles": 2e9, "instructions": 3e9, "cache_misses": 1e6}),
                    Run(0, 0, status="ok", metrics={"cycles": 2e9, "instructions": 5e9, "cache_misses": 3e6}),
                    Run(0, 0, status="failed", metrics={"cycles": 1.0, "instructions": 1e12})]
    c = counters_of(Exp(), 0, 0)
    assert c == {"cycles": 2e9, "instructions": 4e9, "cache_misses": 2e6, "ipc": 2.0}

    class Bare:
        def cell_runs(self, wi, vi):
            return [Run(0, 0, status="ok", metrics={"wall_s": 1.0})]
    assert counters_of(Bare(), 0, 0) is None


def test_callgrind_format_self_costs(tmp_path):
    out = tmp_path / "callgrind.out.1"
    out.write_text("""# callgrind format
version: 1
positions: line
events: Ir
summary: 1000

ob=(1) /usr/lib/x86_64-linux-gnu/libc.so.6
fl=(1) malloc.c
fn=(1) _int_malloc
10 300
+2 100
cob=(2) /tmp/prog
cfn=(2) helper
calls=3 5
12 999

fn=(3) memcpy
5 50
ob=(2)
fn=(2)
1 500
* 50
totals: 1000
""")
    total, costs = self_costs(out)
    assert total == 1000 and sum(costs.values()) == total      # the call's inclusive 999 is not self cost
    assert costs == {("/usr/lib/x86_64-linux-gnu/libc.so.6", "_int_malloc"): 400,
                     ("/usr/lib/x86_64-linux-gnu/libc.so.6", "memcpy"): 50, ("/tmp/prog", "helper"): 550}
    c = count(tmp_path, Attribution(None))
    assert (c.total, c.allocator, c.top) == (1000, 400, [("_int_malloc [libc.so.6]", 400)])


def test_rendering_shows_counters_instructions_and_the_overhead_verdict():
    from rich.console import Console
    s = _summary("glibc", [0.081, 0.087], perf_fixed_s=0.05)
    s.counters = {"cycles": 2e9, "instructions": 3e9, "cache_misses": 1e6, "ipc": 1.5}
    s.instructions = {"total": 4e8, "allocator": 1e8, "top": [["_int_malloc [libc.so.6]", 6e7]]}
    s.notes.append("libfoo.so has no symbols for 50% of its samples")
    console = Console(record=True, width=250)
    render_profiles(console, [s])
    text = console.export_text()
    assert "Allocator share of CPU: glibc 8.4% (8.1-8.7)" in text
    assert "IPC" in text and "1.50" in text and "2.00G" in text and "100.00M (25.0%)" in text
    assert "glibc 8.4% (8.1-8.7)" in text and "malloc 8.4%" in text
    assert "allocator CPU s/run" in text and "0.042" in text
    assert "ops +5.3% slower" in text and "beyond 2%: time unprofiled runs" in text
    assert "Hardware counters" not in text and "note: libfoo.so has no symbols" in text
    s.runs[0].allocator_symbols = {"[unknown] [libjemalloc.so.2]": 0.2}   # not the variant's own library
    console = Console(record=True, width=400)
    render_profiles(console, [s])
    assert "[unknown] [libjemalloc.so.2] 10.0%" in console.export_text()   # brackets are not markup


def test_sparkline_keeps_the_time_axis():
    line = sparkline([(0.0, 10), (0.5, 100), (1.0, 100)], t_end=2.0, top=100, width=8)
    assert len(line) == 8 and line[0] != " " and line[2] == "█" and line[-1] == " "


# --- real perf output ----------------------------------------------------------------------------------

def test_parsed_shares_match_perf_report_on_a_real_recording(build, tmp_path):
    access = needs_perf()
    prog = build("churn")
    data = tmp_path / "perf.data"
    argv, env = wrap_perf_record([str(prog), "3000", "16"], dict(os.environ), {}, data,
                                 event=sampling_event(access), frequency=4999, call_graph=False, perf=access.perf)
    subprocess.run(argv, env=env, check=True, capture_output=True)
    samples = list(parse_perf_script(perf_script(access.perf, data)))
    r = attribute(samples, Attribution(None), call_graph=False)
    # perf report aggregates the same file its own way: sample count and malloc-family share agree.
    rep = subprocess.run([access.perf, "report", "--stdio", "--no-children", "--sort", "dso,sym", "-i", str(data)],
                         capture_output=True, text=True, check=True).stdout
    assert int(re.search(r"# Samples: (\d+)", rep).group(1)) == len(samples) == r.samples
    rows = re.findall(r"^\s+([\d.]+)%\s+(\S+)\s+\[[.k]\]\s+(.+?)\s*$", rep, re.MULTILINE)
    glibc_malloc = sum(float(p) for p, dso, sym in rows
                       if (dso == "libc.so.6" or sym.endswith("@plt")) and Attribution(None).is_allocator(_u(sym)))
    assert r.shares["allocator"] * 100 == pytest.approx(glibc_malloc, abs=0.5)
    assert r.shares["allocator"] > 0.3          # churn does little but malloc and free
    assert {"_int_malloc [libc.so.6]", "_int_free [libc.so.6]"} <= set(r.allocator_symbols)


def test_glibc_spends_a_larger_share_in_the_allocator_than_tcmalloc(build):
    needs_perf()
    require_allocator("tcmalloc-minimal")
    prog = build("wordfreq")
    w = Workload(name="wordfreq", argv=[str(prog), "250"], metrics=[DOCS])
    glibc, tc = profile_workload(w, parse_variants(["glibc", "tcmalloc-minimal"]), runs=2, frequency=4999)
    for s in (glibc, tc):
        assert len(s.ok_runs) == 2 and all(r.samples > 300 for r in s.ok_runs), s.notes
        assert len(s.plain) == 2 and s.throughput_overhead() is not None and s.perf_fixed_s > 0
        assert s.kernel_mm is not None and s.rest()[0] > 0.5
    # The sampled shares measured on this machine: ~16% under glibc, ~9% under tcmalloc (docs/profile.md).
    assert glibc.allocator[0] > 1.3 * tc.allocator[0], (glibc.allocator, tc.allocator)
    assert all(name.endswith("[libc.so.6]") or "@plt [wordfreq" in name for name, _ in glibc.top_symbols())
    # Under tcmalloc the allocator time is tcmalloc's; a stray libc malloc-family sample (libc's
    # own startup allocations before the preload is bound) may trail far behind.
    top = tc.top_symbols()
    assert "libtcmalloc_minimal" in top[0][0], top
    ours = sum(share for name, share in top if "libtcmalloc_minimal" in name or "@plt [wordfreq" in name)
    assert ours > 0.8 * sum(s for _, s in top), top


def test_short_lived_threads_are_undersampled_and_the_profile_says_so():
    needs_perf()
    # larson retiring its threads every 2,000 replacements: each lives ~0.1 ms, a tenth of the
    # 1 ms sampling period; perf's per-thread timer restarts with every thread and misses most.
    short = builtin.workload("larson", {"ops-per-round": "2000", "rounds": "2000"})
    # Threads of ~50 ms each, fifty sampling periods (the default's few ms read 0.59 once in CI,
    # beside another test: a thread of a few periods loses one at its start and end).
    long = builtin.workload("larson", {"ops-per-round": "2000000", "rounds": "2"})
    s_short, = profile_workload(short, parse_variants(["glibc"]), runs=1, frequency=999)
    s_long, = profile_workload(long, parse_variants(["glibc"]), runs=1, frequency=999)
    assert s_short.coverage() < 0.6 and any("perf missed part of it" in n for n in s_short.notes), s_short.notes
    assert s_long.coverage() > 0.6, (s_long.coverage(), s_long.notes)
    assert not any("perf missed" in n for n in s_long.notes)


def test_call_graphs_find_brk_and_faults_entered_from_glibc_malloc(build):
    needs_perf()
    prog = build("churn")
    # 384 MiB kept alive: glibc grows the heap with brk and writes each chunk header into a fresh page.
    # (At 128 MiB brk drew 3-10 of ~430 samples beside two CPU hogs, and none once in a clean
    # clone's suite; at 384 MiB, 8-20 of ~1,100.)
    w = Workload(name="churn", argv=[str(prog), "500", "384"])
    (s,) = profile_workload(w, parse_variants(["glibc"]), runs=1, frequency=4999, call_graph=True)
    kinds = s.kernel_kinds()
    assert s.kernel_mm[0] > 0.2 and kinds["page faults"] > 0.2 and kinds.get("brk", 0) > 0, kinds
    assert s.kernel_from_allocator() > 0.5 * s.kernel_mm[0]


@pytest.mark.serial
def test_call_graphs_charge_glibcs_contended_arena_locks_to_the_allocator():
    needs_perf()
    # xthread frees on other threads than it allocates: under glibc the frees contend for the
    # owning arena's mutex, and the futex sleeps it costs are entered from _int_free.
    w = builtin.workload("xthread")
    (s,) = profile_workload(w, parse_variants(["glibc"]), runs=1, frequency=4999, call_graph=True)
    locks = s.kernel_other_from_allocator()
    assert locks and locks > 0.01, (locks, s.notes)
    total, share = s.allocator_with_kernel()[0], s.allocator[0]
    assert total >= share + locks - 1e-9 and total < 1


def test_a_stripped_program_is_attributed_by_shared_object_and_says_so(build, tmp_path):
    needs_perf()
    stripped = tmp_path / "wordfreq-stripped"
    # Without a build id perf cannot find the symbols in its cache from an unstripped copy.
    shutil.copy(build("wordfreq", "-Wl,--build-id=none"), stripped)
    subprocess.run(["strip", str(stripped)], check=True)
    w = Workload(name="stripped", argv=[str(stripped), "150"])
    (s,) = profile_workload(w, parse_variants(["glibc"]), runs=1, frequency=4999, baseline={})
    assert s.allocator[0] > 0.05            # libc keeps its symbols, so malloc is still seen
    assert any("wordfreq-stripped has no symbols" in n and "by shared object" in n for n in s.notes), s.notes


def test_a_timed_out_profiled_run_is_recorded_and_its_tree_killed(build):
    needs_perf()
    prog = build("churn")
    w = Workload(name="sleepy", argv=[str(prog), "10", "1", "", "30"])
    (s,) = profile_workload(w, parse_variants(["glibc"]), runs=1, timeout_s=0.5, baseline={})
    assert [r.status for r in s.runs] == ["timeout"] and s.allocator is None
    assert any("gave no profile" in n for n in s.notes)
    assert not [p for p in psutil.process_iter(["cmdline"]) if str(prog) in " ".join(p.info["cmdline"] or [])]


# --- the command ---------------------------------------------------------------------------------------

def test_profile_command_stores_profiles_and_counts_instructions(build, cli, store_of):
    needs_perf()
    require_allocator("tcmalloc-minimal")
    if not shutil.which("valgrind"):
        missing_prerequisite("valgrind is not installed (apt-get install -y valgrind)")
    prog = build("churn")
    # 3000 rounds (~60 ms): long enough for the 20 ms RSS sampler to draw the RSS-over-time chart.
    p = cli("profile", "-a", "glibc", "-a", "tcmalloc-minimal", "--profile-runs", "2", "--runs", "2",
            "--instructions", "-F", "1999", "--metric", "ops=ops/s: (\\d+)", "--", str(prog), "3000", "8")
    assert p.returncode == 0, p.stderr
    out = " ".join(p.stdout.split())
    assert re.search(r"Allocator share of CPU: glibc [\d.]+% \([\d.]+-[\d.]+\) -> tcmalloc-minimal [\d.]+%", out)
    assert "Sampling overhead" in out and "RSS over time" in out and "callgrind" in out
    assert ("Hardware counters: not measured" in out) != machine.perf_counters()[0]
    e = store_of(cli.db).load()
    assert e.row.kind == "profile" and e.row.status == "complete"
    profiles = load_profiles(store_of(cli.db), e.id)
    assert [s.variant for s in profiles] == ["glibc", "tcmalloc-minimal"]
    for s in profiles:
        assert len(s.ok_runs) == 2 and len(s.plain) == 2     # the timed runs are the baseline
        assert 0 < s.allocator_seconds() < max(p["cpu_s"] for p in s.plain)
        ins = s.instructions
        assert 0 < ins["allocator"] < ins["total"]
    glibc, tc = profiles
    assert glibc.instructions["top"][0][0].endswith("[libc.so.6]")
    assert all("libtcmalloc_minimal" in name for name, _ in tc.instructions["top"])
    # churn is malloc and free: glibc executes more instructions for the same work.
    assert glibc.instructions["allocator"] > tc.instructions["allocator"]


def test_profile_without_perf_says_how_to_install_it(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    p = run_cli(["profile", "--db", str(tmp_path / "x.db"), "--", "/bin/true"],
                env={**os.environ, "PATH": str(empty)}, timeout=60)
    assert p.returncode == 2
    assert "perf is not installed" in p.stderr and "apt-get install -y linux-perf" in p.stderr
    assert not (tmp_path / "x.db").exists()


def test_profile_as_an_unprivileged_user_follows_perf_event_paranoid(build):
    needs_perf()
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root (to drop to nobody) and setpriv")
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    probe = subprocess.run([*nobody, *ALLOCLAB, "--help"], capture_output=True, text=True, cwd="/", timeout=60)
    if probe.returncode != 0:
        # e.g. a checkout under /root (mode 700 on Debian): nobody cannot read alloclab itself
        pytest.skip(f"user nobody cannot run alloclab from this checkout ({ALLOCLAB[0]}): "
                    f"{probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else probe.returncode}")
    paranoid = int(Path("/proc/sys/kernel/perf_event_paranoid").read_text())
    work = Path(tempfile.mkdtemp(prefix="alloclab-nobody-"))
    try:
        work.chmod(0o777)
        prog = work / "churn"
        shutil.copy(build("churn"), prog)
        prog.chmod(0o755)
        p = subprocess.run([*nobody, *ALLOCLAB, "profile",
                            "--db", str(work / "n.db"), "-a", "glibc", "--profile-runs", "1", "--timed-runs", "1",
                            "--no-verify", "--", str(prog), "2000", "8"],
                           capture_output=True, text=True, cwd=work, timeout=120,
                           env={**os.environ, "ALLOCLAB_CACHE": str(work / "cache"), "HOME": str(work)})
        text = " ".join((p.stdout + p.stderr).split())
        if paranoid >= 3:
            assert p.returncode == 2 and f"kernel.perf_event_paranoid is {paranoid}" in text
        elif paranoid == 2:
            assert p.returncode == 0, p.stderr
            assert "kernel.perf_event_paranoid is 2" in text and "will not change it" in text
            assert "not sampled" in text and "Allocator share of CPU: glibc" in text
            (s,) = load_profiles(Store(work / "n.db"), 1)
            assert not s.kernel_visible and s.event.endswith(":u") and s.allocator[0] > 0.3
        else:
            assert p.returncode == 0 and "paranoid" not in text, text
    finally:
        shutil.rmtree(work, ignore_errors=True)
