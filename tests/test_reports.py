"""Reports in every format, history (experiments, diff), on real experiments run by the real CLI
(real program, real allocators), plus formatting checks on synthetic stores."""

from __future__ import annotations

import csv
import io
import json
import os
import platform
import re
import shlex
import socket
import subprocess
from pathlib import Path

import pytest

from alloclab.catalog import allocators as cat
from alloclab.stats import estimates as stats
from alloclab.stats.analysis import analyze
from alloclab.stats.results import build_results
from alloclab.errors import AlloclabError
from alloclab.report import Options, export, format_for, write_report
from alloclab.report.common import full_delta
from alloclab.report.terminal import short_effect
from alloclab.stats.diff import diff_experiments
from alloclab.store.db import Store
from conftest import require_allocator, run_cli, still_left
from test_recommend import JEMALLOC, THREE, synthetic, variant

# Its tests share a module fixture: one worker runs them all (make test: --dist loadgroup).
pytestmark = pytest.mark.xdist_group("reports")

OPS = "ops=ops/s: (\\d+)"
# glibc without its per-thread cache is about 5x slower than jemalloc on churn. At 1,500 rounds a
# run of jemalloc's counts about 60 ms: a difference significant with 10 runs whatever else the
# machine is doing (at 6, a clean clone's suite once read x3.4 [-14%, +1258%]: one block of six with
# jemalloc's run preempted leaves two degrees of freedom). (glibc forced to mmap every allocation is 100x slower, so jemalloc's runs
# were then 3 ms long, and a neighbour's time slice in one of them left the ops undecided.)
SLOW_BASELINE = "glibc:glibc.malloc.tcache_count=0@glibc-notcache"
ROUNDS = ["1500", "2"]


def alloclab(db, *args, check=True, timeout=120) -> subprocess.CompletedProcess:
    p = run_cli([args[0], "--db", str(db), *args[1:]], timeout=timeout)
    if check:
        assert p.returncode == 0, p.stdout + p.stderr
    return p


@pytest.fixture(scope="module")
def real(build, tmp_path_factory):
    """Two real experiments of the same command: compare --report-file writes the first report."""
    require_allocator("jemalloc")
    prog = build("churn")
    d = tmp_path_factory.mktemp("reports")
    db = d / "r.db"
    first = alloclab(db, "compare", "--runs", "10", "-a", SLOW_BASELINE, "-a", "jemalloc", "--metric", OPS,
                     "--report-file", str(d / "compare.md"), "--", str(prog), *ROUNDS)
    # Another day, the same command: only needs to exist for `diff`, so kept short.
    second = alloclab(db, "compare", "--runs", "2", "--warmup", "0", "--no-verify", "-a", SLOW_BASELINE,
                      "-a", "jemalloc", "--metric", OPS, "--", str(prog), *ROUNDS)
    return {"db": db, "dir": d, "prog": prog, "first": first, "second": second}


# --- end to end ---------------------------------------------------------------------------------

@pytest.mark.e2e
def test_compare_report_file_is_markdown_for_the_mail(real):
    short = (real["dir"] / "compare.md").read_text()
    e = Store(real["db"]).load(1)
    jemalloc = cat.load_catalog().allocators["jemalloc"]
    version = cat.version_of(jemalloc, cat.locate(jemalloc))
    a = analyze(e)
    ops = a.workloads[0].row("ops")
    assert ops.cells[1].comparison.verdict == "better"
    # The mail (the short answer): the host and versions as measured here, in a paragraph wrapped
    # between words, and the workload's row of jemalloc with the analysis' verdict and effect.
    words = " ".join(short.split())
    assert f"on {socket.gethostname()}: " in words and f"kernel {platform.release()};" in words
    assert f"glibc {cat.glibc_version()}, jemalloc {version};" in words
    assert "10 measured runs per variant after 1 warm-up block; randomized interleaved blocks (seed 1)" in words
    row = next(x for x in short.splitlines() if x.startswith("| **jemalloc** (use) "))
    assert f"| **better** | {short_effect(stats.format_comparison(ops.cells[1].comparison))} |" in " ".join(row.split())
    assert "Every variant verified" in short
    # The full tables (--details): every figure, the host lines, verification per variant.
    md = alloclab(real["db"], "report", "1", "-f", "md", "--details").stdout
    assert f"host:       {socket.gethostname()}: " in md
    assert f"kernel:     {platform.release()} " in md
    assert f"glibc:      {cat.glibc_version()}" in md
    assert f"jemalloc: jemalloc {version}, {cat.locate(jemalloc)}" in md
    line = next(x for x in md.splitlines() if x.startswith("| ops"))
    assert f"({full_delta(ops.cells[1].comparison)} **better**)" in line
    assert "| allocator " in md and "verified" in md
    assert "- jemalloc: verified. malloc and free bound to libjemalloc" in md
    # Terminal table on stdout, report in the file.
    assert "Answer (each comparison against" in real["first"].stdout and "Report (md) written to" in real["first"].stdout


@pytest.mark.e2e
def test_recommendation_names_the_winner_and_its_lines_work(real):
    md = (real["dir"] / "compare.md").read_text()
    assert "**Use jemalloc for " in md
    lib = str(cat.locate(cat.load_catalog().allocators["jemalloc"]))
    env_line = md.split("```sh\n")[1].split("\n```")[0]
    assert env_line == f"env -u GLIBC_TUNABLES LD_PRELOAD={lib} {real['prog']} {' '.join(ROUNDS)}"
    # Run it for real: churn exits 3 when LD_PRELOAD holds the name it is given, so the line
    # provably puts jemalloc under the program.
    p = subprocess.run(shlex.split(env_line) + ["libjemalloc"], capture_output=True, text=True, timeout=30,
                       env={"PATH": "/usr/bin:/bin", "GLIBC_TUNABLES": "glibc.malloc.tcache_count=0"})
    assert p.returncode == 3 and "refusing to run under libjemalloc" in p.stderr
    assert "At build time: link with -ljemalloc" in md
    # The systemd drop-in: in the full report (the mail gives the line to run).
    md = alloclab(real["db"], "report", "1", "-f", "md", "--details").stdout
    assert f'Environment="LD_PRELOAD={lib}"' in md and "UnsetEnvironment=GLIBC_TUNABLES" in md


@pytest.mark.e2e
def test_every_format_of_a_real_experiment(real):
    db, d = real["db"], real["dir"]
    e = Store(db).load(1)
    # Through the command once (two formats in one call), the others on the same analysis here.
    p = alloclab(db, "report", "1", "-f", "csv", "-o", str(d / "r.csv"), "--export-json", str(d / "r.json"),
                 "--max-rss-increase=-90%")
    assert f"Report written to {d / 'r.csv'}" in p.stderr and f"Report written to {d / 'r.json'}" in p.stderr
    r = build_results(e)
    rows = list(csv.DictReader(io.StringIO((d / "r.csv").read_text())))
    assert len(rows) == len(e.runs)
    for row, run in zip(rows, e.runs):
        assert row["status"] == run.status and int(row["block"]) == run.block
        assert float(row["peak_rss_mb"]) == run.metrics["peak_rss_mb"]
        if run.status == "ok":
            assert float(row["ops"]) == run.metrics["ops"]
    raw = json.loads((d / "r.json").read_text())
    assert raw["schema"] == 3 and raw["experiment"]["id"] == 1
    assert len(raw["runs"]) == len(e.runs) and raw["runs"][0]["rss_series"] == json.loads(e.runs[0].rss_series)
    ops = next(m for m in raw["results"][0]["metrics"] if m["name"] == "ops")
    assert [c["variant"] for c in ops["cells"]] == ["glibc-notcache", "jemalloc"]
    assert ops["cells"][1]["comparison"]["verdict"] == "better"
    # The budget (jemalloc must cut peak RSS by 90%) rules the winner out.
    rec = raw["recommendation"]
    assert rec["budget"] == -0.9 and rec["overall"]["pick"] is None
    assert "within the -90% peak-RSS budget: jemalloc is faster" in rec["overall"]["sentence"]
    text = export(r, "terminal")   # the short answer; its full tables with details
    assert "\x1b[" not in text and "(baseline)" not in text and "Use jemalloc" in text
    assert "jemalloc  better" in text and "Every variant verified" in text
    assert "(baseline)" in export(r, "terminal", Options(details=True))
    html = export(r, "html")
    assert html.count("<svg ") == 5 and "Use jemalloc" in html
    # The RSS chart draws every measured run that lasted long enough for a sample.
    sampled = sum(1 for r in e.runs if not r.warmup and r.status == "ok" and json.loads(r.rss_series))
    assert sampled > 0 and f"RSS over time, {sampled} of {sampled} measured runs drawn" in html


@pytest.mark.e2e
def test_experiments_lists_the_history(real):
    p = alloclab(real["db"], "experiments")
    lines = [x for x in p.stdout.splitlines() if "glibc-notcache, jemalloc" in x]
    assert len(lines) == 2 and "20/20" in p.stdout and "4/4" in p.stdout, p.stdout
    assert socket.gethostname() in p.stdout
    rows = Store(real["db"]).listing()
    assert [r.id for r in rows] == [1, 2]
    assert rows[0].variants == ["glibc-notcache", "jemalloc"] and [r.runs for r in rows] == [20, 4]


@pytest.mark.e2e
def test_diff_of_two_real_experiments(real):
    from rich.console import Console

    from alloclab.report.diff import render_terminal

    db = real["db"]
    raw = json.loads(alloclab(db, "diff", "1", "2", "-f", "json").stdout)
    assert raw["labels"] == ["glibc-notcache", "jemalloc"] and raw["a"] == 1 and raw["b"] == 2
    a, b = Store(db).load(1), Store(db).load(2)
    ops = next(r for r in raw["workloads"][0]["rows"] if r["metric"] == "ops")
    for vi, cell in enumerate(ops["cells"]):
        va = [r.metrics["ops"] for r in a.cell_runs(0, vi) if r.status == "ok"]
        vb = [r.metrics["ops"] for r in b.cell_runs(0, vi) if r.status == "ok"]
        assert cell["a"]["median"] == stats.summarize(va).median
        assert cell["comparison"]["ratio"] == pytest.approx(stats.compare(va, vb, True).ratio)
    console = Console(file=io.StringIO(), width=200)
    render_terminal(diff_experiments(a, b), console)
    text = console.file.getvalue()
    # pyperf's compare_to: a line a decided change, the rest folded, the summary of them all.
    assert "comparisons of B against A:" in text and ("ops" in text or "unchanged comparisons not shown" in text)


@pytest.mark.e2e
def test_diff_of_two_exported_files_reads_as_the_diff_of_their_ids(real, tmp_path):
    # Exported with --export-json, read back by another store (another machine): the same cells.
    db = real["db"]
    for i in (1, 2):
        alloclab(db, "report", str(i), "-f", "json", "-o", str(tmp_path / f"e{i}.json"))
    by_id = json.loads(alloclab(db, "diff", "1", "2", "-f", "json").stdout)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    by_file = run_cli(["diff", str(tmp_path / "e1.json"), str(tmp_path / "e2.json"), "-f", "json"],
                      cwd=tmp_path, env={**os.environ, "TMPDIR": str(scratch)})
    assert by_file.returncode == 0, by_file.stderr
    by_file = json.loads(by_file.stdout)
    assert by_file["labels"] == by_id["labels"]
    assert by_file["workloads"] == by_id["workloads"]
    assert not (tmp_path / "alloclab.db").exists()   # reading two files writes no store here
    assert list(scratch.iterdir()) == []               # nor leaves the stores it read them into


@pytest.mark.e2e
def test_bad_input_is_a_clear_error(real, tmp_path):
    from alloclab.cli.reports import open_store

    p = alloclab(real["db"], "report", "99", check=False)
    assert p.returncode == 2 and "No experiment 99" in p.stderr and "alloclab experiments" in p.stderr
    with pytest.raises(AlloclabError, match="No database at"):
        open_store(tmp_path / "none.db")


# --- formatting on synthetic stores ------------------------------------------------------------

@pytest.fixture
def three(tmp_path):
    store, exp = synthetic(tmp_path / "s.db", THREE)
    return build_results(store.load(exp))


def test_markdown_tables_line_up_and_carry_the_verdicts(three):
    brief = [x for x in export(three, "md").splitlines() if x.startswith("| prog 1: ops")]
    assert len(brief) == 1   # the short answer's table of the workload, its name heading it
    md = export(three, "md", Options(details=True))
    table = [x for x in md.split("### prog 1")[1].splitlines() if x.startswith("|")]
    assert len({len(x) for x in table}) == 1  # padded: reads as a table in a plain-text mail
    assert table[0].split("|")[2].strip() == "glibc (baseline)"
    ops = next(x for x in table if x.startswith("| ops"))
    assert "+30.0% [" in ops and "**better**" in ops
    assert "host:       testhost: Test CPU, 2 cores, 4.0 GiB" in md
    assert "Every variant verified" in md


def test_warnings_are_grouped_not_repeated(tmp_path):
    store, exp = synthetic(tmp_path / "s.db", THREE, runs=1)
    md = export(build_results(store.load(exp)), "md", Options(details=True))
    assert md.count("**too-few-runs**") == 1
    assert "  - every variant, every metric: 1 run" in md


def test_ineffective_allocator_is_prominent(tmp_path):
    vs = [variant("glibc", "glibc"), variant("jemalloc", "jemalloc", {"LD_PRELOAD": JEMALLOC}, speed=1.3,
                                             status="ineffective")]
    store, exp = synthetic(tmp_path / "s.db", vs)
    r = build_results(store.load(exp))
    md = export(r, "md")
    # Above the tables, in bold, not a footnote.
    assert "**Allocator INEFFECTIVE for jemalloc (prog 1)" in md.split("### ")[0]
    html = export(r, "html")
    assert '<section id="verification" class="banner bad">Allocator INEFFECTIVE' in html
    assert '<td class="status-ineffective">INEFFECTIVE</td>' in html


def test_csv_has_one_row_per_run_with_every_metric(three):
    rows = list(csv.DictReader(io.StringIO(export(three, "csv"))))
    e = three.experiment
    assert len(rows) == len(e.runs)
    assert {"ops", "wall_s", "peak_rss_mb", "variant", "block", "warmup", "status"} <= set(rows[0])
    assert [r["variant"] for r in rows[:3]] == ["glibc", "jemalloc", "mimalloc"]
    assert float(rows[1]["ops"]) == e.runs[1].metrics["ops"]


def test_json_is_versioned_and_complete(three):
    d = json.loads(export(three, "json"))
    assert d["schema"] == 3 and d["generator"].startswith("alloclab ")
    assert d["analysis"]["alpha"] == 0.05 and d["baseline"] == "glibc"
    assert len(d["runs"]) == len(three.experiment.runs)
    assert d["runs"][0]["rss_series"][-1][1] > 0
    ops = d["results"][0]["metrics"][0]
    assert ops["name"] == "ops" and ops["primary"] is True
    assert ops["cells"][0]["comparison"] is None and ops["cells"][1]["comparison"]["verdict"] == "better"
    assert d["results"][0]["verification"]["jemalloc"]["status"] == "verified"
    assert d["recommendation"]["workloads"][0]["pick"] == "jemalloc"


def test_html_is_self_contained_with_charts(three):
    html = export(three, "html")
    assert html.count("<svg ") == 5  # who wins where; the primary metric (ops), peak RSS, speed/memory, RSS over time
    assert 'aria-label="ops per variant' in html and 'aria-label="wall_s per variant' not in html
    # --details: a chart for every measure shown (ops, wall_s, cpu_s, minflt) beside the other three.
    detailed = export(three, "html", Options(details=True))
    assert detailed.count("<svg ") >= 8 and 'aria-label="wall_s per variant' in detailed
    assert "<script" not in html and "<link" not in html and "<img" not in html
    # Nothing is fetched: every reference is inside the file (an anchor or a data: URI).
    refs = re.findall(r'\b(?:href|src)="([^"]*)"', html)
    assert refs and all(r.startswith(("#", "data:")) for r in refs), refs
    assert "https://" not in html and "<metadata>" not in html
    # Every SVG has ids of its own: many charts share one document.
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids))
    assert export(three, "html").split("Generated by")[0] == html.split("Generated by")[0]  # reproducible


def test_sweep_curves_are_drawn_from_the_config(tmp_path):
    vs = [variant("glibc", "glibc"),
          variant("jemalloc narenas=1", "jemalloc", {"LD_PRELOAD": JEMALLOC, "MALLOC_CONF": "narenas:1"}, speed=1.1),
          variant("jemalloc narenas=4", "jemalloc", {"LD_PRELOAD": JEMALLOC, "MALLOC_CONF": "narenas:4"}, speed=1.2)]
    sweep = {"tunable": "narenas", "points": [{"variant": "jemalloc narenas=1", "value": 1},
                                              {"variant": "jemalloc narenas=4", "value": 4}]}
    store, exp = synthetic(tmp_path / "t.db", vs, config={"sweep": sweep})
    html = export(build_results(store.load(exp)), "html")
    assert '<section id="sweep">' in html
    assert html.count('aria-label="ops against narenas: prog 1"') == 1
    assert html.count('aria-label="peak_rss_mb against narenas: prog 1"') == 1
    two = (("prog 16", ["prog", "16"]), ("prog 64", ["prog", "64"]))
    param = {"param": "size", "points": [{"workload": 0, "value": 16}, {"workload": 1, "value": 64}]}
    store, exp = synthetic(tmp_path / "p.db", THREE, workloads=two, config={"sweep": param})
    html = export(build_results(store.load(exp)), "html")
    assert 'aria-label="ops against size"' in html and '<section id="overall">' in html


def test_malformed_sweep_is_skipped_with_a_note(tmp_path):
    store, exp = synthetic(tmp_path / "m.db", THREE, config={"sweep": {"tunable": "x", "points": "nope"}})
    html = export(build_results(store.load(exp)), "html")
    assert "1 recorded sweep had no points" in html and html.count("<svg ") == 5


def test_write_report_and_format_errors(three, tmp_path):
    path = write_report(three, "md", tmp_path / "out.md", Options())
    assert path.read_text().startswith("## alloclab: prog 1")
    assert format_for("x.html") == "html" and format_for("x.MD") == "md"
    with pytest.raises(AlloclabError, match="Cannot tell the report format"):
        format_for("report.pdf")
    with pytest.raises(AlloclabError, match="Unknown report format 'xml'"):
        export(three, "xml")
    with pytest.raises(AlloclabError, match="Cannot write the report"):
        write_report(three, "md", tmp_path / "no" / "such" / "dir.md")


def test_diff_needs_a_shared_workload_and_label(tmp_path):
    _, a = synthetic(tmp_path / "d.db", THREE)
    _, b = synthetic(tmp_path / "d.db", THREE, workloads=(("other 2", ["other", "2"]),))
    _, c = synthetic(tmp_path / "d.db", [variant("x"), variant("y")])
    _, moved = synthetic(tmp_path / "d.db", THREE, workloads=(("/opt/bin/prog 1", ["/opt/bin/prog", "1"]),),
                         base_speed=1100.0)
    store = Store(tmp_path / "d.db")
    with pytest.raises(AlloclabError, match="share no workload"):
        diff_experiments(store.load(a), store.load(b))
    with pytest.raises(AlloclabError, match="no variant label in common"):
        diff_experiments(store.load(a), store.load(c))
    d = diff_experiments(store.load(a), store.load(moved))
    assert "run the same program from different paths" in d.notes[0]
    ops = d.workloads[0].rows[0]
    assert ops.metric == "ops" and [c.label for c in ops.cells] == ["glibc", "jemalloc", "mimalloc"]
    assert all(c.comparison.ratio == pytest.approx(1.1) and c.comparison.verdict == "better" for c in ops.cells)


def test_an_experiment_without_runs_still_reports(tmp_path):
    from types import SimpleNamespace

    from alloclab.workloads.metrics import STANDARD
    from test_recommend import MACHINE

    store = Store(tmp_path / "e.db")
    exp = store.new_experiment("compare", "prog", {"runs": 3}, MACHINE)
    store.add_workload(exp, 0, "prog", ["prog"], {}, {}, list(STANDARD))
    for i, label in enumerate(("glibc", "jemalloc")):
        store.add_variant(exp, i, SimpleNamespace(label=label, spec=label, env={}, settings=[], notes=[],
                                                  allocator=SimpleNamespace(name=label), library=None), "1")
    store.finish(exp, "interrupted")
    r = build_results(store.load(exp))
    for fmt in ("terminal", "md", "html", "json", "csv"):
        assert export(r, fmt)
    assert "Nothing to recommend for prog: no run succeeded" in export(r, "md")
    assert "This experiment is interrupted" in export(r, "html")


def test_html_charts_drawn_by_forked_workers_are_the_same_bytes(tmp_path):
    # In a fresh, single-threaded process (a pytest-xdist worker has threads, where alloclab draws
    # in-process): the page drawn by two forked workers equals the one drawn alone.
    code = f"""
import multiprocessing, sys
sys.path.insert(0, {str(__import__('pathlib').Path(__file__).parent)!r})
from test_recommend import THREE, synthetic
from alloclab.report import Options, export, charts
from alloclab.stats.results import build_results
store, exp = synthetic({str(tmp_path / 'f.db')!r}, THREE)
r = build_results(store.load(exp))
pools = []

class Counting:
    def get_context(self, method):
        ctx = multiprocessing.get_context(method)
        class Ctx:
            def Pool(self, n):
                pools.append(n)
                return ctx.Pool(n)
        return Ctx()
    get_all_start_methods = staticmethod(multiprocessing.get_all_start_methods)
charts.mp = Counting()
charts.FORK_FROM = 10 ** 6
alone = export(r, "html", Options(details=True))
charts.FORK_FROM = 1
forked = export(r, "html", Options(details=True))
print(len(pools), pools[:1], alone.split("Generated by")[0] == forked.split("Generated by")[0])
"""
    import os
    import sys
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core: alloclab never forks to draw")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["1", "[2]", "True"], p.stdout


def test_an_ineffective_baseline_is_the_first_line_of_every_format(tmp_path):
    """Issue 22: redis-server links jemalloc, so a baseline run with nothing preloaded is jemalloc;
    the answer says so before anything else, and names what the comparisons are really against."""
    from alloclab.catalog import in_use

    vs = [variant("glibc-linked", "glibc-linked", status="ineffective"),
          variant("tcmalloc", "tcmalloc", {"LD_PRELOAD": "/usr/lib/libtcmalloc.so.4"}, speed=1.1)]
    store, exp = synthetic(tmp_path / "s.db", vs)
    store.set_verification(exp, 0, 0, "ineffective",
                           ["redis-server is linked against libjemalloc.so.2 (jemalloc): with no preload it runs "
                            "jemalloc, not glibc's malloc"],
                           [in_use.note("jemalloc", "redis-server links libjemalloc.so.2")])
    r = build_results(store.load(exp))
    first = ("glibc-linked is not in use: redis-server links libjemalloc.so.2; every comparison below is "
             "against jemalloc, not glibc-linked.")
    assert export(r, "terminal").splitlines()[0] == first
    md = export(r, "md")
    assert md.splitlines()[0] == f"**{first}**"
    assert "Answer (each comparison against jemalloc (which ran in glibc-linked's place))" in md
    assert "Primary metrics against jemalloc (which ran in glibc-linked's place)." in export(r, "md", Options(details=True))
    html = export(r, "html")
    assert html.index('<section id="baseline-warning" class="banner bad">' + first) < html.index("<header>")
    d = json.loads(export(r, "json"))
    assert next(iter(d)) == "baseline_warning" and d["baseline_warning"] == first


def test_an_ineffective_baseline_without_a_known_stand_in_still_comes_first(tmp_path):
    vs = [variant("glibc", "glibc", status="ineffective"), variant("jemalloc", "jemalloc", {"LD_PRELOAD": JEMALLOC})]
    store, exp = synthetic(tmp_path / "s.db", vs)
    r = build_results(store.load(exp))
    assert export(r, "terminal").splitlines()[0] == (
        "The baseline glibc is INEFFECTIVE (no binding seen); the comparisons below measure against what ran in "
        "its place, not glibc's allocator.")
    assert json.loads(export(r, "json"))["baseline_warning"].startswith("The baseline glibc is INEFFECTIVE")


def test_a_verified_baseline_adds_no_first_line(three):
    assert export(three, "terminal").startswith("experiment ")
    assert json.loads(export(three, "json"))["baseline_warning"] is None


def test_an_undecided_answer_states_no_bound_where_a_variant_cuts_the_faults(tmp_path):
    # The stored PostgreSQL experiment leaves comparisons undecided; a profile of its cells (here
    # written as `--profile` stores it) would bound what any allocator could change, but not here.
    import shutil
    from pathlib import Path

    from alloclab.report import Options, export
    from alloclab.report.bounds import bound_answers
    from alloclab.stats.analysis import analyze
    from alloclab.stats.results import build_results
    from alloclab.store.db import Store

    db = tmp_path / "pg.db"
    shutil.copyfile(Path(__file__).parent / "fixtures" / "postgres-recipe-trimmed.db", db)
    store = Store(db)
    assert bound_answers(analyze(store.load(None))) == []   # no profile, no bound
    run = lambda share: {"status": "ok", "samples": 400, "shares": {"allocator": share}}  # noqa: E731
    store.save_profiles(1, [(0, 0, {"runs": [run(0.012), run(0.016), run(0.014)]}),
                            (0, 2, {"runs": [run(0.009), {"status": "failed", "samples": 0, "shares": {}}]})])
    r = build_results(store.load(None))
    lines = bound_answers(r.analysis)
    assert len(lines) == 1 and lines[0].startswith("postgres-partitions: 1 client: tps")
    # The pad cuts the faults by 92%: a fault costs more than the kernel functions a profile files it
    # under, so a 1.4% share bounds nothing here (hand runs had the pad and tcmalloc at 1.06-1.16x).
    assert "no bound from the profile is stated: minor faults changed -9" in lines[0]
    assert "at most 1." not in lines[0] and "could raise" not in lines[0]
    assert lines[0] in " ".join(export(r, "md", Options()).split())   # wrapped between words for a mail
    [bound] = json.loads(export(r, "json", Options()))["cpu_bounds"]
    assert bound["kind"] == "faults" and bound["metrics"] == ["tps"] and bound["faults"][0]["effect"] < -0.5


def test_a_profile_blind_to_the_kernel_bounds_only_the_allocators_code(tmp_path):
    # PostgreSQL runs as another user, whose kernel samples perf may not see. The allocator's own
    # functions were 0.3-0.9% of the CPU while MALLOC_TOP_PAD_ gained 17.5% through the page faults
    # (2026-11-24): such a profile must not say that no allocator can change the throughput.
    import shutil
    from pathlib import Path

    from alloclab.report.bounds import bound_answers
    from alloclab.stats.analysis import analyze
    from alloclab.store.db import Store

    db = tmp_path / "pg.db"
    shutil.copyfile(Path(__file__).parent / "fixtures" / "postgres-recipe-trimmed.db", db)
    store = Store(db)
    run = {"status": "ok", "samples": 400, "shares": {"allocator": 0.009}}
    store.save_profiles(1, [(0, 0, {"runs": [run], "kernel_visible": False}),
                            (0, 2, {"runs": [run], "kernel_visible": False})])
    (line,) = bound_answers(analyze(store.load(None)))
    assert "no allocator can change it" not in line
    assert "the kernel's share (page faults, brk, mmap) was not visible to perf" in line
    assert "bounds only the allocator's own code" in line
    assert "minor faults changed" in line and "(tcmalloc)" in line


def test_the_page_drawn_by_the_early_drawer_is_the_same_and_no_drawer_outlives_its_report(tmp_path):
    # report/pen.py: `alloclab report -f html` forks the drawer at start; its page equals the one
    # drawn here, and the drawer ends with the report, used or not (the second report's charts
    # are kept, so its drawer is stopped unused).
    import os
    import sys
    import time
    import psutil

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core: alloclab draws in-process")
    code = f"""
import os, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_recommend import THREE, synthetic
from alloclab.report import Options, export, pen
from alloclab.stats.results import build_results
store, exp = synthetic({str(tmp_path / 'p.db')!r}, THREE)
r = build_results(store.load(exp))
os.environ["ALLOCLAB_CACHE"] = {str(tmp_path / 'alone')!r}
alone = export(r, "html", Options(details=True))
os.environ["ALLOCLAB_CACHE"] = {str(tmp_path / 'early')!r}
pen.start_early()
drawer = pen._early.proc
early = export(r, "html", Options(details=True))
drawer.join(timeout=10)
pen.start_early()
unused = pen._early.proc
pen.stop_early()
print(alone.split("Generated by")[0] == early.split("Generated by")[0], drawer.exitcode, unused.is_alive())
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["True", "0", "False"], p.stdout + p.stderr
    db = tmp_path / "p.db"
    for fmt in ("html", "html", "md"):   # drawn, then kept
        out = tmp_path / f"r.{fmt}"
        run = run_cli(["report", "--db", str(db), "-f", fmt, "-o", str(out)], timeout=120,
                      env=os.environ | {"ALLOCLAB_CACHE": str(tmp_path / "cli")})
        assert run.returncode == 0 and "<svg" in out.read_text() if fmt == "html" else run.returncode == 0, run.stderr
    bad = run_cli(["report", "--db", str(db), "-f", "html", "99"], timeout=60)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr, bad.stderr
    left = still_left(lambda: [q.pid for q in psutil.process_iter(["cmdline"])
                               if str(db) in " ".join(q.info["cmdline"] or [])])
    assert not left, left


def test_a_drawer_stopped_while_it_draws_leaves_no_worker_behind(tmp_path):
    # Ctrl-C or SIGTERM while the page's drawer and its workers draw: the report stops them all.
    import os
    import sys

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core: alloclab draws in-process")
    code = f"""
import os, sys, time, psutil
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_recommend import THREE, synthetic
from alloclab.report import pen
from alloclab.report.chart_style import strip
from alloclab.stats.results import build_results

def in_group(group):
    out = []
    for p in psutil.process_iter():
        try:
            if p.pid != group and os.getpgid(p.pid) == group:
                out.append(p)
        except OSError:
            pass
    return out

store, exp = synthetic({str(tmp_path / 's.db')!r}, THREE)
r = build_results(store.load(exp))
pen.start_early()
drawer = pen._early
group = drawer.proc.pid
job = ("charts", "metric_chart", (r.analysis.labels, [0, 1, 2], strip(r.analysis.workloads[0].rows[0])))
drawer.conn.send([job] * 400)   # half a minute of drawing
deadline = time.time() + 60
while time.time() < deadline and len(in_group(group)) < 2:
    time.sleep(0.05)
workers = in_group(group)
pen.stop_early()
def alive():
    out = []
    for p in workers:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except psutil.Error:
            pass
    return out
deadline = time.time() + 10
while time.time() < deadline and alive():
    time.sleep(0.05)
alive = alive()
print(len(workers), alive, drawer.proc.is_alive())
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["2", "[]", "False"], p.stdout + p.stderr
