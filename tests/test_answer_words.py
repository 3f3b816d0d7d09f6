"""What the answer says must hold for the run it describes: where the baseline did not run its
allocator (redis links its own jemalloc, so "glibc" ran jemalloc), no line compares "against glibc";
a run that had warm-up blocks is not told to add one; the notation (?, ≈, x, %, waits) is explained
where it appears; counts read as words, not "block(s)".

Rendered from the stored experiments of real runs the golden reports use (tests/fixtures)."""

from __future__ import annotations

import io
import shutil

import pytest
from rich.console import Console

from alloclab.report import FORMATS, Options, export, terminal_brief
from alloclab.stats.results import build_results
from alloclab.store.db import Store

from test_golden_reports import FIXTURES, STORES

pytestmark = pytest.mark.xdist_group("answer-words")


@pytest.fixture(scope="module", params=sorted(STORES))
def stored(request, tmp_path_factory):
    db = tmp_path_factory.mktemp("words") / STORES[request.param]
    shutil.copyfile(FIXTURES / STORES[request.param], db)
    return request.param, build_results(Store(db).load(None))


def _all_outputs(r) -> dict[str, str]:
    out = {fmt: export(r, fmt, Options()) for fmt in FORMATS}
    out["details"] = export(r, "terminal", Options(details=True))
    return out


def test_an_ineffective_baseline_is_never_what_a_line_compares_against(stored):
    name, r = stored
    if name != "redis":
        pytest.skip("only redis' baseline is INEFFECTIVE")
    for fmt, text in _all_outputs(r).items():
        said = [line for line in text.splitlines() if "against glibc" in line]
        assert not said, (fmt, said[:2])
    assert "(each comparison against what ran in glibc's place;" in export(r, "terminal", Options())


def test_a_run_with_warm_up_blocks_is_not_told_to_add_one(stored):
    _, r = stored
    assert r.analysis.experiment.config.warmup >= 1   # all three stores had a warm-up block
    for fmt, text in _all_outputs(r).items():
        assert "--warmup 1" not in text, fmt


def test_the_terminal_answer_explains_its_notation(stored):
    _, r = stored
    console = Console(width=160, record=True, file=io.StringIO(), color_system=None, markup=False)
    terminal_brief.render(r, console)
    text = " ".join(console.export_text().split())
    rows = text.split("full tables:", 1)[1].split("+12.3% [lo, hi]: the change", 1)[0]
    assert "+12.3% [lo, hi]: the change" in text
    for used, sign in (("? ", "? open"), ("≈ ", "≈ equivalent"), (" x", "x5.15: 5.15 times the baseline"),
                       ("waits ", "waits: voluntary context switches"), ("faults ", "faults: page faults")):
        # Each sign the rows use is explained; one they do not use is not.
        assert (sign in text) == (used in rows.replace("[x", " x")), (sign, rows)


def test_counts_are_words_in_every_format(stored):
    """The JSON is left out: it carries the stored records as they were written (older verification
    notes say "in 1 process(es)")."""
    _, r = stored
    for fmt, text in _all_outputs(r).items():
        if fmt == "json":
            continue
        for bad in ("block(s)", "process(es)", "run(s)", "warning(s)", "workload(s)", "variant(s)"):
            assert bad not in text, (fmt, bad)
