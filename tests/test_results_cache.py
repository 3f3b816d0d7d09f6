"""The results cache (stats/results_cache.py) and the HTML page's chart cache (report/pen.py):
a report of an experiment analysed before renders the same bytes as the analysis made afresh, in
every format, without analysing or drawing again; any change to the experiment is another key.
On the stored experiments of tests/fixtures (real runs)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from alloclab.report import FORMATS, Options, export
from alloclab.stats import results as results_module
from alloclab.stats import results_cache
from alloclab.store.db import Store
from alloclab.workloads import builtin

FIXTURES = Path(__file__).parent / "fixtures"
STORES = ("demo-suite-trimmed.db", "postgres-recipe-trimmed.db", "redis-recipe-trimmed.db")


def _now_blanked(text: str) -> str:
    return re.sub(r"\d{4}-\d\d-\d\dT[0-9:.+Z-]+", "<now>", text)


def _renders(r, details: bool, formats=FORMATS) -> dict[str, str]:
    return {fmt: _now_blanked(export(r, fmt, Options(details=details))) for fmt in sorted(formats)}


# The demo's detailed HTML page draws about 10 s of charts on 2 cores; the recipes' detailed pages
# draw the same kinds of chart, cached and not, so the demo's is left to them.
def _formats(name: str, details: bool):
    return [f for f in FORMATS if not (details and f == "html" and name.startswith("demo"))]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ALLOCLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ALLOCLAB_NO_RESULTS_CACHE", raising=False)
    monkeypatch.setenv("COLUMNS", "160")
    return tmp_path / "cache"


def _copy(name: str, tmp_path: Path) -> Path:
    db = tmp_path / name
    shutil.copyfile(FIXTURES / name, db)
    return db


@pytest.mark.parametrize("name", STORES)
def test_a_cached_report_is_the_same_bytes_without_analysing_or_drawing(name, tmp_path, cache_dir, monkeypatch):
    db = _copy(name, tmp_path)
    first = results_cache.results(Store(db).load(None))
    before = {details: _renders(first, details, _formats(name, details)) for details in (False, True)}
    results_cache.keep(first)
    assert list((cache_dir / "results").glob("*.pickle")) and list((cache_dir / "charts").glob("*.pickle"))

    def refuse(*args, **kwargs):
        raise AssertionError("analysed or drew again")
    monkeypatch.setattr(results_module, "build_results", refuse)
    monkeypatch.setattr(results_cache, "build_results", refuse)
    from alloclab.report import charts   # here: it imports matplotlib, which every collection would pay
    monkeypatch.setattr(charts, "draw_all", refuse)
    again = results_cache.results(Store(db).load(None))     # a fresh load, as the next command's
    assert again is not first and again.key == first.key
    assert {details: _renders(again, details, _formats(name, details)) for details in (False, True)} == before


def test_any_change_to_the_experiment_is_another_key(tmp_path, cache_dir):
    db = _copy(STORES[0], tmp_path)
    store = Store(db)
    e = store.load(None)
    r = results_cache.results(e)
    results_cache.keep(r)
    store.finish(e.id, "interrupted")      # one field of the experiment's row
    changed = results_cache.results(Store(db).load(None))
    assert changed.key != r.key and changed.experiment.row.status == "interrupted"
    assert results_cache.results(Store(db).load(None), min_effect=0.05).key != changed.key   # another question


def test_a_damaged_entry_is_a_miss(tmp_path, cache_dir):
    db = _copy(STORES[2], tmp_path)
    r = results_cache.results(Store(db).load(None))
    results_cache.keep(r)
    for entry in (cache_dir / "results").glob("*.pickle"):
        entry.write_bytes(b"not a pickle")
    again = results_cache.results(Store(db).load(None))
    assert again.key == r.key and _renders(again, False)["md"] == _renders(r, False)["md"]


def test_report_after_compare_renders_what_compare_kept(tmp_path, cache_dir):
    """End to end: `compare` keeps its Results, and `report` of the experiment shows the same
    answer from them (its analysis is not run: the entry's file is the one read)."""
    db = tmp_path / "c.db"
    program = str(builtin.binary(builtin.get("simple")))
    compare = subprocess.run([sys.executable, "-m", "alloclab.cli", "compare", "--details", "--db", str(db), "-a", "glibc",
                              "-a", "jemalloc", "--runs", "6", "--", program, "--iters=2000"],
                             capture_output=True, text=True, timeout=240)
    assert compare.returncode == 0, compare.stdout + compare.stderr
    entries = list((cache_dir / "results").glob("*.pickle"))
    assert len(entries) == 1
    # -X importtime lists every module imported: the analysis would import scipy.special.
    report = subprocess.run([sys.executable, "-X", "importtime", "-m", "alloclab.cli", "report", "--details", "--db", str(db)],
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    assert "scipy" not in report.stderr
    assert list((cache_dir / "results").glob("*.pickle")) == entries
    start = compare.stdout.index("Answer")
    assert report.stdout[report.stdout.index("Answer"):] == compare.stdout[start:start + len(report.stdout)
                                                                          - report.stdout.index("Answer")]


def test_the_cache_keeps_the_most_recently_used(cache_dir, monkeypatch):
    from alloclab import cache
    monkeypatch.setattr(cache, "KEEP", 3)
    for k in range(5):
        cache.write("t", f"k{k}", b"x" * 10)
        entry = cache_dir / "t" / f"k{k}.pickle"
        os.utime(entry, ns=(k * 10**9, k * 10**9))   # apart in time, whatever the clock's grain
    assert cache.read("t", "k2") == b"x" * 10        # used now: the newest
    assert (cache_dir / "t" / "k2.pickle").stat().st_mtime_ns > 4 * 10**9
    cache.write("t", "k5", b"y")                    # kept, with the 2 most recently used
    assert sorted(p.stem for p in (cache_dir / "t").glob("*.pickle")) == ["k2", "k4", "k5"]
    # Apart in time again (a coarse clock can give the read and the write the same tick).
    os.utime(cache_dir / "t" / "k2.pickle", ns=(10 * 10**9, 10 * 10**9))
    os.utime(cache_dir / "t" / "k5.pickle", ns=(11 * 10**9, 11 * 10**9))
    monkeypatch.setattr(cache, "KEEP_BYTES", 15)
    cache.write("t", "k6", b"z" * 10)
    assert sorted(p.stem for p in (cache_dir / "t").glob("*.pickle")) == ["k5", "k6"]   # 11 bytes, not 21
