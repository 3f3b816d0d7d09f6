"""`alloclab inspect` against glibc's own answer: programs that pause after building a heap state
print malloc_info() at the pause (tests/programs/inspectee.c), and the walk, read from outside,
matches it arena by arena within 1%: each arena's system bytes, its fastbins, its free chunks with
its top (malloc_info's "rest"), and the mapped chunks. The right memory rule fires with the right
setting, none for the control; the program continues and prints byte for byte what it prints
uninspected; and, measured alone (a serial test: a busy machine makes every stop longer, since the
stopped threads wait for a CPU to reach their stop), its heartbeat thread sees no pause above
100 ms. Both ways of finding main_arena and mp_ are checked: the debug symbols (libc6-dbg) and their
content (--no-symbols)."""

from __future__ import annotations

import functools

import pytest

from inspect_helpers import close, inspection, malloc_info, pause, plain_run, worst_gap_ms

pytestmark = [pytest.mark.e2e]

MIB = "16"
# mode -> (the rule that must fire, a word of the setting it names)
EXPECTED = {"top": ("glibc-trim-raised", "MALLOC_TRIM_THRESHOLD_="),
            "pinned": ("glibc-free-pinned", "LD_PRELOAD="),
            "arenas": ("glibc-arena-free", "MALLOC_ARENA_MAX="),
            "control": (None, None)}


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    import os
    import subprocess
    from conftest import PROGRAMS, missing_prerequisite
    import shutil
    if not shutil.which(os.environ.get("CC", "cc")):
        missing_prerequisite("no C compiler (apt-get install -y gcc libc6-dev)")
    out = tmp_path_factory.mktemp("inspectee") / "inspectee"
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-pthread", "-o", str(out), str(PROGRAMS / "inspectee.c")],
                   check=True, capture_output=True)
    return out


@functools.cache
def _plain(program, mode: str, scratch) -> bytes:
    return plain_run(program, mode, scratch / f"{mode}-plain.xml", MIB)


def _debug_symbols_installed() -> bool:
    import glob
    return bool(glob.glob("/usr/lib/debug/.build-id/*/*.debug"))


@pytest.mark.parametrize("way", ["--symbols", "--no-symbols"])
@pytest.mark.parametrize("mode", sorted(EXPECTED))
def test_the_walk_matches_malloc_info_arena_by_arena(program, cli, tmp_path_factory, tmp_path, mode, way):
    if way == "--symbols" and not _debug_symbols_installed():
        from conftest import missing_prerequisite
        missing_prerequisite("glibc's debug symbols are not installed (apt-get install -y libc6-dbg)")
    scratch = tmp_path_factory.getbasetemp()
    expected_out = _plain(program, mode, scratch)
    p = pause(program, mode, tmp_path / "info.xml", MIB)
    try:
        got = inspection(cli("inspect", str(p.pid), "-f", "json", way))
    finally:
        out, err, rc = p.go()
    assert rc == 0 and out == expected_out, (out, expected_out, err)

    (ins,) = got
    snap, answer = ins["snapshot"], ins["answer"]
    arenas, (mmap_count, mmap_bytes) = malloc_info(p.info)
    assert len(snap["arenas"]) == len(arenas), (snap["arenas"], arenas)
    for walked, oracle in zip(snap["arenas"], arenas):
        assert close(walked["walked"], oracle["system"]) and walked["system"] == oracle["system"], (walked, oracle)
        assert close(walked["fast"], oracle["fast"]) and walked["fast_count"] == oracle["fast_count"], (walked, oracle)
        # malloc_info's rest: the top and every chunk in the bins (its sizes carry their flag bits).
        assert close(walked["top"] + walked["free"], oracle["rest"]), (walked, oracle)
        assert walked["free_count"] + 1 == oracle["rest_count"], (walked, oracle)
        assert walked["unread"] == 0
    assert snap["mapped_count"] == mmap_count and close(snap["mapped_bytes"], mmap_bytes)
    # Every program frees small blocks last: the first of each size to each thread's tcache, the rest
    # to the fastbins, both counted as caches, not live.
    assert all(a["tcache_count"] > 0 for a in snap["arenas"] if a["threads"])
    assert snap["split"]["parts"]["caches"] >= sum(a["fast"] for a in arenas)

    which = "debug symbols" if way == "--symbols" else "content"
    assert any(f"main_arena found by {which}" in n for n in snap["notes"]), snap["notes"]
    assert snap["stopped"] and snap["pauses"] > 0 and snap["pause_max_ms"] > 0
    # The parts add up to the anonymous RSS smaps gives.
    sp = snap["split"]
    assert abs(sp["unexplained"]) <= max(0.05 * sp["anon"], 2 << 20), sp

    rule, setting = EXPECTED[mode]
    fired = {f["rule"]: f for f in answer["fired"]}
    if rule is None:
        assert not fired, fired
        return
    assert rule in fired, (answer, sp["parts"], snap["thresholds"])
    lines = [s["env_line"] for s in fired[rule]["settings"]]
    assert any(setting in line and str(program) in line for line in lines), lines
    assert all("[Service]" in s["systemd"] for s in fired[rule]["settings"])
    assert answer["race"].startswith("alloclab tune -- ") and str(program) in answer["race"]


def test_the_terminal_answer_names_the_rule_and_its_lines(program, cli, tmp_path):
    p = pause(program, "top", tmp_path / "info.xml", MIB)
    try:
        r = cli("inspect", str(p.pid))
    finally:
        p.go()
    assert r.returncode == 0, r.stdout + r.stderr
    text = r.stdout
    assert "where its" in text and "free at the top" in text
    assert "glibc-trim-raised: glibc keeps" in text and "its trim threshold rose to" in text
    assert "run:     MALLOC_TRIM_THRESHOLD_=" in text and "Environment=\"MALLOC_TRIM_THRESHOLD_=" in text
    assert f"race it: alloclab tune -- {program}" in text
    assert "Inspection stored in" in text


def test_a_heap_that_changes_under_the_walk_is_read_and_left_intact(program, cli, tmp_path):
    # While it is read, the program keeps replacing its blocks (and checks each one's bytes before
    # freeing it): whatever changed between the reads fails the walk's checks and is counted as
    # unread, never guessed; the program finds nothing of its own altered.
    # Where the churn moved main_arena's bins between the candidates' search and the stop, the walk
    # cannot confirm it and says so, reading smaps alone (snapshot.py): another look then walks it.
    p = pause(program, "churn", tmp_path / "info.xml", MIB)
    try:
        for _ in range(3):
            snap = inspection(cli("inspect", str(p.pid), "-f", "json"))[0]["snapshot"]
            if snap["source"] != "smaps alone":
                break
            assert any("main_arena was not found" in n for n in snap["notes"]), snap["notes"]
    finally:
        out, err, rc = p.go()
    assert rc == 0 and out.decode().endswith("altered: 0\n"), (out, err)
    assert snap["source"] == "glibc's heaps, walked from outside", snap["source"]
    assert snap["unread"] >= 0 and "unread" in snap["split"]["books"]
    parts = snap["split"]["parts"]
    assert parts["live"] > 8 << 20, parts


def test_a_process_already_traced_is_read_without_stopping(program, cli, tmp_path):
    # strace holds it: alloclab cannot stop it (a process has one tracer) and reads it running; with
    # no registers, the tcaches are found by their content. The heap is the same, so is the answer.
    import subprocess
    import time
    from conftest import need_program
    strace = need_program("strace")
    p = pause(program, "arenas", tmp_path / "info.xml", MIB)
    tracer = subprocess.Popen([strace, "-f", "-p", str(p.pid), "-o", "/dev/null"], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while open(f"/proc/{p.pid}/status").read().count(f"TracerPid:\t{tracer.pid}\n") == 0:
            assert time.monotonic() < deadline, "strace did not attach"
            time.sleep(0.02)
        got = inspection(cli("inspect", str(p.pid), "-f", "json"))
    finally:
        tracer.terminate()
        tracer.wait()
        out, err, rc = p.go()
    assert rc == 0
    snap = got[0]["snapshot"]
    assert snap["traced_by"] == tracer.pid and not snap["stopped"] and snap["pauses"] == 0, snap
    assert any(f"already traced by process {tracer.pid}" in n for n in snap["notes"]), snap["notes"]
    assert snap["tcache_by"].startswith("content")
    arenas, _ = malloc_info(p.info)
    for walked, oracle in zip(snap["arenas"], arenas):
        assert close(walked["top"] + walked["free"], oracle["rest"]) and walked["fast"] == oracle["fast"]
    # The four threads' tcaches (main and three workers) found by content.
    assert sum(a["tcache_count"] for a in snap["arenas"]) > 0
    assert "glibc-arena-free" in {f["rule"] for f in got[0]["answer"]["fired"]}


def test_without_pagemap_or_a_compiler_the_walk_is_the_same_and_residency_comes_from_smaps(program, cli, tmp_path):
    # A production host: no C compiler on its PATH; and a kernel or container that hides pagemap
    # (here: --no-pagemap). The walk reads the same heap; residency is each mapping's smaps share.
    import os
    p = pause(program, "pinned", tmp_path / "info.xml", MIB)
    try:
        env = {**os.environ, "PATH": "/nonexistent", "CC": "/nonexistent/cc"}
        got = inspection(cli("inspect", str(p.pid), "-f", "json", "--no-pagemap", env=env))
    finally:
        p.go()
    snap = got[0]["snapshot"]
    assert snap["residency"] == "smaps"
    assert any(n.startswith("no pagemap: residency is each mapping's share") for n in snap["notes"]), snap["notes"]
    arenas, _ = malloc_info(p.info)
    assert close(snap["arenas"][0]["top"] + snap["arenas"][0]["free"], arenas[0]["rest"])
    assert "glibc-free-pinned" in {f["rule"] for f in got[0]["answer"]["fired"]}
    sp = snap["split"]
    assert sp["parts"]["free_inside"] > 8 << 20 and sp["parts"]["live"] > 0, sp["parts"]
    assert abs(sp["unexplained"]) <= max(0.05 * sp["anon"], 2 << 20), sp


@pytest.mark.serial
@pytest.mark.slow
def test_no_pause_above_100_ms(program, cli, tmp_path):
    # Each program's heartbeat thread (a 1 ms sleep in a loop) while alloclab reads it: the longest
    # it was held stopped is within 100 ms. (alloclab's own count of a stop, from its first interrupt
    # to its last detach, also holds the time the threads wait for a CPU to reach their stop.)
    for mode in sorted(EXPECTED):
        p = pause(program, mode, tmp_path / f"{mode}.xml", MIB)
        try:
            got = inspection(cli("inspect", str(p.pid), "-f", "json"))
        finally:
            _, err, rc = p.go()
        assert rc == 0 and got[0]["snapshot"]["pauses"] > 0
        assert worst_gap_ms(err) <= 100, (mode, err, got[0]["snapshot"]["pause_max_ms"])
