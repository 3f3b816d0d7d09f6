"""`alloclab experiments` shows each title whole: wrapped in its column on a narrow terminal, never cut."""

from __future__ import annotations

import io

from rich.console import Console

from alloclab.cli import reports
from alloclab.store.db import Store

# A command as a user writes one, brackets and all, far longer than the 60 characters once kept.
TITLE = ("python3 -c 'x=[bytearray(100000) for _ in range(300)]; keep=x[::2]; del x; "
         "import time; time.sleep(0.2); print(len(keep))' --threads 8 --rounds 40 --tail")


def _listed(tmp_path, width: int) -> str:
    tmp_path.mkdir()
    db = tmp_path / "a.db"
    store = Store(db)
    exp = store.new_experiment("compare", TITLE, {}, {"host": "vm", "kernel": "6.1", "glibc": "2.36"})
    store.finish(exp, "complete")
    out = io.StringIO()
    console = Console(file=out, width=width, markup=False, emoji=False)
    reports.console, saved = console, reports.console
    try:
        reports.experiments(db=db, fmt="terminal", as_json=False)
    finally:
        reports.console = saved
    return out.getvalue()


def test_a_long_title_is_listed_whole_at_any_width(tmp_path):
    for width in (160, 80):
        text = _listed(tmp_path / str(width), width)
        assert "..." not in text and "…" not in text, text
        # Read down the title's column (the fifth): its pieces, a line each, hold the title in order,
        # every character of it, whether the wrapping broke it at a space or inside a word.
        rows = [line.split("│") for line in text.splitlines() if line.startswith("│")]
        column = "".join(cells[5].replace(" ", "") for cells in rows)
        assert column == TITLE.replace(" ", ""), (width, column)
        assert width == 80 or len(rows) <= 3, text   # at 160 columns, a few lines of full width
