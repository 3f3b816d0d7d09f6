"""The CLI's conventions, alike in every command: a format is named as the user would (`-f markdown`
as `--export-markdown` and `.markdown` do), each command's -f lists its choices, a misspelt allocator
or recipe gets the name it most likely meant (as a misspelt setting already does), and the options
whose default is not one value (--max-runs, --timeout) say it."""

from __future__ import annotations

import shutil

import pytest

from conftest import run_cli
from test_golden_reports import FIXTURES



def _help(command: str) -> str:
    import os
    p = run_cli([command, "--help"], env={**os.environ, "COLUMNS": "200"})
    assert p.returncode == 0, p.stderr
    return " ".join(p.stdout.replace("│", " ").split())


@pytest.fixture
def demo(tmp_path):
    db = tmp_path / "demo.db"
    shutil.copyfile(FIXTURES / "demo-suite-trimmed.db", db)
    return db


def test_markdown_is_a_name_of_md(demo, tmp_path):
    md = run_cli(["report", "--db", str(demo), "-f", "md"])
    markdown = run_cli(["report", "--db", str(demo), "-f", "markdown"])
    assert md.returncode == 0 and markdown.returncode == 0, markdown.stderr
    assert markdown.stdout == md.stdout and markdown.stdout.startswith("## ")


def test_diff_takes_markdown_too(demo):
    p = run_cli(["diff", "1", "1", "--db", str(demo), "-f", "markdown"])
    assert "Unknown diff format" not in p.stdout + p.stderr


@pytest.mark.parametrize("command, choices", [
    ("compare", "terminal, md (markdown), html, json, csv"), ("suite", "terminal, md (markdown), html, json, csv"),
    ("run", "terminal, md (markdown), html, json, csv"), ("tune", "terminal, md (markdown), html, json, csv"),
    ("report", "terminal, md (markdown), html, json, csv"), ("diff", "terminal, md (markdown), json"),
    ("inspect", "terminal, json or html"), ("experiments", "terminal, or json"), ("allocators", "terminal, or json"),
])
def test_every_format_option_lists_its_choices(command, choices):
    text = _help(command)
    at = text.find("--format -f")
    assert at >= 0, text[:300]
    assert choices in text[at:at + 200], text[at:at + 200]


@pytest.mark.parametrize("command, shown", [
    ("compare", ["--max-runs", "[default: 300]", "--timeout", "[default: none: a run takes as long as it takes]"]),
    ("suite", ["--max-runs", "[default: 80]", "--timeout", "[default: 120.0]"]),
    ("run", ["--max-runs", "[default: the file's, else 30]", "--timeout", "[default: none"]),
])
def test_max_runs_and_timeout_say_their_defaults(command, shown):
    text = _help(command)
    for option, default in zip(shown[::2], shown[1::2]):
        at = text.find(option + " ")
        assert at >= 0 and default in text[at:at + 250], (option, text[at:at + 250])


def test_a_misspelt_allocator_is_told_the_one_it_meant(tmp_path):
    p = run_cli(["compare", "--db", str(tmp_path / "x.db"), "-a", "jemaloc", "--", "true"])
    assert p.returncode != 0
    assert "Unknown allocator 'jemaloc'. Did you mean 'jemalloc'?" in p.stderr, p.stderr


def test_a_misspelt_recipe_is_told_the_one_it_meant(tmp_path):
    p = run_cli(["run", "--db", str(tmp_path / "x.db"), "recipe:redsi"])
    assert p.returncode != 0
    assert "No recipe named 'redsi'. Did you mean recipe:redis?" in p.stderr, p.stderr


def test_a_name_far_from_every_allocator_gets_no_guess(tmp_path):
    p = run_cli(["compare", "--db", str(tmp_path / "x.db"), "-a", "zzzz", "--", "true"])
    assert "Unknown allocator 'zzzz'. Known allocators" in p.stderr, p.stderr
