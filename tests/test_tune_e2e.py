"""tune on real programs and real allocators: each rule fires on a C program built for its
mechanism and stays silent on a control, values follow the measurement, and `alloclab tune` runs
end to end (a churn program raced to a decided pick; a program that barely allocates stopped with
its bound)."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from alloclab.store.db import Store
from alloclab.tune.diagnosis import reading
from alloclab.tune.prescribe import prescribe
from alloclab.workloads import builtin

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

from conftest import require_allocator, run_cli

GLIBC_RULES = {"glibc-trim-churn", "glibc-mmap-churn", "glibc-arena-bloat"}


def fingerprint(tmp_path: Path, argv: list[str], allocators=("glibc",)) -> dict:
    """Readings of one untimed fingerprint run per allocator (compare --fingerprint --runs 1)."""
    db = tmp_path / f"fp-{'-'.join(Path(a).name for a in argv)}.db"
    cmd = ["compare", "--db", str(db), "--fingerprint", "--runs", "1", "--no-verify"]
    for a in allocators:
        cmd += ["-a", a]
    proc = run_cli(cmd + ["--", *argv], timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    e = Store(db).load(1)
    return {v.allocator: reading(v.allocator, v.label, e.fingerprints[(0, i)]) for i, v in enumerate(e.variants)}


@pytest.mark.parametrize("program,args,rule", [
    ("heapswing", ["8", "40"], "glibc-trim-churn"),
    ("mmapchurn", ["40", "16"], "glibc-mmap-churn"),
    ("arenabloat", ["16", "16"], "glibc-arena-bloat"),
])
def test_each_glibc_rule_fires_on_its_program_and_no_other_glibc_rule_does(tmp_path, build, program, args, rule):
    rx = prescribe(fingerprint(tmp_path, [str(build(program, "-pthread")), *args]), [])
    assert set(rx.fired) & GLIBC_RULES == {rule}, rx.fired


def test_a_big_buffer_asked_once_is_not_churn(tmp_path, build):
    """One block of 256 MiB, touched and freed once (as sort's buffer is): glibc unmaps it and jemalloc
    purges it, gigabytes a second, but its pages fault in once whatever the threshold or the decay."""
    require_allocator("jemalloc")
    readings = fingerprint(tmp_path, [str(build("mmapchurn")), "256", "1"], ("glibc", "jemalloc"))
    assert readings["glibc"].get("big_turnover") < 1.5 and readings["glibc"].get("big_bytes_per_s") >= 64 << 20
    rx = prescribe(readings, [])
    assert "glibc-mmap-churn" in rx.silent and "jemalloc-decay-churn" in rx.silent, rx.fired


def test_no_rule_fires_on_a_program_that_barely_allocates(tmp_path, build):
    require_allocator("jemalloc")
    rx = prescribe(fingerprint(tmp_path, [str(build("compute")), "20000000"], ("glibc", "jemalloc")), [])
    assert rx.fired == [] and rx.candidates == []
    assert "glibc-trim-churn" in rx.silent and "jemalloc-decay-churn" in rx.silent


def test_the_jemalloc_decay_rule_fires_on_jemallocs_purge_churn(tmp_path):
    require_allocator("jemalloc")
    oversized = builtin.get("oversized")
    rx = prescribe(fingerprint(tmp_path, [str(builtin.binary(oversized)), "--queries=6"], ("glibc", "jemalloc")), [])
    assert "jemalloc-decay-churn" in rx.fired
    assert "jemalloc:dirty_decay_ms=30000,muzzy_decay_ms=30000" in [c.spec for c in rx.candidates]


def test_pads_follow_each_programs_measured_heap_growth(tmp_path, build):
    exe = str(build("heapswing"))
    pads = {}
    for mib, iters in ((3, 80), (30, 8)):
        r = fingerprint(tmp_path, [exe, str(mib), str(iters)])["glibc"]
        c = next(c for c in prescribe({"glibc": r}, []).candidates if c.rule == "glibc-trim-churn")
        pad = int(c.spec.split("=")[1].rstrip("M")) << 20
        # The reading may fall short of the true swing (the live bytes are read between allocations),
        # so the pad is checked against both the reading and the growth the program is built to make.
        assert pad > r.get("heap_swing") and pad > mib << 20, (c.spec, r.get("heap_swing"))
        pads[mib] = pad
    assert pads[3] < pads[30]


def test_tune_end_to_end_on_a_churn_program(cli, build, store_of):
    require_allocator("tcmalloc")
    proc = cli("tune", "--budget", "4m", "-a", "tcmalloc", "--", str(build("heapswing")), "8", "30", timeout=400)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "rules fired: glibc-trim-churn" in out
    assert out.index("Best for speed") < out.index("Answer (each comparison against")   # the answer comes first
    # The pad the fingerprint sized, raced and decided faster: the pick or decided better beside it.
    pad_lines = [line for line in out.splitlines() if "glibc TOP_PAD=" in line and ("Best for speed" in line or
                                                                                   "better" in line)]
    assert pad_lines, out
    if "Best for speed: glibc TOP_PAD" in out:
        assert "brk calls" in out and "minor page faults -" in out
    store = store_of(cli.db)
    kinds = [store.load(i).row.kind for i in (1, 2)]
    assert kinds == ["tune-diagnosis", "tune"]
    race = store.load(2)
    # The mechanism's rule alone; allocator-bound (>= 20,000 calls a second) also fires where the CPU
    # runs heapswing fast enough, which is the machine's speed, not the program's mechanism.
    assert set(race.config.tune.fired) & GLIBC_RULES == {"glibc-trim-churn"}
    # A race's design (plan/design.py Design.race): looks from 5 growing by 1.5, those below 13 runs
    # at alpha/K with the plain paired t, over the blocks its budget reaches.
    looks = race.config.design["looks"]
    assert looks[:3] == [5, 8, 12][:len(looks)] and race.config.design["plain_t"] is True, race.config.design
    assert race.config.design["trim_from"] == 13 and race.config.design["early"] == sum(n < 13 for n in looks) - 1
    # Stored and reported like any experiment: every format of the race gives tune's answer first,
    # the same picks as the command printed, whether the kept Results are read or analysed again.
    best = next(line for line in out.splitlines() if line.startswith("Best for "))
    for fmt, env in (("terminal", {}), ("md", {"ALLOCLAB_NO_RESULTS_CACHE": "1"}), ("json", {}), ("html", {})):
        report = cli("report", "-f", fmt, "2", env=env)
        assert report.returncode == 0, report.stderr
        text = report.stdout
        if fmt == "json":
            # The numbers, not the words: the pick's label, its goals and each effect's verdict and ratio.
            picks = json.loads(text)["tune"]["picks"]
            pick = next(p for p in picks if p["label"] in best)
            assert pick["effects"] and all(e["verdict"] == "better" and e["low"] <= e["ratio"] <= e["high"]
                                           for e in pick["effects"][:1]), pick
            continue
        assert best in text.replace("&#39;", "'").replace("&amp;", "&"), (fmt, text[:3000])
        if fmt in ("terminal", "md"):
            assert text.index("Tune answer (race: experiment 2, diagnosis: experiment 1)") < text.index("Answer")


def test_tune_stops_with_a_bound_on_a_program_that_barely_allocates(cli, build, store_of, tmp_path):
    asked = tmp_path / "tune.md"
    proc = cli("tune", "--report-file", str(asked), "--", str(build("compute")), "100000000", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Nothing to tune" in proc.stdout and "in the profiled runs" in proc.stdout
    assert "Racing" not in proc.stderr
    # Nothing raced, nothing to report: said, not left for the user to find the file missing.
    assert not asked.exists() and "No report written: tune raced nothing" in proc.stderr
    e = store_of(cli.db).load(1)
    assert e.row.kind == "tune-diagnosis" and e.profiles


def test_tune_bounds_before_racing_rules_that_read_only_the_allocation_rate(cli, build, store_of):
    # ~65,000 calls a second (three times the 20,000 of allocator-bound, so a CPU half as fast,
    # beside another process, still fires it) take well under 1% of the CPU: as on qemu-img bench, the bound rules every setting
    # out after one look, with no race. A rate metric takes the bound 1/(1 - share) - 1.
    proc = cli("tune", "--metric", r"ops=ops/s: (\d+)", "--", str(build("compute")), "150000000", "1500", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Nothing to tune" in proc.stdout and "the rules that fired (allocator-bound" in proc.stdout, proc.stdout
    assert "read only that rate" in proc.stdout and "in the profiled runs" in proc.stdout
    text = " ".join(proc.stdout.split())   # as printed, wrapped to the console
    assert "improve ops (a rate" in text and "at 95% confidence" in text
    e = store_of(cli.db).load(1)
    assert e.row.kind == "tune-diagnosis" and e.profiles


def test_rules_of_the_rate_race_where_the_allocator_takes_a_real_share(cli, build, store_of):
    # A malloc and free every 10 rounds: the allocator's share is far above the margin, so the
    # bound stops nothing and the rule's candidates race.
    # That they race is the point, not where the race ends: at most 6 runs a variant.
    proc = cli("tune", "--budget", "3m", "--max-runs", "6", "--", str(build("compute")), "10000000", "10",
               timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Nothing to tune" not in proc.stdout
    text = " ".join(proc.stdout.split())
    assert "The rules that fired read only the allocation rate" in text and "they race." in text
    assert "Racing" in proc.stderr
    assert [e.row.kind for e in (store_of(cli.db).load(1), store_of(cli.db).load(2))] == ["tune-diagnosis", "tune"]


@pytest.mark.parametrize("given, says", [
    ("glibc:MALLOC_TOP_PAD_=1M", "tune proposes the settings itself"),
    ("jemallok", "Unknown allocator 'jemallok'"),
    ("LIBC", "is a library of your own: race it with `alloclab compare -a"),
])
def test_tune_refuses_in_a_what_is_not_a_catalog_allocator_in_one_paragraph(cli, build, given, says):
    if given == "LIBC":   # a library that exists on every host: a path is refused as a path, not as missing
        import ctypes.util
        from alloclab.catalog import allocators as cat
        given = str(cat.find_library(ctypes.util.find_library("c")))
    proc = cli("tune", "-a", given, "--", str(build("compute")))
    assert proc.returncode == 2, proc.stderr
    # One paragraph, no traceback: the clean-up after the refusal must not fail in turn.
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr
    assert says in " ".join(proc.stderr.split()), proc.stderr


def test_a_setting_the_installed_allocator_does_not_know_is_refused():
    from alloclab.tune.session import _Resolved
    resolved = _Resolved()
    assert resolved.refusal("glibc:MALLOC_TOP_PAD_=8M") is None
    assert "does not read it" in resolved.refusal("glibc:MALLOC_TOP_PADD_=8M")
    assert list(resolved) == ["glibc:MALLOC_TOP_PAD_=8M"]   # resolved once, kept for the screen and the race


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


def test_tune_finds_the_arena_setting_for_memory_on_a_program_whose_arenas_bloat(cli, build, store_of):
    # 16 threads take turns on 8 MiB of small objects: under glibc each thread's arena keeps what it
    # freed (a peak RSS of about 135 MiB, 8 MiB live); with 2 arenas the next thread reuses it.
    # The peak RSS is decided at the first look; a speed comparison near no change would take the
    # whole budget (220 runs a variant in 4 minutes): 10 runs a variant suffice here.
    proc = cli("tune", "--budget", "4m", "--max-runs", "10", "--screen", "never", "-a", "tcmalloc", "--",
               str(build("arenabloat")), "16", "8", timeout=400)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "glibc-arena-bloat" in out.split("rules fired:")[1].split(";")[0]
    # The pick for peak RSS, alone or with the other goals it wins ("Best for memory and memory at its end: ...").
    best_memory = next(line for line in out.splitlines() if re.match(r"(Better on both, and best|Best) for ", line)
                       and "memory" in re.split(r", | and ", line.split(":")[0].split("best for ")[-1]
                                                .split("Best for ")[-1]))
    assert "ARENA_MAX=" in best_memory or "tcmalloc" in best_memory, out
    assert "peak RSS -" in best_memory
    # The pick's first line may wrap (it names every goal and effect it wins): its why follows it.
    why = next(line for line in out.split(best_memory)[1].splitlines() if line.lstrip().startswith("why:"))
    assert "arenas" in why or "policy" in why, why


def test_tune_screens_then_races_the_finalists_on_runs_of_their_own(cli, build, store_of):
    proc = cli("tune", "--budget", "4m", "--screen", "always", "--", str(build("heapswing")), "8", "30", timeout=400)
    out, err = proc.stdout, proc.stderr
    assert proc.returncode == 0, out + err
    store = store_of(cli.db)
    diag, scr, race = (store.load(i) for i in (1, 2, 3))
    assert [e.row.kind for e in (diag, scr, race)] == ["tune-diagnosis", "tune-screen", "tune"]
    assert len(scr.variants) > len(race.variants) >= 2      # the screen ran every candidate, the race fewer
    assert race.config.tune.screen_experiment == 2
    screened = race.config.tune.screened_out
    assert screened and "Screened out or not raced" in out and "not a verdict" in out
    # The race's verdicts stand on runs of its own, every one measured after the screen had chosen.
    assert race.runs and min(r.started for r in race.runs) >= scr.row.finished


def test_options_after_a_recipe_are_tunes_and_after_a_program_the_programs(tmp_path):
    # `alloclab tune recipe:NAME --db x.db` reads as `run recipe:NAME --db x.db` does; a program's
    # own flags after its name stay the program's (no `--` needed, as in compare).
    def tune(*args):
        return run_cli(["tune", *args], timeout=60, cwd=tmp_path)

    for args in (["recipe:nosuch", "--db", str(tmp_path / "x.db"), "--screen", "never"],
                 ["--budget", "1m", "recipe:nosuch", "--db=" + str(tmp_path / "x.db")]):
        proc = tune(*args)
        assert proc.returncode != 0 and "No recipe named 'nosuch'" in proc.stderr, proc.stdout + proc.stderr
    proc = tune("--db", str(tmp_path / "x.db"), "no-such-program-here", "--queries=3")
    assert proc.returncode != 0 and "Command not found: 'no-such-program-here'" in proc.stderr, proc.stderr
    # After a file, anything but tune's options is refused in words, not run as a command.
    for extra in (["extra"], ["--", "true"]):
        proc = tune("recipe:nosuch", "--db", str(tmp_path / "x.db"), *extra)
        assert proc.returncode != 0 and "names its own commands" in proc.stderr, proc.stderr
    proc = tune("recipe:nosuch", "--db")
    assert proc.returncode != 0 and "--db needs a value" in proc.stderr, proc.stderr
    # A file's clients are chosen by name; a program has none.
    (tmp_path / "two.toml").write_text('[experiment]\nname = "two"\n[[command]]\nname = "a"\ncommand = ["true"]\n'
                                       '[[command]]\nname = "b"\ncommand = ["true"]\n')
    proc = tune(str(tmp_path / "two.toml"), "--client", "c", "--db", str(tmp_path / "x.db"))
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 2 and "Its commands are: 'a', 'b'" in said, said
    proc = tune("--client", "memory", "--db", str(tmp_path / "x.db"), "--", "true")
    assert proc.returncode == 2 and "--client for an experiment file only" in " ".join(proc.stderr.split())


def test_a_command_that_fails_under_every_allocator_stops_at_its_diagnosis(cli, store_of):
    false = shutil.which("false")
    proc = cli("tune", "--", false)
    assert proc.returncode == 2, proc.stderr
    said = " ".join(proc.stderr.split())
    assert said.count("error: ") == 1 and "fingerprint run failed under every allocator (exited with status 1)" in said
    # Plain runs under the default, without the interposer, failed too: the program's failure.
    assert "and so did plain runs of it under the default" in said
    assert "Racing" not in proc.stderr    # nothing raced: the diagnosis said it all
    assert [e["kind"] for e in store_of(cli.db).experiments()] == ["tune-diagnosis", "tune-check"]


def test_a_command_that_fails_says_why_in_its_own_words(cli):
    # A python3 without the module the script imports: the program's last line, quoted.
    proc = cli("tune", "--", sys.executable, "-c", "import alloclab_no_such_module")
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 2 and "and so did plain runs of it under the default" in said, said
    assert "Its last line on stderr: \"ModuleNotFoundError: No module named 'alloclab_no_such_module'\"" in said, said
