"""The built-in C workload programs, compiled and run for real.

Each program is built exactly as the tool builds it (``cc -O2 -pthread -o X
file.c -ldl``) and run at its ``quick_args`` size under glibc and under every
installed allocator (LD_PRELOAD).  Checked: exit status, exactly one JSON line
on stdout, the metrics declared in builtin.toml present and sane; bad flags
exit 2 with a one-line message; and two real allocator effects the workloads
exist to show (glibc's per-query heap trim in ``oversized``; the release call
``reclaim`` finds for each allocator).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import missing_prerequisite

WORKLOADS_DIR = Path(__file__).resolve().parents[1] / "src" / "alloclab" / "workloads"
SRC_DIR = WORKLOADS_DIR / "c"
REGISTRY = tomllib.loads((WORKLOADS_DIR / "builtin.toml").read_text())["workloads"]
NAMES = sorted(REGISTRY)

LIBDIR = Path("/lib/x86_64-linux-gnu")
# allocator -> (preload path or None for glibc, release call reclaim must report)
ALLOCATORS = {
    "glibc": (None, "malloc_trim"),
    "tcmalloc": (LIBDIR / "libtcmalloc.so.4", "MallocExtension_ReleaseFreeMemory"),
    "tcmalloc_minimal": (LIBDIR / "libtcmalloc_minimal.so.4", "MallocExtension_ReleaseFreeMemory"),
    "jemalloc": (LIBDIR / "libjemalloc.so.2", "mallctl"),
    "mimalloc": (LIBDIR / "libmimalloc.so.2", "mi_collect"),
}

@pytest.fixture(autouse=True)
def c_compiler():
    if shutil.which("cc") is None:
        missing_prerequisite("no C compiler (cc) on PATH (apt-get install -y gcc libc6-dev)")


def clean_env(preload: Path | None = None, **extra: str) -> dict[str, str]:
    """The inherited environment minus anything that changes the allocator."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("LD_PRELOAD", "GLIBC_TUNABLES", "MALLOC_CONF", "MIMALLOC_OPTIONS")
        and not k.startswith(("MALLOC_", "TCMALLOC_", "MIMALLOC_", "JE_"))
    }
    if preload is not None:
        env["LD_PRELOAD"] = str(preload)
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def programs(tmp_path_factory) -> dict[str, Path]:
    """Compile every workload once (in parallel), exactly as the tool does."""
    out = tmp_path_factory.mktemp("workloads")

    def build(name: str) -> tuple[str, Path]:
        src = SRC_DIR / REGISTRY[name]["source"]
        exe = out / name
        proc = subprocess.run(
            ["cc", "-O2", "-pthread", "-o", str(exe), str(src), "-ldl"],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, f"compiling {src.name} failed:\n{proc.stderr}"
        return name, exe

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return dict(pool.map(build, NAMES))


def run(exe: Path, args: list[str], env: dict[str, str] | None = None, timeout: float = 60):
    return subprocess.run(
        [str(exe), *args], capture_output=True, text=True, env=env or clean_env(), timeout=timeout
    )


def one_json_line(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, f"exit {proc.returncode}; stderr:\n{proc.stderr}"
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, f"expected exactly one line on stdout, got {len(lines)}:\n{proc.stdout}"
    result = json.loads(lines[0])
    assert isinstance(result, dict)
    return result


def allocator_or_skip(name: str) -> Path | None:
    preload, _ = ALLOCATORS[name]
    if preload is not None and not preload.exists():
        missing_prerequisite(f"{name} not installed ({preload} missing)")
    return preload


# --------------------------------------------------------------------------
# Registry


@pytest.mark.parametrize("name", NAMES)
def test_registry_entry_is_complete(name):
    w = REGISTRY[name]
    assert (SRC_DIR / w["source"]).is_file()
    for key in ("description", "stands_for"):
        assert isinstance(w[key], str) and w[key].strip()
    for key in ("default_args", "quick_args"):
        assert isinstance(w[key], list) and all(a.startswith("--") for a in w[key])
    assert isinstance(w["params"], dict) and w["params"]
    metrics = w["metrics"]
    assert sum(1 for m in metrics.values() if m.get("primary")) == 1, "exactly one primary metric"
    for key, m in metrics.items():
        assert isinstance(m["higher"], bool), key
        assert isinstance(m["unit"], str) and m["unit"], key


def test_thread_sweep_param_is_named_threads():
    for name in ("xthread", "larson", "threadcache", "reclaim"):
        assert "threads" in REGISTRY[name]["params"], name


# --------------------------------------------------------------------------
# Every workload under every allocator


def check_metrics(name: str, result: dict) -> None:
    assert result["workload"] == name
    assert result["extra_work"] == 0 and result["seed"] == 42
    assert result["seconds"] > 0
    for key, m in REGISTRY[name]["metrics"].items():
        assert key in result, f"declared metric {key!r} missing from output"
        v = result[key]
        assert isinstance(v, (int, float)) and not isinstance(v, bool), (key, v)
        assert math.isfinite(v), (key, v)
        if m.get("primary") or m["unit"].endswith("/s") or m["unit"] in ("ns", "KB"):
            assert v > 0, (key, v)
        if m["unit"] == "fraction" and key.startswith("returned"):
            assert 0.0 <= v <= 1.0, (key, v)
        if m["unit"] in ("ms", "ratio") and key != "creep":
            assert v >= 0, (key, v)


@pytest.mark.e2e
@pytest.mark.parametrize("allocator", list(ALLOCATORS))
@pytest.mark.parametrize("name", NAMES)
def test_workload_runs_under_allocator(programs, name, allocator):
    preload = allocator_or_skip(allocator)
    proc = run(programs[name], REGISTRY[name]["quick_args"], env=clean_env(preload))
    result = one_json_line(proc)
    check_metrics(name, result)


# --------------------------------------------------------------------------
# Flags


@pytest.mark.parametrize("name", NAMES)
def test_unknown_flag_exits_2(programs, name):
    proc = run(programs[name], ["--bogus=1"])
    assert proc.returncode == 2
    assert proc.stdout == ""
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1 and "--bogus" in err and "unknown flag" in err


@pytest.mark.parametrize("name", ["xthread", "larson", "threadcache", "reclaim"])
@pytest.mark.parametrize("value", ["-1", "0"])
def test_bad_thread_count_exits_2(programs, name, value):
    proc = run(programs[name], [f"--threads={value}"])
    assert proc.returncode == 2
    assert proc.stdout == ""
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1 and "--threads" in err and value in err


@pytest.mark.parametrize(
    "name,args,flag",
    [
        ("simple", ["--size=0"], "--size"),
        ("oversized", ["--chunk-size=0"], "--chunk-size"),
        ("oversized", ["--queries=0"], "--queries"),
        ("reclaim", ["--total=0"], "--total"),
        ("reclaim", ["--total=12X"], "--total"),
        ("xthread", ["--min-size=100", "--max-size=10"], "--min-size"),
        ("larson", ["--slots=abc"], "--slots"),
        ("fragment", ["--ops"], "--ops"),
        ("simple", ["stray"], "stray"),
        ("threadcache", ["--extra-work=-5"], "--extra-work"),
    ],
)
def test_bad_values_exit_2(programs, name, args, flag):
    proc = run(programs[name], args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1 and flag in err and "error" in err


@pytest.mark.parametrize("name", NAMES)
def test_help_lists_common_flags(programs, name):
    proc = run(programs[name], ["--help"])
    assert proc.returncode == 0
    for flag in ("--seed", "--extra-work", *(f"--{p}" for p in REGISTRY[name]["params"])):
        assert flag in proc.stdout, flag


def test_flag_value_as_separate_argument(programs):
    result = one_json_line(run(programs["simple"], ["--iters", "1000", "--size", "1K"]))
    assert result["iters"] == 1000 and result["size"] == 1024


def test_xthread_threads_means_submitters_and_completers(programs):
    result = one_json_line(run(programs["xthread"], ["--threads=3", "--ops=30000"]))
    assert result["submitters"] == 3 and result["completers"] == 3
    assert result["threads"] == 3 and result["total_threads"] == 6


def test_extra_work_slows_down(programs):
    """--extra-work injects a known allocation-free slowdown (~1 ns a unit)."""
    # The fastest of three runs each, interleaved: one run of ~25 ms is one preemption from 2x. A
    # thousand units a pair (about 1 us, thirty times a pair's own cost) leave 2x beyond any
    # neighbour (100 units once read 59 ns against 33 ns beside three test workers).
    base, slow = [], []
    for _ in range(3):
        base.append(one_json_line(run(programs["simple"], ["--iters=20000"])))
        slow.append(one_json_line(run(programs["simple"], ["--iters=20000", "--extra-work=1000"])))
    assert slow[0]["extra_work"] == 1000
    assert min(r["ns_per_pair"] for r in slow) > 2 * min(r["ns_per_pair"] for r in base)


def test_same_seed_same_work(programs):
    """Fixed default seed: the live-byte trajectory is identical across runs."""
    args = ["--ops=300000", "--horizon=16384"]
    a = one_json_line(run(programs["fragment"], args))
    b = one_json_line(run(programs["fragment"], args))
    c = one_json_line(run(programs["fragment"], [*args, "--seed=7"]))
    assert a["peak_live_kb"] == b["peak_live_kb"]
    assert a["peak_live_kb"] != c["peak_live_kb"]


# --------------------------------------------------------------------------
# The effects the workloads exist to show


def test_oversized_top_pad_removes_per_query_trim(programs):
    """glibc trims the heap top after every query (27 KB chunks come from brk,
    freeing them all leaves a top larger than M_TRIM_THRESHOLD), so each query
    page-faults ~27 MB again; MALLOC_TOP_PAD_ keeps the top.  Measured on a
    2-core box: ~60-75 vs ~10,000-26,000 queries/s.  The value is given in
    bytes: glibc 2.36 silently ignores a '64M' suffix."""
    args = ["--queries=30"]
    default = one_json_line(run(programs["oversized"], args))
    padded = one_json_line(
        run(programs["oversized"], args, env=clean_env(MALLOC_TOP_PAD_=str(64 << 20)))
    )
    assert padded["queries_per_s"] > 3 * default["queries_per_s"], (default, padded)


@pytest.mark.e2e
@pytest.mark.parametrize("allocator", list(ALLOCATORS))
def test_reclaim_reports_the_allocators_release_call(programs, allocator):
    preload = allocator_or_skip(allocator)
    proc = run(programs["reclaim"], ["--total=16M", "--idle-ms=0"], env=clean_env(preload))
    result = one_json_line(proc)
    assert result["alloc_release_call"] == ALLOCATORS[allocator][1]
    assert result["release_ms"] >= 0
    # Not "<= peak": glibc's malloc_trim does not shrink the top chunk of a
    # thread's (non-main) arena, so at small sizes nothing comes back.
    assert result["rss_after_release_kb"] > 0


def test_reclaim_keep_threads(programs):
    result = one_json_line(run(programs["reclaim"], ["--total=8M", "--idle-ms=0", "--keep-threads"]))
    assert result["keep_threads"] == 1
    assert result["alloc_release_call"] == "malloc_trim"
    assert result["rss_peak_kb"] > result["rss_base_kb"]


def test_reclaim_no_release_reports_null(programs):
    result = one_json_line(run(programs["reclaim"], ["--total=8M", "--idle-ms=0", "--no-release"]))
    assert result["alloc_release_call"] is None
    assert result["release_ms"] is None
    assert result["rss_after_release_kb"] is None
    assert result["returned_after_release"] is None
    assert 0.0 <= result["returned_after_idle"] <= 1.0
