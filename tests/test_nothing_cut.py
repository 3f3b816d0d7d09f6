"""Nothing of an answer is cut: a file holds what the renderer writes at unlimited width (a mail or a
ticket quoting `-o answer.txt` lost "...where glibc…" at 160 columns), and a reader at 80 columns sees
every word a reader at 160 sees, wrapped, where the short answer used to drop the mechanism column,
the peak RSS's interval and the end of the recommendation's sentences.

Rendered from the stored experiments of real runs the golden reports use (tests/fixtures)."""

from __future__ import annotations

import io
import shutil

import pytest
from rich.cells import cell_len
from rich.console import Console

from alloclab.report import FORMATS, Options, export, terminal_brief
from alloclab.stats.results import build_results
from alloclab.store.db import Store

from test_golden_reports import FIXTURES, STORES

pytestmark = pytest.mark.xdist_group("nothing-cut")


@pytest.fixture(scope="module", params=sorted(STORES))
def stored(request, tmp_path_factory):
    db = tmp_path_factory.mktemp("cut") / STORES[request.param]
    shutil.copyfile(FIXTURES / STORES[request.param], db)
    return db, build_results(Store(db).load(None))


def _screen(r, width: int) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None, markup=False)
    terminal_brief.render(r, console)
    return console.export_text()


def _words(text: str) -> list[str]:
    """Its words, less the punctuation a line break or a moved column puts after one."""
    return [w.rstrip(";:,.") for w in text.split()]


def _added_dots(text: str) -> list[str]:
    """Lines with an ellipsis a renderer added: any "…", and "..." other than the fold of findings
    of one kind, which says how many more there are and where they are."""
    return [line for line in text.splitlines()
            if "…" in line or ("..." in line and "more of the same kind" not in line)]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_a_file_holds_every_format_uncut(stored, fmt):
    _, r = stored
    text = export(r, fmt, Options())
    assert not _added_dots(text), _added_dots(text)[:3]


def test_report_to_a_file_is_the_answer_at_unlimited_width(stored, tmp_path):
    from conftest import run_cli
    db, r = stored
    out = tmp_path / "answer.txt"
    p = run_cli(["report", "--db", str(db), "-o", str(out)], env=None)
    assert p.returncode == 0, p.stdout + p.stderr
    text = out.read_text()
    assert not _added_dots(text), _added_dots(text)[:3]
    # Never wrapped to a width: each workload's recommendation, a long sentence, lies on one line.
    lines = text.splitlines()
    rec = r.recommendation
    # (Where no workload has a pick, the line across them says what theirs do, and they are not printed.)
    said = rec.workloads if any(c.pick is not None for c in rec.workloads) else [rec.overall]
    for c in said:
        assert any(c.sentence in line for line in lines), f"wrapped or cut in the file: {c.sentence[:120]}"
    screen = _screen(r, 160)
    missing = set(_words(screen)) - set(_words(text))
    assert not missing, sorted(missing)[:20]


def test_at_80_columns_every_word_of_160_is_shown(stored):
    _, r = stored
    wide, narrow = _screen(r, 160), _screen(r, 80)
    missing = [w for w in _words(wide) if w not in set(_words(narrow))]
    assert not missing, missing[:20]
    too_wide = [line for line in narrow.splitlines() if cell_len(line.rstrip()) > 80]
    assert not too_wide, too_wide[:3]


def test_a_name_too_long_for_its_column_wraps_between_its_words(stored):
    _, r = stored
    labels = [lab for lab in r.analysis.labels if " " in lab]
    if not labels:
        pytest.skip("no variant name of several words in this store")
    narrow = _screen(r, 80)
    for word in {w for lab in labels for w in lab.split()}:
        assert word in narrow.split(), word
