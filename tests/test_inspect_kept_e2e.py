"""`alloclab inspect` on freed memory that glibc's thresholds keep, where the advice must come from
what the walk reads one arena and one chunk size at a time (tests/programs/keptheap.c): thread
arenas whose tops each sit below a raised trim threshold (their sum does not: a rule that weighs the
sum against the threshold stays silent), and free chunks of one size above 64 KiB between live
blocks (the sizes the heap holds stand in for the requests a fingerprint would count). Each setting
the answer names is then tried: the program restarted with it holds what the answer says it would
give back, read from smaps_rollup at the same paused point."""

from __future__ import annotations

import os
import re

import pytest

from inspect_helpers import inspection, pause_argv

pytestmark = [pytest.mark.e2e]


def _anonymous(pid: int) -> int:
    text = open(f"/proc/{pid}/smaps_rollup").read()
    return int(re.search(r"^Anonymous:\s+(\d+) kB", text, re.M)[1]) * 1024


def _paused_anonymous(argv: list[str], env: dict[str, str]) -> int:
    p = pause_argv(argv, env={**os.environ, **env})
    try:
        return _anonymous(p.pid)
    finally:
        p.go()


def _inspect(cli, argv: list[str], *extra: str):
    p = pause_argv(argv)
    try:
        r = cli("inspect", str(p.pid), *extra)
    finally:
        out, err, rc = p.go()
    assert rc == 0 and out.startswith(b"blocks: "), (out, err)
    return r


def _env(spec: str) -> dict[str, str]:
    from alloclab.catalog.variants import parse_variant
    return dict(parse_variant(spec).env)


def test_thread_arenas_tops_below_a_raised_trim_threshold_name_a_fixed_threshold_that_returns_them(build, cli):
    prog = build("keptheap", "-pthread")
    argv = [str(prog), "tops", "12", "4"]
    (ins,) = inspection(_inspect(cli, argv, "-f", "json"))
    snap, answer = ins["snapshot"], ins["answer"]
    tops = [a["top_resident"] for a in snap["arenas"] if not a["main"]]
    assert len(tops) == 4 and all(t >= 11 << 20 for t in tops), snap["arenas"]
    th = snap["thresholds"]
    assert th["raised_by"] >= 12 << 20 and all(t < th["trim_threshold"] for t in tops), th
    fired = {f["rule"]: f for f in answer["fired"]}
    assert "glibc-arena-top-raised" in fired, (answer, snap["split"]["books"])
    f = fired["glibc-arena-top-raised"]
    specs = [s["spec"] for s in f["settings"]]
    assert specs == ["glibc:MALLOC_MMAP_THRESHOLD_=128K", "glibc:MALLOC_TRIM_THRESHOLD_=2M"], specs
    assert "4 arenas" in f["mechanism"] and "the cost: an mmap and a munmap call" in f["why"]
    # The program restarted with each setting: at least 75% of those tops are not held.
    held = sum(tops)
    plain = _paused_anonymous(argv, {})
    for spec in specs:
        with_it = _paused_anonymous(argv, _env(spec))
        assert plain - with_it >= 0.75 * held, (spec, plain, with_it, held)


def test_free_chunks_of_one_size_above_64_kib_name_a_fixed_mmap_threshold_below_it(build, cli):
    prog = build("keptheap", "-pthread")
    argv = [str(prog), "sized", "640"]
    (ins,) = inspection(_inspect(cli, argv, "-f", "json"))
    snap, answer = ins["snapshot"], ins["answer"]
    big = [r for r in snap["chunk_sizes"] if r["class"] == 17]
    assert big and big[0]["free"] == 640 and big[0]["free_min"] == 102416, snap["chunk_sizes"]
    fired = {f["rule"]: f for f in answer["fired"]}
    assert "glibc-free-sized" in fired, answer
    f = fired["glibc-free-sized"]
    assert [s["spec"] for s in f["settings"]] == ["glibc:MALLOC_MMAP_THRESHOLD_=64K"]
    assert "640 chunks of 100 KiB" in f["mechanism"]
    assert "an mmap and a munmap call and 26 page faults at every allocation of 100 KiB" in f["why"]
    assert any(f"malloc_trim(0) called inside process {snap['pid']}" in s for s in answer["said"]), answer["said"]
    # Whose words ("no setting of glibc's gives it back") the setting beside them would belie.
    assert "glibc-free-pinned" not in fired
    free_inside = snap["split"]["parts"]["free_inside"]
    plain = _paused_anonymous(argv, {})
    with_it = _paused_anonymous(argv, _env("glibc:MALLOC_MMAP_THRESHOLD_=64K"))
    assert plain - with_it >= 0.75 * free_inside, (plain, with_it, free_inside)


def test_a_heap_of_live_blocks_fires_neither(build, cli):
    prog = build("keptheap", "-pthread")
    (ins,) = inspection(_inspect(cli, [str(prog), "none", "12"], "-f", "json"))
    assert not ins["answer"]["fired"], ins["answer"]


def test_three_candidates_print_one_drop_in_form(build, cli):
    prog = build("keptheap", "-pthread")
    text = _inspect(cli, [str(prog), "tops", "12", "4"]).stdout
    # The thread tops' two thresholds and the arena rule's MALLOC_ARENA_MAX: three candidates, each
    # with its own Environment= line, under one form.
    assert text.count("run:     MALLOC_") == 3, text
    assert text.count("systemd: Environment=") == 3, text
    assert text.count("systemctl edit") == 1 and text.count("[Service]") == 1, text
