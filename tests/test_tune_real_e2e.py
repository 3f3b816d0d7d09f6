"""tune on programs not written for alloclab's rules, end to end on real allocators: a CPython data
worker with numpy (a glibc threshold decided better for memory, and a hand run at the program's exit
inside its interval), a program linked to jemalloc (the baseline is jemalloc as linked, glibc a
candidate), two threads churning 64 KiB messages (glibc's own fix decided, the arena's trim named),
and a fingerprint that fails only under alloclab (said to be alloclab's; the rest of the answer stands)."""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PROGRAMS, need_program, require_allocator

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


SCHEMA = json.loads((Path(__file__).resolve().parent.parent / "docs" / "report.schema.json").read_text())


def _answer(cli) -> dict:
    """The race's tune answer from `report -f json`, the whole export checked against its schema."""
    return _valid(json.loads(cli("report", "-f", "json", check=True).stdout))["tune"]


def _decided_better(answer: dict, metric: str) -> list[dict]:
    """Picks and candidates decided better too, with their effect on `metric` decided better."""
    rows = answer["picks"] + [o for o in answer["others"] if o["outcome"] == "also better"]
    return [r for r in rows if any(e["metric"] == metric and e["verdict"] == "better" for e in r["effects"])]


def _anon_at_exit_kb(argv: list[str], env: dict) -> int:
    """By hand: the program's anonymous RSS at exit_group (its exit handlers run, its memory not yet
    released), read by gdb from /proc, as the launcher reads it for end_anon_mb."""
    gdb = need_program("gdb")
    out = subprocess.run([gdb, "-q", "-batch", "-ex", "catch syscall exit_group", "-ex", "run",
                          "-ex", "info proc status", "--args", *argv], env=env, capture_output=True, text=True,
                         timeout=120).stdout
    return int(re.search(r"RssAnon:\s+(\d+) kB", out).group(1))


def test_a_python_data_worker_with_numpy_gets_a_glibc_threshold_for_memory(cli, store_of):
    argv = [sys.executable, str(PROGRAMS / "datawork.py"), "8"]
    proc = cli("tune", "--budget", "90s", "--max-runs", "6", "-a", "glibc", "--", *argv, timeout=400)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "fails under the default" not in out and "sanitize" not in out   # it runs: no false accusation
    better = [r for r in _decided_better(_answer(cli), "end_anon_mb") if "THRESHOLD" in r["label"]]
    assert better, out
    # The hand run: plain and with the setting, three of each, read as the program exits.
    row = better[0]
    effect = next(e for e in row["effects"] if e["metric"] == "end_anon_mb")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    setting = {k: v for k, v in (kv.split("=", 1) for kv in row["env_line"].split() if "=" in kv)
               if k.startswith("MALLOC_")} if "env_line" in row else _env_of(store_of(cli.db), row["label"])
    plain = [_anon_at_exit_kb(argv, env) for _ in range(3)]
    tuned = [_anon_at_exit_kb(argv, env | setting) for _ in range(3)]
    ratios = [t / p for t in tuned for p in plain]
    # The hand runs' range of ratios meets the tool's interval, widened by half a percent: gdb's
    # process differs from the launcher's by a few kB (its environment, its own breakpoint page), and
    # at a ratio this steady (CI: hand 0.406347 every time, tool [0.406348, 0.406862]) that is the gap.
    assert min(ratios) <= effect["high"] * 1.005 and max(ratios) >= effect["low"] * 0.995, (ratios, effect)
    assert statistics.median(ratios) < 0.9


def _env_of(store, label: str) -> dict:
    race = store.load(2)
    v = next(v for v in race.variants if v.label == label)
    return {k: val for k, val in v.env.items() if k.startswith("MALLOC_")}


def test_a_program_linked_to_jemalloc_is_tuned_against_jemalloc_as_linked(cli, build, store_of):
    require_allocator("jemalloc")
    lib = next(Path(p) for p in ("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "/lib/x86_64-linux-gnu/libjemalloc.so.2")
               if Path(p).exists())
    prog = build("cacheidle", str(lib))
    proc = cli("tune", "--budget", "2m", "--max-runs", "6", "--", str(prog), "64", "200", timeout=400)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert out.splitlines()[0].startswith(f"{prog.name} links jemalloc "), out[:400]
    assert "the baseline is jemalloc as linked" in out.splitlines()[0]
    store = store_of(cli.db)
    race = store.load(2)
    labels = [v.label for v in race.variants]
    assert labels[0] == "jemalloc (linked)" and "glibc" in labels, labels
    # Every candidate reached the race's first look.
    early = race.config.design["looks"][0]
    assert all(len(race.cell_runs(0, vi)) >= early for vi in range(len(labels))), labels
    # A jemalloc setting decided to hold less at the program's end.
    answer = _answer(cli)
    better = _decided_better(answer, "end_anon_mb")
    assert any(r["label"].startswith("jemalloc ") and "decay" in r["label"] for r in better), out
    # glibc picked: its run line preloads the forwarder the race measured it through (without it
    # the program runs the jemalloc it links), and the build line says what to link instead. By
    # hand, that line gives what the race measured.
    glibc = [p for p in answer["picks"] if p["spec"] == "glibc"]
    assert glibc, [p["label"] for p in answer["picks"]]   # it returns 99% of what jemalloc keeps at its end
    for pick in glibc:
        assert "alloclab-glibc-forward-" in pick["env_line"] and f"{prog.name} links libjemalloc.so.2" in pick["build"]
        preload = pick["env_line"].split()[0].split("=", 1)[1]
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        plain, forced = _anon_at_exit_kb([str(prog), "64", "200"], env), \
            _anon_at_exit_kb([str(prog), "64", "200"], env | {"LD_PRELOAD": preload})
        effect = next(e for e in pick["effects"] + pick["costs"] if e["metric"] == "end_anon_mb")
        assert effect["low"] * 0.95 <= forced / plain <= effect["high"] * 1.05 + 0.01, (plain, forced, effect)


def _valid(export: dict) -> dict:
    import jsonschema
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in jsonschema.Draft202012Validator(SCHEMA).iter_errors(export)]
    assert not errors, "\n".join(errors[:20])
    return export


def test_threads_churning_messages_get_glibcs_own_fix_named_after_the_arenas_trim(cli, build, tmp_path):
    prog = build("msgchurn", "-pthread")
    proc = cli("tune", "--budget", "90s", "--export-json", str(tmp_path / "race.json"), "--", str(prog), "2", "5000",
               timeout=300)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    answer = _answer(cli)
    # The race's --export-json: the same answer, each pick's effects as numbers, valid by the schema.
    exported = _valid(json.loads((tmp_path / "race.json").read_text()))["tune"]
    assert exported["picks"] == answer["picks"]
    assert all(isinstance(e[k], float) for p in exported["picks"] for e in p["effects"] for k in ("ratio", "low", "high"))
    glibc = [r for r in _decided_better(answer, "wall_s") if r["label"].startswith("glibc ")]
    assert glibc and any("TOP_PAD" in r["label"] for r in glibc), out
    # The why of the answer names the mechanism: the threads' arenas trimmed with madvise.
    why = next(line for line in out.splitlines() if line.startswith("  why: "))
    assert "arenas trimmed with madvise" in why, why


def test_a_fingerprint_that_fails_only_under_alloclab_is_said_to_be_alloclabs(cli, build):
    require_allocator("jemalloc")
    prog = build("fpfault")
    proc = cli("tune", "--budget", "60s", "--max-runs", "6", "-a", "glibc", "-a", "jemalloc", "--", str(prog), "600",
               timeout=300)
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "alloclab's fingerprint run of" in out and "the failure is alloclab's, not the program's" in out
    assert "Find the bug" not in out and "fails under the default" not in out
    # The rest of the answer stands: the race ran and answered.
    assert "Tune answer (race: experiment" in out


def test_compares_short_answer_says_whose_failure_a_failed_fingerprint_is(cli, build):
    require_allocator("jemalloc")
    prog = build("fpfault")
    proc = cli("compare", "--fingerprint", "--runs", "3", "--warmup", "0", "-a", "glibc", "-a", "jemalloc", "--",
               str(prog), "300", timeout=300)
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"glibc: the fingerprint run failed \(.*SIGABRT.*\); its 3 timed runs did not: a failure of "
                     r"alloclab's interposer, not of the program", out), out
    assert "jemalloc: the fingerprint run failed" not in out
