"""The CLI follows its neighbours: `--version` names alloclab's, glibc's and each installed
allocator's; help shows every text as written (no markup eaten), each default one way, and a --db
that says what the command does with it; -f json works on every command that lists or reports;
hyperfine's short flags, which mean other things there, are refused with the long option named.
Through the real CLI (conftest.run_cli)."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from alloclab import __version__
from alloclab.catalog import allocators as cat
from conftest import run_cli
from test_golden_reports import FIXTURES, STORES

pytestmark = pytest.mark.xdist_group("cli-neighbours")

COMMANDS = ("tune", "compare", "run", "report", "suite", "profile", "diff", "experiments", "sweep", "recipes",
            "allocators")
READING = ("report", "experiments", "diff", "sweep")   # open --db, never create it


def alloclab(*argv, cwd=None, ok=True):
    p = run_cli(list(argv), cwd=cwd, timeout=120, env={**__import__("os").environ, "COLUMNS": "160"})
    if ok:
        assert p.returncode == 0, p.stdout + p.stderr
    return p


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    d = tmp_path_factory.mktemp("neighbours")
    shutil.copyfile(FIXTURES / STORES["demo"], d / "demo.db")
    shutil.copyfile(FIXTURES / STORES["redis"], d / "redis.db")   # small: what a diff of two needs
    shutil.copyfile(FIXTURES / STORES["redis"], d / "redis-b.db")   # B in a store of its own: not "identical"
    return d


def test_version_names_alloclab_glibc_and_each_installed_allocator():
    lines = alloclab("--version").stdout.splitlines()
    assert lines[0].split() == ["alloclab", __version__]
    assert lines[1].split() == ["glibc", cat.glibc_version()]
    for a in cat.load_catalog().allocators.values():
        path = cat.locate(a)
        if a.is_system or path is None:
            continue
        assert [a.name, cat.version_of(a, path), str(path)] in [line.split() for line in lines], a.name


@pytest.fixture(scope="module")
def helps():
    return {c: alloclab(*([c] if c else []), "--help").stdout for c in ("",) + COMMANDS}


def test_help_shows_every_text_as_written_and_each_default_one_way(helps):
    for command, text in helps.items():
        flat = " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())
        assert "[]" not in flat and "\\[" not in flat, (command, flat)
        assert not re.search(r"\(default|Default:|; default", flat), (command, flat)
    # The texts markup used to eat, whole:
    assert "Run only this [[client]] (or [[command]]) of the file" in " ".join(helps["run"].split())
    assert "A file's [[client]] (or [[command]]) to tune on" in " ".join(helps["tune"].split())
    assert "NAME[:VAR=VALUE,...][@LABEL]" in helps["compare"]
    # A default in words shows as a value does:
    assert "[default: the latest]" in " ".join(helps["report"].split())
    assert "[default: 2%]" in helps["compare"] and "[default: all of them]" in " ".join(helps["run"].split())


def test_db_help_says_what_each_command_does_with_it(helps, tmp_path):
    for command in COMMANDS:
        flat = " ".join(helps[command].split())
        if "--db" not in flat:
            continue
        assert ("never created" in flat) == (command in READING), command
        assert ("created if missing" in flat) == (command not in READING), command
    for argv in (["report"], ["experiments"], ["sweep"], ["diff", "1", "2"]):
        p = alloclab(*argv, "--db", str(tmp_path / "none.db"), ok=False)
        assert p.returncode != 0 and "No database at" in p.stderr, argv
        assert not (tmp_path / "none.db").exists(), argv


def test_json_is_dash_f_json_on_every_command_that_lists_or_reports(demo):
    listed = json.loads(alloclab("experiments", "--db", "demo.db", "-f", "json", cwd=demo).stdout)
    assert [e["id"] for e in listed] == [1] and listed[0]["kind"] == "suite"
    assert json.loads(alloclab("experiments", "--db", "demo.db", "--json", cwd=demo).stdout) == listed
    catalog = json.loads(alloclab("allocators", "-f", "json").stdout)
    assert {a["name"] for a in catalog} == set(cat.load_catalog().allocators)
    assert next(a for a in catalog if a["name"] == "glibc")["version"] == cat.glibc_version()
    recipes = json.loads(alloclab("recipes", "-f", "json").stdout)
    assert {r["recipe"] for r in recipes} >= {"recipe:redis", "recipe:postgres-partitions"}
    assert all(r["measures"] and r["needs"] for r in recipes)
    assert json.loads(alloclab("report", "--db", "demo.db", "-f", "json", cwd=demo).stdout)["schema"] == 3
    assert json.loads(alloclab("diff", "--db", "redis.db", "1", "1", "-f", "json", cwd=demo).stdout)["a"] == 1
    p = alloclab("experiments", "--db", "demo.db", "-f", "yaml", cwd=demo, ok=False)
    assert p.returncode != 0 and "choose terminal or json" in p.stderr


def test_recipes_list_what_each_runs_measures_and_needs_in_short(demo):
    text = alloclab("recipes").stdout
    assert len(text.splitlines()) <= 30
    for name in ("redis", "postgres-partitions", "qemu-img"):
        assert f"recipe:{name}" in text
    assert "measures: benchmark: set_rps (requests/s); memory: fill_rps" in " ".join(text.split())
    assert "needs: redis-server, redis-tools" in text
    assert not re.search(r"20\d\d-\d\d-\d\d", text) and "docs/results/recipes.md" in text


def test_diffs_legend_promises_what_its_cells_show(demo):
    text = alloclab("diff", "--db", "redis.db", "--db-b", "redis-b.db", "1", "1", cwd=demo).stdout
    table, legend = text.split("better or worse: the interval")
    assert "p=" not in table and "p<" not in table   # a line: the change, its interval, the verdict
    assert "Every cell, with its p value: -f md or -f json" in " ".join(legend.split())
    assert "p=" in alloclab("diff", "--db", "redis.db", "--db-b", "redis-b.db", "1", "1", "-f", "md", cwd=demo).stdout


@pytest.mark.parametrize("argv, flag, long", [
    (["compare", "-n", "3", "--", "true"], "-n", "--runs"),
    (["compare", "-m", "ops=ops: (\\d+)", "--", "true"], "-m", "--metric"),
    (["compare", "-p", "n=1,2", "--", "true", "{n}"], "-p", "--param"),
    (["suite", "-w", "simple"], "-w", "--workload"),
    (["run", "recipe:redis", "-p", "requests=10"], "-p", "--param"),
    (["tune", "-m", "ops=ops: (\\d+)", "--", "true"], "-m", "--metric"),
    (["profile", "-n", "2", "--", "true"], "-n", "--runs"),
])
def test_hyperfines_short_flags_are_refused_with_the_long_option_named(helps, tmp_path, argv, flag, long):
    p = alloclab(*argv[:1], "--db", str(tmp_path / "x.db"), *argv[1:], cwd=tmp_path, ok=False)
    assert p.returncode != 0 and f"{flag} is no longer a short flag of alloclab" in p.stderr, p.stderr
    assert f"Write {long} instead" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "x.db").exists()   # refused before anything ran
    # ... and no longer offered beside the long option
    assert not re.search(rf"--[\w-]+\s+{flag}\s", helps[argv[0]])


def test_the_allocators_table_names_a_bundled_copy_and_cuts_no_path():
    out = alloclab("allocators").stdout
    assert "…" not in out, out
    assert "(built into the program: a copy of" in out and "mimalloc, no preload)" in out, out
