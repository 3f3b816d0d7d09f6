"""The allocation fingerprint (measure/fingerprint.py, launcher/fingerprint.c) on real programs whose
behaviour is known by construction: the built-in xthread (every request freed by another thread),
oversized (27 KB chunks, or chunks above glibc's 128 KiB mmap threshold), a program that forks
children that allocate (one ending in exit, one in _exit), and the same counts under tcmalloc."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from alloclab.measure import fingerprint as fp
from alloclab.measure.executors import CommandExecutor
from alloclab.workloads import builtin

from conftest import missing_prerequisite, need_program, require_allocator, running, still_left


def _run(tmp_path, argv, variant_env=None):
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD",)}
    out = fp.run_cell(CommandExecutor([str(a) for a in argv]), env, variant_env or {}, tmp_path,
                      timeout_s=60, mapped_marker=None)
    assert "error" not in out, out
    return out


def _hist(out) -> dict[int, int]:
    return {c: n for c, _, n, _ in out["hist"]}


def test_xthread_frees_on_another_thread(tmp_path):
    out = _run(tmp_path, [builtin.binary(builtin.get("xthread")), "--ops", "200000"])
    # A request and its buffer per op, all freed by the completion threads.
    assert 400_000 <= out["calls"]["malloc"] <= 400_100
    assert out["frees"] >= 400_000
    assert out["threads"] >= 3                      # main + 2 submitters at least
    assert out["sampled"]["frees"] > 2_000          # about 1 in 64 of 400,000
    assert out["cross_thread_share"] > 0.97
    assert out["big_calls"] == 0
    assert out["lifetime"]["live_at_exit"] < 0.05
    assert out["calls_per_s"] > 0 and out["memory"]["peak_live_kb"] > 0


def _oversized(tmp_path, variant_env=None):
    return _run(tmp_path, [builtin.binary(builtin.get("oversized")), "--queries", "4"], variant_env)


PADDED = {"MALLOC_TOP_PAD_": str(64 << 20)}


@pytest.fixture(scope="module")
def syscall_counter() -> tuple[str | None, str]:
    """('perf' | 'strace' | None, why): what counts the memory system calls here (one probe)."""
    return fp.syscall_counter()


def test_oversized_size_classes_and_threshold(tmp_path):
    out = _oversized(tmp_path / "a")
    # (4 queries + 1 warm-up) x 1000 chunks of 27,000 B: class 15 holds 16-32 KiB.
    assert _hist(out).get(15) == 5000
    assert out["big_calls"] == 0 and out["big_call_share"] == 0
    big = _run(tmp_path / "b", [builtin.binary(builtin.get("oversized")), "--queries", "3", "--chunks", "50",
                                "--chunk-size", "200000"])
    assert big["big_calls"] == 200 and big["big_call_share"] > 0.9 and big["big_byte_share"] > 0.99


def test_oversized_brk_churn_against_top_pad(tmp_path, syscall_counter):
    tool, why = syscall_counter
    if tool is None:
        # `make test` installs strace (and perf), either of which counts the calls.
        missing_prerequisite(why)
    out, padded = _oversized(tmp_path / "a"), _oversized(tmp_path / "b", PADDED)
    # glibc trims the heap top after every query and grows it back: brk churn; 64 MB of top
    # pad keeps it. Deterministic counts, not timings.
    assert "syscalls" in out and "syscalls" in padded, (tool, out.keys())
    assert out["syscalls"]["brk"] > 4 * 10 and padded["syscalls"]["brk"] < 20, (out["syscalls"], padded["syscalls"])


def test_oversized_brk_bytes_under_perf(tmp_path, syscall_counter):
    tool, why = syscall_counter
    if tool != "perf":
        # Not a missing package: perf's syscall tracepoints need root or a low perf_event_paranoid,
        # and tracefs, which a VM or container may not give; strace counts calls, not bytes.
        pytest.skip(f"the bytes come from perf's syscall tracepoints: {why}")
    out, padded = _oversized(tmp_path / "a"), _oversized(tmp_path / "b", PADDED)
    # The bytes behind the calls: each query's 27 MB grown and given back, against none.
    glibc, pad = out["syscall_bytes"], padded["syscall_bytes"]
    assert glibc is not None and pad is not None, (out.keys(), padded.keys())
    assert glibc["brk_shrunk"] >= 3 * 20 << 20 and glibc["brk_grown"] >= 3 * 20 << 20, glibc
    assert pad["brk_shrunk"] < glibc["brk_shrunk"] / 10, (pad, glibc)


def test_the_interposers_own_thread_unmaps_nothing_of_the_programs(tmp_path, build, syscall_counter):
    tool, why = syscall_counter
    if tool != "perf":
        pytest.skip(f"the bytes come from perf's syscall tracepoints: {why}")
    # compute allocates nothing big. The sampler thread's first malloc used to make glibc reserve an
    # arena for it (128 MiB mapped, 64 MiB unmapped to align it), read as the program's munmaps.
    out = _run(tmp_path, [build("compute"), "3000000"])
    assert out["syscall_bytes"]["munmap"] < 1 << 20, out["syscall_bytes"]
    assert out["syscall_bytes"]["mmap_anon"] < 64 << 20, out["syscall_bytes"]


def test_runs_sharing_one_recorder_count_each_runs_own_calls(tmp_path, build, syscall_counter):
    tool, why = syscall_counter
    if tool != "perf":
        pytest.skip(f"the shared recorder is perf's: {why}")
    # tune's diagnosis runs a command's fingerprint runs one after another under one perf record
    # (fp.run_all): each run's calls must be its own tree's, children included, as with a recorder
    # of its own (which also counts the `env` that hands it the settings: a few calls more).
    oversized = [builtin.binary(builtin.get("oversized")), "--queries", "4"]
    cells = {"glibc": (oversized, {}), "pad": (oversized, PADDED), "fork": ([build("forkalloc"), "3"], {})}
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    recorder = fp.SharedRecorder.start(tmp_path / "shared.data", tmp_path / "probe")
    assert recorder is not None
    ran = {}
    try:
        for key, (argv, variant_env) in cells.items():
            ran[key] = fp._run(CommandExecutor([str(a) for a in argv]), env, variant_env, tmp_path / key,
                               timeout_s=60, mapped_marker=None, recorder=recorder)
            assert not isinstance(ran[key], dict), ran[key]
            recorder.ran(ran[key].result.pid, key)
    finally:
        recorder.stop()
    counts = recorder.parsed()
    shared = {key: fp._summary(r, counts.get(key)) for key, r in ran.items()}
    own = {key: _run(tmp_path / f"own-{key}", argv, variant_env) for key, (argv, variant_env) in cells.items()}
    for key in cells:
        s, o = shared[key]["syscalls"], own[key]["syscalls"]
        assert o["brk"] - 6 <= s["brk"] <= o["brk"] and s["munmap"] <= o["munmap"], (key, s, o)
    assert shared["glibc"]["syscalls"]["brk"] > 40 and shared["pad"]["syscalls"]["brk"] < 20
    glibc, pad = shared["glibc"]["syscall_bytes"], shared["pad"]["syscall_bytes"]
    assert abs(glibc["brk_shrunk"] - own["glibc"]["syscall_bytes"]["brk_shrunk"]) < 1 << 20, (glibc, own["glibc"])
    assert pad["brk_shrunk"] < glibc["brk_shrunk"] / 10
    # The children's calls are in their run: each grows its heap by 2000 x 1000 B, and maps and
    # unmaps its first 300,000 B block (glibc's dynamic threshold keeps the other 99 on the heap).
    fork = shared["fork"]["syscall_bytes"]
    assert fork["brk_grown"] >= 3 * 2_000_000 and fork["munmap"] >= 3 * 300_000, fork


def test_forked_children(tmp_path, build):
    out = _run(tmp_path, [build("forkalloc"), "3"])
    assert out["status"] == "ok" and out["processes"] == 4
    parent = [p for p in out["process_list"] if p["allocs"] < 2000]
    children = [p for p in out["process_list"] if p["allocs"] >= 2000]
    assert len(parent) == 1 and len(children) == 3
    assert all(c["ppid"] == parent[0]["pid"] for c in children)
    # Each child: 2000 x 1000 B + 100 x 300,000 B + 10 x 5000 B, its counters fresh after the fork.
    assert all(c["allocs"] == 2110 for c in children)
    assert out["big_calls"] == 300
    assert _hist(out).get(19) == 300 and _hist(out).get(10) == 6000
    # The child that ends in _exit wrote no final file: its periodic write has the counts.
    assert sorted(c["final"] for c in children) == [False, True, True]


def test_same_demand_under_tcmalloc(tmp_path):
    require_allocator("tcmalloc")
    lib = str(builtin_lib("tcmalloc"))
    out = _run(tmp_path, [builtin.binary(builtin.get("xthread")), "--ops", "100000"], {"LD_PRELOAD": lib})
    assert 200_000 <= out["calls"]["malloc"] <= 200_100
    assert out["cross_thread_share"] > 0.97


def builtin_lib(name: str):
    from alloclab.catalog import allocators as cat
    a = cat.load_catalog().allocators[name]
    return cat.find_library(a.libraries[0])


def test_counts_agree_with_heaptrack(tmp_path, build):
    need_program("heaptrack")
    need_program("heaptrack_print", "heaptrack")
    churn = build("churn")
    out = _run(tmp_path / "fp", [churn, "100", "8"])
    (tmp_path / "ht").mkdir()
    subprocess.run(["heaptrack", "-o", str(tmp_path / "ht" / "ht"), str(churn), "100", "8"], check=True,
                   capture_output=True, timeout=60)
    text = subprocess.run(["heaptrack_print", *map(str, (tmp_path / "ht").glob("ht*"))], capture_output=True,
                          text=True, timeout=60).stdout
    calls = int(text.split("calls to allocation functions:")[1].split()[0])
    assert abs(calls - out["allocs"]) <= 3, (calls, out["calls"])


def test_cli_fingerprint_in_reports(cli, build):
    prog = build("forkalloc")
    cli("compare", "--runs", "1", "--warmup", "0", "--fingerprint", "-a", "glibc", "--", str(prog), "2", check=True)
    md = cli("report", "-f", "md", "--details", check=True).stdout   # the full tables: the short answer has none
    assert "Allocation fingerprint:" in md and "cross-thread frees" in md
    data = json.loads(cli("report", "-f", "json", check=True).stdout)
    fps = data["fingerprints"]
    assert len(fps) == 1 and fps[0]["processes"] == 3 and fps[0]["big_calls"] == 200
    # The HTML report: the same table, the size histogram and live bytes against RSS over time.
    html = cli("report", "-f", "html", "-o", str(cli.db.parent / "r.html"), check=True)
    page = (cli.db.parent / "r.html").read_text()
    assert "Allocation fingerprint" in page and "cross-thread frees" in page, html.stdout
    assert "What the program asks for: calls per size class" in page
    assert "Live bytes against RSS in the fingerprint run" in page and "glibc: live" in page


def test_run_all_goes_on_with_recorders_of_their_own_when_the_shared_one_dies(tmp_path, syscall_counter):
    """fp.run_all on real runs, the experiment around them reduced to what it reads: perf is
    killed before the second of three runs, which then run with recorders of their own and are
    counted; the first run's fingerprint is kept, without counts (its recording was cut short)."""
    import psutil
    from types import SimpleNamespace

    from alloclab.catalog.variants import parse_variants
    from alloclab.measure.hooks import HookRunner, Hooks

    tool, why = syscall_counter
    if tool != "perf":
        pytest.skip(f"the shared recorder is perf's: {why}")
    variants = parse_variants(["glibc", "glibc:MALLOC_TOP_PAD_=64M", "glibc:MALLOC_TOP_PAD_=32M"])
    base = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    stored, notes, killed = {}, [], []

    def note(text):
        notes.append(text)
        if len(notes) == 2:   # before the second run: the shared recorder's perf goes away
            for p in psutil.Process().children(recursive=True):
                if p.name() == "perf" and any("fingerprint-syscalls.data" in a for a in p.cmdline()):
                    killed.extend([p.pid, *(c.pid for c in p.children())])   # perf and its launcher
                    p.kill()
                    p.wait(10)

    exp = SimpleNamespace(
        workloads=[SimpleNamespace(executor=CommandExecutor([str(builtin.binary(builtin.get("oversized"))),
                                                             "--queries", "4"]), name="oversized")],
        cells=[SimpleNamespace(workload_idx=0, variant_idx=i) for i in range(3)],
        _variant=lambda wi, vi: variants[vi], _cell_env=lambda wi, vi: (variants[vi].apply(base), 0),
        settings=SimpleNamespace(timeout_s=60), progress=SimpleNamespace(note=note), exp_id=1,
        hooks=HookRunner(Hooks(), base),   # a Runner's, with no --prepare
        store=SimpleNamespace(set_fingerprint=lambda exp_id, wi, vi, data: stored.__setitem__(vi, data)))
    fp.run_all(exp, tmp_path)
    assert sorted(stored) == [0, 1, 2] and len(notes) == 3
    assert all("error" not in stored[vi] for vi in range(3)), stored
    assert stored[0]["syscalls"] is None and "wrote no counts" in stored[0]["syscalls_how"], stored[0]
    assert stored[1]["syscalls"]["brk"] < 20 and stored[2]["syscalls"]["brk"] < 20, (stored[1], stored[2])
    # perf, and the launcher it left behind (no longer our child), stopped with the recorder.
    assert len(killed) == 2 and not still_left(lambda: running(killed)), killed
    assert not [p for p in psutil.Process().children(recursive=True) if p.name() == "perf"]
