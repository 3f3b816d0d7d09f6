"""The README and the reference pages stay true: the README is short, starts with the two set-up
commands and then with tune, every `alloclab` command in it and in docs/*.md parses, and the
README's quick ones (recipes, reports, exports, diff) run as written on a small program."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import run_cli

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))   # the reference pages; docs/results/ holds dated figures

YOURPROG = r"""
#include <stdio.h>
#include <stdlib.h>
int main(void) {
    void *p[512];
    unsigned long n = 0;
    for (int r = 0; r < 400; r++) {
        for (int i = 0; i < 512; i++) p[i] = malloc(16 + (i * 37) % 2000);
        for (int i = 0; i < 512; i++) free(p[i]);
        n += 512;
    }
    printf("ops/s: %lu\n", n * 10);
    return 0;
}
"""


def code_blocks(text: str, languages=("sh", "bash", "console", "")) -> list[str]:
    blocks, lines, language = [], None, None
    for line in text.splitlines():
        if line.startswith("```"):
            if lines is None:
                lines, language = [], line[3:].strip()
            else:
                if language in languages:
                    blocks.append("\n".join(lines) + "\n")
                lines = None
        elif lines is not None:
            lines.append(line)
    return blocks


def commands(text: str) -> list[list[str]]:
    """The `alloclab` command lines of a page's shell blocks, continuations joined, comments cut;
    a synopsis (`[-a VARIANT]...`) is not a command."""
    out = []
    for block in code_blocks(text):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            if line.startswith("alloclab "):
                argv = shlex.split(line, comments=True)
                if not any(a.startswith("[") for a in argv):
                    out.append(argv)
    return out


def _run(argv: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return run_cli(argv[1:], cwd=cwd, timeout=timeout, env={**os.environ, "COLUMNS": "160"})


def test_the_readme_is_short_and_starts_with_setup_then_tune():
    text = README.read_text()
    assert len(text) <= 10_000, f"README.md is {len(text)} characters; keep it within 10,000"
    blocks = code_blocks(text, ("sh",))
    assert blocks[0].split() == ["make", "demo", "make", "test"], blocks[0]
    assert blocks[1].split()[:2] == ["alloclab", "tune"], "the first program example is not tune"


def test_the_readmes_links_point_at_files():
    for target in re.findall(r"\]\(([^)#]+)\)", README.read_text()):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), f"README links {target}, which does not exist"


@pytest.fixture(scope="module")
def parse():
    """argv -> (exit code, output) of the real CLI's parser, in this process: the commands and their
    options are alloclab's own (`alloclab --help` in a process of its own: test_cli_start.py)."""
    from typer.testing import CliRunner

    from alloclab.cli.app import app
    from alloclab.cli.core import _register_commands

    _register_commands()
    runner = CliRunner()

    def _parse(argv: list[str]):
        r = runner.invoke(app, argv[1:], env={"COLUMNS": "160"})
        return r.exit_code, r.output
    return _parse


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: p.name)
def test_every_documented_command_parses(page, parse):
    # --help after the options (before `--`): click parses every option first, so a misspelled or
    # removed option fails here while nothing runs.
    found = commands(page.read_text())
    for argv in found:
        at = argv.index("--") if "--" in argv else len(argv)
        code, out = parse([*argv[:at], "--help", *argv[at:]])
        assert code == 0, f"{page.name}: `{shlex.join(argv)}` does not parse:\n{out}"
    if page == README:
        assert len(found) >= 10


def test_reference_pages_explain_rather_than_narrate():
    narration = re.compile(r"\b[Ii]ssue #?\d+|\b(?:this|last) session\b|\bthe seed's\b|\btonight\b|\blast stop\b"
                           r"|\bNOT met\b|\bTODO\b|\bFIXME\b|\b20\d\d-\d\d-\d\d\b", re.I)
    for page in DOCS:
        hits = [m.group(0) for m in narration.finditer(page.read_text())]
        assert not hits, f"{page.name} narrates ({hits}); dated figures go in docs/results/"


@pytest.mark.e2e
def test_the_readmes_quick_commands_run_as_written(tmp_path):
    """recipes, the exports, diff of two exported experiments, report and experiments, as the
    README gives them, on a small program; a measuring command gets `--runs 3` so that it is quick."""
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        pytest.skip("no C compiler")
    (tmp_path / "yourprog.c").write_text(YOURPROG)
    subprocess.run([cc, "-O2", "-o", str(tmp_path / "yourprog"), str(tmp_path / "yourprog.c")], check=True)
    section = README.read_text().split("## Reports")[1].split("\n## ")[0]
    quick = [a for a in commands(README.read_text()) if a[1] == "recipes"] + commands(section)
    assert [a[1] for a in quick] == ["recipes", "compare", "report", "compare", "diff", "experiments"], quick
    for argv in quick:
        if argv[1] == "compare":
            at = argv.index("--")
            argv = [*argv[:at], "--runs", "3", *argv[at:]]
        # diff reads two exported experiments: the one before is "another day's"
        for k in range(2 if "--export-json" in argv else 1):
            if k == 1:
                (tmp_path / "a.json").rename(tmp_path / "b.json")
            p = _run(argv, tmp_path)
            assert p.returncode == 0, f"`{shlex.join(argv)}`:\n{p.stdout}{p.stderr}"
            if argv[1] == "compare":
                assert "Answer" in p.stdout and "Recommendation" in p.stdout
        if argv[1] == "diff":
            assert "yourprog" in p.stdout, p.stdout
    for name in ("report.html", "mail.md", "a.json", "b.json", "a.md", "a.csv"):
        assert (tmp_path / name).stat().st_size > 200, name
    assert "<svg" in (tmp_path / "report.html").read_text()
    assert (tmp_path / "mail.md").read_text().startswith("#")
    assert (tmp_path / "a.csv").read_text().splitlines()[0].count(",") >= 3


@pytest.mark.e2e
def test_after_make_demo_the_readmes_report_commands_run_as_written(tmp_path):
    """`make demo` stores its suite where `alloclab report` looks without --db; the README's report
    commands that read the latest experiment (report, experiments) then run as written. The store is
    the stored demo, a real `make demo` run (tests/fixtures), put where the Makefile's command puts it."""
    demo = subprocess.run(["make", "-n", "-o", "setup", "--no-print-directory", "demo"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout.split()
    from alloclab.store.db import DEFAULT_DB
    assert demo[1:4] == ["suite", "--db", DEFAULT_DB], demo   # the store a bare `alloclab report` opens
    shutil.copyfile(ROOT / "tests" / "fixtures" / "demo-suite-trimmed.db", tmp_path / DEFAULT_DB)
    section = README.read_text().split("## Reports")[1].split("\n## ")[0]
    reading = [a for a in commands(section) if a[1] in ("report", "experiments")]
    assert reading and "--db" not in [x for a in reading for x in a]
    for argv in reading:
        p = _run(argv, tmp_path)
        assert p.returncode == 0, f"`{shlex.join(argv)}`:\n{p.stdout}{p.stderr}"
    assert (tmp_path / "mail.md").read_text().startswith("## alloclab: suite: simple, oversized")
