"""The "glibc" variant of a program linked against jemalloc: glibc's malloc forced by alloclab's
forwarding preload, verified, and measured to be glibc's by the program's own behaviour.

No allocator is mocked: a program linked against the installed libjemalloc.so.2, and Debian's
redis-server (linked against it too), run under the real preload through the real runner."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from alloclab.catalog.variants import parse_variant
from conftest import need_program, require_allocator

pytestmark = pytest.mark.e2e

sys.path.insert(0, str(Path(__file__).parent))
from test_service_e2e import run_file, scratch  # noqa: E402,F401  (the fixture, reused)


def _by_label(e) -> dict:
    return {e.variants[vi].label: v for (_, vi), v in e.verifications.items()}


def _stdout(e, label: str) -> str:
    vi = next(i for i, v in enumerate(e.variants) if v.label == label)
    return next(r.stdout for r in e.runs if r.variant_idx == vi and not r.warmup)


def _compare_linked(build, cli, store_of, *options: str):
    """`alloclab compare OPTIONS -- PROGRAM` on tests/programs/linked_glibc.c linked against the
    installed jemalloc: (stored experiment, the CLI's output, the program)."""
    require_allocator("jemalloc")
    prog = build("linked_glibc", str(parse_variant("jemalloc").library))
    p = cli("compare", *options, "--", str(prog))
    assert p.returncode == 0, p.stdout + p.stderr
    return store_of(cli.db).load(), p, prog


def test_a_program_linked_against_jemalloc_runs_glibcs_malloc_under_glibc(build, cli, store_of):
    e, p, prog = _compare_linked(build, cli, store_of, "--runs", "1", "--warmup", "1", "-a", "glibc-linked", "-a", "glibc",
                                 "-a", "glibc:MALLOC_TOP_PAD_=64M")
    got = _by_label(e)
    # The baseline asked for no preload: the program runs the jemalloc it links, and the answer
    # says so before anything else.
    assert got["glibc-linked"].status == "ineffective"
    assert " ".join(p.stdout.split()).startswith(   # rich folds the long line: compare the words
        f"glibc-linked is not in use: {prog.name} links libjemalloc.so.2; every comparison below is against "
        f"jemalloc, not glibc-linked.")
    assert (f"{prog.name} links libjemalloc.so.2: each glibc variant ran with glibc's malloc forced in (alloclab's "
            f"forwarding preload), so the comparison is against glibc") in " ".join(p.stdout.split())
    for label in ("glibc", "glibc TOP_PAD=64M"):
        v = got[label]
        notes = " ".join(v.notes)
        assert v.status == "verified", (label, v)
        assert "glibc's malloc forced by alloclab's forwarding preload alloclab-glibc-forward-" in notes
        assert re.search(r"malloc and free bound to alloclab-glibc-forward-\w+\.so in \d process", notes), notes
        assert "malloc resolves to the forwarder" in notes
    assert "MALLOC_TOP_PAD_=64M in effect in glibc's malloc" in " ".join(got["glibc TOP_PAD=64M"].notes)
    # The program's own view: glibc's arena holds its memory and glibc's usable size answers
    # (104 for malloc(100); jemalloc's size class is 112); its mallctl still reaches jemalloc.
    facts = {label: dict(kv.split("=") for kv in _stdout(e, label).split())
             for label in ("glibc-linked", "glibc", "glibc TOP_PAD=64M")}
    assert facts["glibc-linked"]["glibc_arena_kb"] == "0" and facts["glibc-linked"]["usable_100"] == "112"
    assert int(facts["glibc"]["glibc_arena_kb"]) >= 1900 and facts["glibc"]["usable_100"] == "104"
    assert int(facts["glibc TOP_PAD=64M"]["glibc_arena_kb"]) >= 64 * 1024
    for f in facts.values():
        assert f["aligned"] == "1" and f["posix_memalign"] == "1" and f["mallctl"] == "0"


REDIS = """
[experiment]
name = "redis-forward"

[service]
command = ["redis-server", "--port", "{port}", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
           "--dir", "{workdir}", "--daemonize", "no", "--logfile", ""]
ready = { log = "Ready to accept connections" }
start_timeout = 20
stop = { command = ["redis-cli", "-h", "127.0.0.1", "-p", "{port}", "shutdown", "nosave"] }
stop_timeout = 10

[[client]]
name = "fill"
timeout = 60
# 20,000 values of 1000 B, then the server's own accounting: used_memory sums malloc_usable_size
# (whoever answers it), allocator_allocated is what jemalloc's mallctl says it holds.
command = ["redis-cli", "-h", "127.0.0.1", "-p", "{port}", "EVAL",
           "for i = 1, 20000 do redis.call('SET', 'k' .. i, string.rep('x', 1000)) end return redis.call('INFO', 'memory')", "0"]
metrics = [
  { name = "used_memory", regex = '^used_memory:(\\d+)', higher = false, primary = true },
  { name = "allocator_allocated", regex = '^allocator_allocated:(\\d+)', higher = false },
]
"""


def test_debian_redis_server_runs_glibcs_malloc_under_glibc(tmp_path, scratch):  # noqa: F811
    redis = need_program("redis-server")
    need_program("redis-cli", "redis-tools")
    from alloclab.measure.forward import linked_allocator

    linked = linked_allocator(Path(redis))
    if linked is None or linked.allocator.name != "jemalloc":
        pytest.skip("this redis-server is not linked against jemalloc")
    path = tmp_path / "redis.toml"
    path.write_text(REDIS)
    e = run_file(path, tmp_path / "r.db", variants=("glibc", "glibc-linked"), runs=1, warmup=1, verify=True)
    got = _by_label(e)
    v = got["glibc"]
    notes = " ".join(v.notes)
    assert v.status == "verified", v
    # Debian's redis-server is a link to redis-check-rdb, the file the loader runs.
    assert re.search(r"redis-(server|check-rdb) links libjemalloc.so.2: glibc's malloc forced by alloclab's "
                     r"forwarding preload", notes), notes
    assert re.search(r"malloc and free bound to alloclab-glibc-forward-\w+\.so", notes), notes
    assert "mallctl" in notes   # what still reaches jemalloc is named
    assert got["glibc-linked"].status == "ineffective"
    assert any(re.match(r"in use instead: jemalloc \(redis-(server|check-rdb) links libjemalloc.so.2\)", n)
               for n in got["glibc-linked"].notes), got["glibc-linked"]
    runs = {e.variants[r.variant_idx].label: r.metrics for r in e.runs if not r.warmup}
    # ~20 MB of values went in; under the forwarder jemalloc holds next to nothing of them.
    assert runs["glibc"]["used_memory"] > 15e6
    assert runs["glibc"]["allocator_allocated"] < 1e6
    assert list(scratch.iterdir()) == []


def test_the_fingerprint_of_the_forwarded_glibc_counts_glibcs_malloc(build, cli, store_of):
    # The untimed fingerprint run keeps the forwarding preload behind its interposer: its "glibc"
    # grows glibc's heap by brk (2,000 blocks of 1000 B), where the linked jemalloc maps its own.
    e, _, _ = _compare_linked(build, cli, store_of, "--runs", "1", "--warmup", "0", "--no-verify",
                              "--fingerprint", "-a", "glibc-linked", "-a", "glibc")
    fp = {e.variants[vi].label: f for (_, vi), f in e.fingerprints.items()}
    assert all(f["allocs"] >= 2000 for f in fp.values()), fp
    assert fp["glibc"]["syscalls"]["brk"] >= fp["glibc-linked"]["syscalls"]["brk"] + 5, \
        (fp["glibc"]["syscalls"], fp["glibc-linked"]["syscalls"])
