"""tune's memory rules end to end: on each program built for a mechanism (tests/programs), tune
reads the allocator's books, proposes the setting the mechanism names and decides it better on the
metric where it shows (the program's anonymous RSS at its end); pinned free memory is said to be
beyond any setting of glibc's and the allocators race; a control without the mechanism gets no
memory proposal. Real programs, real allocators."""

from __future__ import annotations

import json

import pytest

from conftest import require_allocator

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _tune(cli, store_of, program: str, *args: str, allocators=("glibc",)):
    flags = [x for a in allocators for x in ("-a", a)]
    proc = cli("tune", "--budget", "90s", "--screen", "never", *flags, "--", program, *args, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    race = store_of(cli.db).load(2)
    return proc.stdout, race


def _memory_candidates(race) -> dict[str, dict]:
    return {c.spec: c for c in race.config.tune.candidates if c.expect == "less memory"}


def less_at_its_end(answer: dict) -> list[str]:
    """The candidates the JSON answer says were decided to hold less at the program's end: picked, or
    decided better too."""
    rows = answer["picks"] + [o for o in answer["others"] if o["outcome"] == "also better"]
    return [r["label"] for r in rows if any(e["metric"] == "end_anon_mb" and e["verdict"] == "better"
                                            and e["ratio"] < 1 for e in r["effects"])]


@pytest.mark.parametrize("program, args, rule, setting", [
    ("trimhold", ["12"], "glibc-trim-raised", "MALLOC_TRIM_THRESHOLD_="),
    ("mmapheap", ["4"], "glibc-mmap-raised", "MALLOC_MMAP_THRESHOLD_="),
    # 16-17 MiB buffers under a threshold raised to 31 MiB: their size class reaches past it.
    ("mmapheap", ["16", "8"], "glibc-mmap-raised", "MALLOC_MMAP_THRESHOLD_="),
    ("arenahold", ["12"], "glibc-arena-free", "MALLOC_ARENA_MAX="),
])
def test_tune_decides_the_glibc_setting_its_mechanism_names(cli, build, store_of, program, args, rule, setting):
    out, race = _tune(cli, store_of, str(build(program, "-lpthread")), *args)
    mem = _memory_candidates(race)
    spec = next(s for s in mem if setting in s)
    assert mem[spec].metric == "end_anon_mb", mem[spec]
    assert rule in out.split("rules fired:")[1].split(";")[0], out
    # The answer names the setting, decided better at the program's end, with the books' reading.
    words = setting.rstrip("_=").replace("MALLOC_", "")
    # (read from the JSON report: the terminal wraps a long line wherever the path makes it end)
    answer = json.loads(cli("report", "-f", "json", check=True).stdout)["tune"]
    assert any(words in label for label in less_at_its_end(answer)), out
    assert "where the memory goes at its end" in out


def test_pinned_free_memory_is_beyond_glibcs_settings_and_the_allocators_race(cli, build, store_of):
    require_allocator("jemalloc")
    out, race = _tune(cli, store_of, str(build("pinned")), "12", allocators=("glibc", "jemalloc"))
    assert "no setting of glibc's gives it back (malloc_trim(0), called by the program, does)" in " ".join(out.split())
    mem = _memory_candidates(race)
    assert "jemalloc" in mem and mem["jemalloc"].rule == "glibc-free-pinned"
    assert any("dirty_decay_ms=0" in s for s in mem), mem
    # jemalloc returns the pages once its decay is 0: decided better at the end
    answer = json.loads(cli("report", "-f", "json", check=True).stdout)["tune"]
    assert any("dirty_decay_ms=0" in label for label in less_at_its_end(answer)), out
    assert not any(s.startswith("glibc:") for s in mem), mem   # no glibc setting is proposed for it


@pytest.mark.parametrize("program, args", [("trimhold", ["12", "3", "1"]), ("pinned", ["12", "1"])])
def test_a_control_without_the_mechanism_gets_no_memory_proposal(cli, build, store_of, program, args):
    require_allocator("jemalloc")
    proc = cli("tune", "--budget", "60s", "--screen", "never", "-a", "glibc", "-a", "jemalloc", "--",
               str(build(program)), *args, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fired = proc.stdout.split("rules fired:")[1].split(";")[0]
    assert not any(r in fired for r in ("trim-raised", "mmap-raised", "arena-free", "pinned", "dirty-rest")), fired
