"""`alloclab suite` end to end: real built-in programs under real allocators, and bad input."""

from __future__ import annotations

import os

import pytest

from alloclab import cache
from alloclab.catalog.elf import elf_facts
from alloclab.workloads import builtin
from conftest import run_cli

pytestmark = pytest.mark.e2e


def primary_medians(store_of, db, metric):
    import statistics
    e = store_of(db).load()
    out = {}
    for vi, v in enumerate(e.variants):
        vals = [r.metrics[metric] for r in e.runs if r.variant_idx == vi and not r.warmup
                and r.status == "ok" and metric in r.metrics]
        out[v.label] = statistics.median(vals) if vals else None
    return e, out


def test_suite_shows_the_top_pad_effect_on_oversized(cli, store_of):
    p = cli("suite", "--workload", "oversized", "--quick", "--runs", "3", "-a", "glibc",
            "-a", "glibc:MALLOC_TOP_PAD_=64M")
    assert p.returncode == 0, p.stderr
    e, med = primary_medians(store_of, cli.db, "queries_per_s")
    assert all(v.status == "verified" for v in e.verifications.values())
    # The PostgreSQL report: without a top pad glibc trims and re-grows the heap every query.
    assert med["glibc TOP_PAD=64M"] > 3 * med["glibc"], med
    # The short answer: its comparison, the verification's outcome, no table of geomeans (--details).
    assert "queries_per_s" in p.stdout and "Every variant verified" in p.stdout
    assert "Summary across workloads" not in p.stdout


def test_suite_runs_several_workloads_interleaved(cli, store_of):
    p = cli("suite", "--workload", "simple", "--workload", "larson", "--quick", "--runs", "2", "-a", "glibc", "-a", "jemalloc"
            if "jemalloc" in os.popen("ldconfig -p").read() else "glibc@again")
    assert p.returncode == 0, p.stderr
    e = store_of(cli.db).load()
    assert [w.name for w in e.workloads] == ["simple", "larson"]
    blocks = {}
    for r in e.runs:
        blocks.setdefault(r.block, []).append((r.workload_idx, r.variant_idx))
    # Every block holds all four cells, and the blocks are not all in the same order.
    assert all(len(set(cells)) == 4 for cells in blocks.values())
    assert len({tuple(c) for c in blocks.values()}) > 1


def test_workload_crashing_under_one_allocator_is_recorded_and_suite_goes_on(cli, build, store_of):
    crash = build("crashalloc", shared=True)
    p = cli("suite", "--workload", "simple", "--quick", "--runs", "2", "-a", "glibc", "-a", f"{crash}@crashy")
    assert p.returncode == 0, p.stderr
    e = store_of(cli.db).load()
    crashy = [r for r in e.runs if e.variants[r.variant_idx].label == "crashy"]
    fine = [r for r in e.runs if e.variants[r.variant_idx].label == "glibc"]
    assert crashy and all(r.status == "failed" and r.signal == 6 for r in crashy)
    assert fine and all(r.status == "ok" for r in fine)
    assert "SIGABRT" in p.stdout


def test_unknown_workload(cli):
    p = cli("suite", "--workload", "nosuch")
    assert p.returncode == 2 and "Unknown workload 'nosuch'" in p.stderr and "oversized" in p.stderr


@pytest.mark.parametrize("param, message", [
    ("threads=-1", "is not a non-negative number"),
    ("threads=0", "must be greater than zero"),
    ("min-size=0", "must be greater than zero"),
    ("bogus=3", "has a parameter bogus"),
    ("threads", "write NAME=VALUE"),
])
def test_bad_parameters(cli, param, message):
    p = cli("suite", "--workload", "larson", "--param", param)
    assert p.returncode == 2, p.stdout
    assert message in p.stderr


def test_missing_c_compiler_names_the_package(tmp_path):
    env = {**os.environ, "CC": "no-such-cc", "ALLOCLAB_CACHE": str(tmp_path)}
    p = run_cli(["suite", "--workload", "simple", "--db", str(tmp_path / "x.db")], env=env)
    assert p.returncode == 2
    assert "No C compiler found" in p.stderr and "apt-get install -y gcc libc6-dev" in p.stderr


def test_workloads_are_compiled_once_and_cached_by_source_hash(tmp_path, monkeypatch):
    monkeypatch.setenv("ALLOCLAB_CACHE", str(tmp_path))
    first = builtin.binary(builtin.get("simple"))
    mtime = first.stat().st_mtime_ns
    assert builtin.binary(builtin.get("simple")) == first and first.stat().st_mtime_ns == mtime
    assert first.parent == tmp_path
    # Dynamically linked against libc, so LD_PRELOAD can work (read from the ELF file itself:
    # `file` is not on a bare Debian machine).
    facts = elf_facts(first)
    assert not facts.is_static and "libc.so.6" in facts.needed
    assert cache.root() == tmp_path


def test_suite_list_describes_each_workload(cli):
    p = cli("suite", "--list")
    assert p.returncode == 0
    for name in builtin.registry():
        assert name in p.stdout
    assert "PostgreSQL" in p.stdout
