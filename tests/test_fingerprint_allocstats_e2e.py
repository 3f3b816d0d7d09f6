"""The allocators' own figures beside the interposer's live bytes (launcher/fingerprint.c reads
them from the allocator that serves malloc): under each real allocator, a program that holds a
known 20 MB heap (tests/programs/holdalloc.c) and frees it. glibc's mallinfo2, jemalloc's
stats.allocated and gperftools' current_allocated_bytes count what the program holds, so they
agree with the live bytes at the peak; mimalloc's release build reports only what it has
committed. A program linked against jemalloc but run under a preloaded tcmalloc is read from
tcmalloc: its linked jemalloc serves nothing."""

from __future__ import annotations

import os

import pytest

from alloclab.measure import fingerprint as fp
from alloclab.measure.executors import CommandExecutor

from conftest import require_allocator
from test_fingerprint_e2e import builtin_lib

pytestmark = [pytest.mark.e2e]

LIVE_KB = 20_000 * 1000 // 1024     # what holdalloc keeps at its peak, requested bytes

SOURCES = {"glibc": "glibc mallinfo2", "jemalloc": "jemalloc mallctl", "tcmalloc": "gperftools MallocExtension",
           "mimalloc": "mimalloc mi_process_info"}


def _run(tmp_path, argv, preload=None):
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    out = fp.run_cell(CommandExecutor([str(a) for a in argv]), env, {"LD_PRELOAD": preload} if preload else {},
                      tmp_path, timeout_s=60, mapped_marker=None)
    assert "error" not in out, out
    return out


@pytest.mark.parametrize("name", list(SOURCES))
def test_allocator_figures_beside_live_bytes(tmp_path, build, name):
    if name != "glibc":
        require_allocator(name)
    out = _run(tmp_path, [build("holdalloc")], None if name == "glibc" else str(builtin_lib(name)))
    own = out["allocator"]
    assert own["source"] == SOURCES[name], own
    peak, end = own["at_peak_live"], own["at_end"]
    assert peak["live_kb"] > LIVE_KB * 0.98          # usable sizes: at least what was asked
    if name == "mimalloc":
        assert peak["allocated_kb"] is None
    else:
        # The allocator's count of what the program holds agrees with ours within 5% at the peak.
        assert abs(peak["allocated_kb"] - peak["live_kb"]) < 0.05 * peak["live_kb"], own
        # After the frees both are near zero (the loader's and stdio's few blocks).
        assert end["allocated_kb"] < 1024 and end["live_kb"] < 1024, own
    # What it holds covers what is live.
    assert peak["held_kb"] >= peak["live_kb"] * 0.98, own


def test_linked_jemalloc_is_not_read_under_a_preloaded_tcmalloc(tmp_path, build):
    require_allocator("tcmalloc")
    require_allocator("jemalloc")
    prog = build("linked", str(builtin_lib("jemalloc")))
    under_tc = _run(tmp_path / "tc", [prog], str(builtin_lib("tcmalloc")))
    assert under_tc["allocator"]["source"] == "gperftools MallocExtension"
    alone = _run(tmp_path / "je", [prog])
    assert alone["allocator"]["source"] == "jemalloc mallctl"


def test_glibc_fingerprint_of_a_program_linked_against_jemalloc_runs_glibc(build, cli):
    """The fingerprint run takes the variant as its cell runs it: "glibc" of a program linked
    against jemalloc gets the forwarding preload, so glibc serves malloc there too (the first
    slice ran the linked jemalloc under "glibc": redis' glibc column was jemalloc's)."""
    import json
    require_allocator("jemalloc")
    prog = build("linked", str(builtin_lib("jemalloc")))
    cli("compare", "--runs", "1", "--warmup", "0", "--no-verify", "--fingerprint", "-a", "glibc", "-a", "jemalloc",
        "--", str(prog), check=True)
    fps = {f["variant_idx"]: f for f in json.loads(cli("report", "-f", "json", check=True).stdout)["fingerprints"]}
    assert fps[0]["allocator"]["source"] == "glibc mallinfo2", fps[0].get("allocator")
    assert fps[1]["allocator"]["source"] == "jemalloc mallctl", fps[1].get("allocator")
