"""A program that carries its own allocator is tuned through that copy's own settings, not preloads
that cannot reach it: a Rust program on the mimalloc crate (mimalloc built in, `mi_*`) holds what
its threads freed while it rests, and tune races MIMALLOC_PURGE_DELAY=0 against the copy as built,
with no LD_PRELOAD in any variant; one on tikv-jemallocator, _RJEM_MALLOC_CONF's decay. Where alloclab knows no setting of the bundled copy, tune says so
before anything runs."""

from __future__ import annotations

import re
import subprocess

import pytest

from native_programs import rust_program

pytestmark = pytest.mark.e2e

RSS_IDLE = r"rss_idle=rss_idle_kb: (\d+):lower"
# 8 threads, 200 rounds of windows of 48 buffers, 300 ms of rest: 0.8 s a run, where 600 rounds took
# 1.9 s for the same memory at rest (tikv: 34.7 MiB as built, 4.4 with its decay 0).
ARGS = ("8", "200", "48", "300")


@pytest.mark.slow
def test_tune_races_the_bundled_mimallocs_own_setting(cli, store_of):
    prog = rust_program("rust-mimalloc")
    # By hand first: the program holds its freed windows at rest, and the setting returns them.
    by_hand = {}
    for env in ({}, {"MIMALLOC_PURGE_DELAY": "0"}):
        out = subprocess.run([str(prog), *ARGS], capture_output=True, text=True, check=True,
                             env={"PATH": "/usr/bin:/bin", **env}).stdout
        by_hand[bool(env)] = int(out.split("rss_idle_kb:")[1].split()[0])
    assert by_hand[True] < by_hand[False] / 4, by_hand

    p = cli("tune", "--budget", "4m", "--max-runs", "6", "--metric", RSS_IDLE, "--", str(prog), *ARGS,
            timeout=400)
    said = " ".join(p.stdout.split())
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"rust-mimalloc bundles its own mimalloc 3\.\d+\.\d+\b", said) and "the baseline is that copy as built" in said, said
    assert "mimalloc-bundled-held" in said
    store = store_of(cli.db)
    race = [e for e in store.listing() if e.kind == "tune"]
    assert len(race) == 1
    e = store.load(race[0].id)
    specs = [v.spec for v in e.variants]
    assert specs == ["mimalloc-bundled@mimalloc (bundled)", "mimalloc-bundled:MIMALLOC_PURGE_DELAY=0"], specs
    assert all("LD_PRELOAD" not in v.env for v in e.variants), [v.env for v in e.variants]
    assert e.variants[1].env.get("MIMALLOC_PURGE_DELAY") == "0"
    # Read back from the program's own copy (its options, printed under MIMALLOC_VERBOSE=1 as it starts).
    notes = " ".join(n for (_, vi), v in e.verifications.items() if vi == 1 for n in v.notes)
    assert "purge_delay = 0 (asked MIMALLOC_PURGE_DELAY=0): in effect" in notes, notes
    # Decided, on the program's own memory at rest, where the hand runs put it.
    assert "Best for memory: rss_idle" in said and "mimalloc-bundled PURGE_DELAY=0" in said, said


@pytest.mark.slow
def test_tune_races_tikv_jemallocators_own_decay(cli, store_of):
    """tikv-jemallocator's jemalloc reads _RJEM_MALLOC_CONF, not MALLOC_CONF: the candidate sets the
    prefixed variable, and it returns what the copy kept at rest."""
    prog = rust_program("rust-jemalloc")
    by_hand = {}
    for name, env in (("as built", {}), ("prefixed", {"_RJEM_MALLOC_CONF": "dirty_decay_ms:0,muzzy_decay_ms:0"}),
                      ("unprefixed", {"MALLOC_CONF": "dirty_decay_ms:0,muzzy_decay_ms:0"})):
        out = subprocess.run([str(prog), *ARGS], capture_output=True, text=True, check=True,
                             env={"PATH": "/usr/bin:/bin", **env}).stdout
        by_hand[name] = int(out.split("rss_idle_kb:")[1].split()[0])
    assert by_hand["prefixed"] < by_hand["as built"] / 2 < by_hand["unprefixed"], by_hand

    p = cli("tune", "--budget", "4m", "--max-runs", "6", "--metric", RSS_IDLE, "--", str(prog), *ARGS,
            timeout=400)
    said = " ".join(p.stdout.split())
    assert p.returncode == 0, p.stdout + p.stderr
    assert "rust-jemalloc bundles its own jemalloc 5.3.0 (_rjem_malloc, _rjem_mallocx)" in said, said
    e = store_of(cli.db).load(next(x.id for x in store_of(cli.db).listing() if x.kind == "tune"))
    assert [v.spec for v in e.variants] == ["jemalloc-rjem@jemalloc (bundled)",
                                            "jemalloc-rjem:dirty_decay_ms=0,muzzy_decay_ms=0"]
    assert e.variants[1].env == {"_RJEM_MALLOC_CONF": "dirty_decay_ms:0,muzzy_decay_ms:0"}, e.variants[1].env
    assert "Best for memory: rss_idle" in said and "jemalloc-rjem dirty_decay_ms=0,muzzy_decay_ms=0" in said, said


def test_a_setting_the_bundled_copys_version_does_not_read_is_not_in_effect(cli, store_of):
    """mimalloc 2.1 renamed decommit_delay to purge_delay: the copy the crate builds does not read
    MIMALLOC_DECOMMIT_DELAY, and its own options, read back from the program, say so."""
    prog = rust_program("rust-mimalloc")
    p = cli("compare", "--runs", "1", "--warmup", "0", "-a", "mimalloc-bundled", "-a",
            "mimalloc-bundled:MIMALLOC_DECOMMIT_DELAY=0", "--", str(prog), "2", "50", "8", "0")
    assert p.returncode == 0, p.stdout + p.stderr
    e = store_of(cli.db).load()
    got = {e.variants[vi].label: v for (_, vi), v in e.verifications.items()}
    assert got["mimalloc-bundled"].status == "verified", got
    off = got["mimalloc-bundled DECOMMIT_DELAY=0"]
    assert off.status == "ineffective" and "reports no decommit_delay" in " ".join(off.reasons), off


def test_tikv_jemallocators_settings_are_read_back_from_the_program(cli, store_of):
    """jemalloc 5.2 and later print each option they set under confirm_conf:true as the program starts:
    the copy's dirty_decay_ms, appended to the variant's own _RJEM_MALLOC_CONF, is read back in effect."""
    prog = rust_program("rust-jemalloc")
    p = cli("compare", "--runs", "1", "--warmup", "0", "--details", "-a", "jemalloc-rjem", "-a",
            "jemalloc-rjem:dirty_decay_ms=0,muzzy_decay_ms=0", "--", str(prog), "2", "50", "8", "0")
    assert p.returncode == 0, p.stdout + p.stderr
    e = store_of(cli.db).load()
    got = {e.variants[vi].label: v for (_, vi), v in e.verifications.items()}
    assert got["jemalloc-rjem"].status == "verified", got
    tuned = got["jemalloc-rjem dirty_decay_ms=0,muzzy_decay_ms=0"]
    assert tuned.status == "verified", tuned
    said = " ".join(p.stdout.split())
    assert "opt.dirty_decay_ms = 0 (asked dirty_decay_ms=0): in effect" in said, said
    # What was measured ran with the variant's settings only: confirm_conf is the read-back's alone.
    assert e.variants[1].env == {"_RJEM_MALLOC_CONF": "dirty_decay_ms:0,muzzy_decay_ms:0"}, e.variants[1].env


def test_a_bundled_copy_no_setting_reaches_is_answered_before_anything_runs(build, cli):
    """tcmalloc's prefixed names (tc_malloc) with no copy of it the catalog knows: every variant
    would run the same allocator, so nothing runs and nothing is stored."""
    prog = build("bundled", "-Dje_malloc=tc_malloc", "-Dje_free=tc_free")
    p = cli("tune", "--", str(prog))
    said = " ".join((p.stdout + p.stderr).split())
    assert p.returncode != 0, said
    assert "bundles its own tcmalloc under prefixed names (tc_free, tc_malloc)" in said, said
    assert "knows no setting that this copy reads" in said and "Nothing was run" in said, said
    assert not cli.db.exists()


@pytest.mark.slow
def test_the_end_reading_is_taken_before_the_bundled_copys_exit_cleanup(cli, store_of):
    """The mimalloc crate gives everything back as the process exits (its mi_process_done): the
    fingerprint's end reading is the one taken as exit() began, which agrees with what the process
    held just before it (VmRSS at rest by hand: 668-673 MiB at 1.5 s of rest on a quiet machine; on a
    loaded one the copy may already have purged part of it), not the few MiB the cleanup leaves."""
    prog = rust_program("rust-mimalloc")
    args = ["8", "600", "48", "1500"]
    p = cli("tune", "--budget", "1m", "--max-runs", "2", "--warmup", "0", "--no-verify", "--", str(prog), *args,
            timeout=300)
    assert p.returncode in (0, 3), p.stdout + p.stderr
    assert "as exit began, before its allocator's exit cleanup gave back" in " ".join(p.stdout.split()), p.stdout
    store = store_of(cli.db)
    diagnosis = store.load(min(x.id for x in store.listing()))
    fp = next(iter(diagnosis.fingerprints.values()))
    mem, series = fp["memory"], fp["series"]
    # Within 10% of what the process held in its last 20 ms sample before exit (the same run), and
    # most of it given back by the cleanup after: what the final reading alone would have shown.
    before = series[-2][3]
    assert abs(mem["end_anon_kb"] - before) <= 0.1 * before, (mem, series[-3:])
    assert mem["end_anon_kb"] >= 32 << 10 and mem["exit_cleanup_kb"] >= 0.5 * mem["end_anon_kb"], mem


def test_the_timed_runs_end_reading_is_taken_before_the_bundled_copys_exit_cleanup(cli, store_of):
    """The timed runs read memory at its end as exit() begins too (measure/exit_reading.py), not at the
    exit stop after the copy gave it all back: within 10% of the program's own VmRSS at rest, for the
    default and its purge setting alike (the exit stop read 4.8 MiB for both on a quiet machine).
    A program with no allocator built in keeps the exit stop's reading, and nothing is preloaded."""
    prog = rust_program("rust-mimalloc")
    p = cli("compare", "--runs", "2", "--warmup", "0", "--no-verify", "--metric", RSS_IDLE, "-a", "mimalloc-bundled",
            "-a", "mimalloc-bundled:MIMALLOC_PURGE_DELAY=0", "--", str(prog), "4", "300", "48", "300")
    assert p.returncode == 0, p.stdout + p.stderr
    runs = [r for r in store_of(cli.db).load().runs if r.status == "ok" and not r.warmup]
    assert len(runs) == 4
    for r in runs:
        own = r.metrics["rss_idle"] / 1024    # VmRSS: the anonymous memory and the program's file pages
        assert own * 0.9 - 8 <= r.metrics["end_anon_mb"] <= own + 1, r.metrics
    default = [r.metrics["end_anon_mb"] for r in runs if r.variant_idx == 0]
    assert min(default) > 64, default         # what the default holds at rest, not what its cleanup left
    p = cli("compare", "--runs", "1", "--warmup", "0", "--no-verify", "-a", "glibc", "--", "/usr/bin/env")
    assert p.returncode == 0, p.stdout + p.stderr
    (r,) = [r for r in store_of(cli.db).load().runs if not r.warmup]   # the latest experiment
    assert "ALLOCLAB_EXIT_READ" not in (r.stdout or ""), r.stdout
