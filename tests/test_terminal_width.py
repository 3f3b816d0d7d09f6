"""The terminal answer reads whole at 80, 120 and 160 columns: every row's verdict, effect and
mechanism shown in full, no line wider than the console, no blank line inside the answer.

Rendered from the stored experiments of real runs that the golden reports use (tests/fixtures):
the demo suite (8 variants, long variant names, long undecided effects), the PostgreSQL recipe
(long workload names) and the redis recipe (an ineffective baseline)."""

from __future__ import annotations

import io
import re
import shutil

import pytest
from rich.cells import cell_len
from rich.console import Console

from alloclab.report import terminal
from alloclab.report.common import answers
from alloclab.stats.results import build_results
from alloclab.store.db import Store

from test_golden_reports import FIXTURES, STORES

# Its tests share a module fixture: one worker runs them all (make test: --dist loadgroup).
pytestmark = pytest.mark.xdist_group("terminal-width")

WIDTHS = (80, 120, 160)


@pytest.fixture(scope="module", params=sorted(STORES))
def results(request, tmp_path_factory):
    db = tmp_path_factory.mktemp("width") / STORES[request.param]
    shutil.copyfile(FIXTURES / STORES[request.param], db)   # the store may write its WAL beside it
    return build_results(Store(db).load(None))


def _render(r, width: int) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    terminal.render(r, console)
    return console.export_text()


def _flat(text: str) -> str:
    return " ".join(text.split())


def _answer_block(text: str) -> list[str]:
    """The answer's lines: from its title to the first blank line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Answer ("))
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


@pytest.mark.parametrize("width", WIDTHS)
def test_no_line_is_wider_than_the_console(results, width):
    text = _render(results, width)
    too_wide = [line for line in text.splitlines() if cell_len(line) > width]
    assert not too_wide, f"{len(too_wide)} lines wider than {width}: {too_wide[:3]}"


@pytest.mark.parametrize("width", WIDTHS)
def test_every_answer_shows_its_verdict_effect_and_mechanism(results, width):
    rows = answers(results.analysis)
    assert rows and any(x.mechanism for x in rows)   # the fixture has something to show
    # The whole answer lies before the first blank line: a row never continues after one.
    block = _flat("\n".join(_answer_block(_render(results, width))))
    at = 0
    for x in rows:
        # In the row's order: its verdict, its effect (the whole text; the column may show its
        # short form first), then its mechanism, each whole once wrapping is undone.
        wanted = [x.verdict, x.text] + ([", ".join(x.mechanism)] if x.mechanism else [])
        for piece in wanted:
            found = block.find(_flat(piece), at)
            assert found >= 0, f"{width} columns: {piece!r} of {x.workload} / {x.variant} not shown whole " \
                               f"after position {at} of the answer"
            at = found + len(_flat(piece))


@pytest.mark.parametrize("width", WIDTHS)
def test_verdict_and_short_effect_share_the_row_line(results, width):
    # The verdict and the effect's column are never wrapped: both stand on the row's first line.
    lines = _answer_block(_render(results, width))
    for x in answers(results.analysis):
        effect = terminal.short_effect(x.text)
        assert any(re.search(rf"\b{x.verdict}\s+{re.escape(effect)}", line) for line in lines), \
            f"{width} columns: {x.verdict} {effect!r} not on one line"


def test_one_long_effect_does_not_widen_the_effect_column(results):
    # The column holds the short form (change and interval); a long sentence goes under its row.
    lines = _answer_block(_render(results, 160))
    header = lines[1]   # a row of the table, padded to its width
    assert header.rstrip().endswith("effect [interval]")
    effect_width = cell_len(header) - header.index("effect [interval]")
    longest = max(len(terminal.short_effect(x.text)) for x in answers(results.analysis))
    assert effect_width <= max(longest, len("effect [interval]"))
    assert longest <= terminal.EFFECT_CAP


@pytest.mark.parametrize("text, short", [
    ("-45.2% [-68.5, -4.5]", "-45.2% [-68.5, -4.5]"),
    ("≈ within ±2% [+0.4, +1.2]", "≈ within ±2% [+0.4, +1.2]"),
    ("? -2.8%, no difference beyond [-10.8, +5.9]; a verdict would need ~639 more runs", "? -2.8% [-10.8, +5.9]"),
    ("? +3.1% [-8.0, +15.2] ~40 more runs", "? +3.1% [-8.0, +15.2]"),
    ("? +8.2% [-1.5, +18.9], stopped by the budget; a verdict would need ~25 more runs", "? +8.2% [-1.5, +18.9]"),
    ("x54.7 [x21.3, x141]", "x54.7 [x21.3, x141]"),
    ("? (n/a)", "? (n/a)"),
])
def test_short_effect(text, short):
    assert terminal.short_effect(text) == short
