"""`alloclab compare` end to end on a real program and real allocators, including bad input."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import psutil
import pytest

from alloclab.catalog import allocators as cat
from alloclab.errors import AlloclabError
from alloclab.catalog.variants import parse_variant
from conftest import ALLOCLAB, installed_allocators, require_allocator, run_cli, running, still_left

pytestmark = pytest.mark.e2e
OPS = "ops=ops/s: (\\d+)"


def test_compare_measures_every_installed_allocator(build, cli, store_of, tmp_path):
    prog = build("churn")
    out = tmp_path / "raw.json"
    p = cli("compare", "--details", "--runs", "3", "--metric", OPS, "--export-json", str(out), "--", str(prog), "300", "48")
    assert p.returncode == 0, p.stderr
    e = store_of(cli.db).load()
    assert e.row.status == "complete"
    assert [v.label for v in e.variants][0] == "glibc"
    assert {v.label for v in e.variants} == set(installed_allocators())
    measured = [r for r in e.runs if not r.warmup]
    assert len(measured) == 3 * len(e.variants)
    for r in measured:
        assert r.status == "ok"
        m = r.metrics
        assert m["ops"] > 0 and m["wall_s"] > 0 and m["cpu_s"] > 0
        # 48 MiB kept alive: the tree's peak RSS must show it, and not Python's own memory.
        assert 48 <= m["peak_rss_mb"] < 90, m
        assert 48 <= m["max_rss_mb"] < 90, m
    # Blocks are shuffled and every block runs every variant once.
    blocks = {}
    for r in measured:
        blocks.setdefault(r.block, []).append(r.variant_idx)
    assert all(sorted(v) == list(range(len(e.variants))) for v in blocks.values())
    orders = {tuple(v) for v in blocks.values()}
    assert len(e.variants) < 3 or len(orders) > 1
    # The table: one row per metric, one column per variant, deltas against the baseline.
    assert "ops" in p.stdout and "peak_rss_mb" in p.stdout and "(baseline)" in p.stdout
    raw = json.loads(out.read_text())
    assert raw["schema"] == 3 and len(raw["runs"]) == len(e.runs)
    assert raw["machine"]["glibc"] == cat.glibc_version()


def test_unknown_allocator_is_a_clear_error(cli):
    p = cli("compare", "-a", "hoard", "--", "true")
    assert p.returncode == 2
    assert "Unknown allocator 'hoard'" in p.stderr and "Known allocators are: glibc" in p.stderr


def test_missing_library_names_the_install_line(tmp_path):
    catalog_file = tmp_path / "catalog.toml"
    catalog_file.write_text(
        '[allocators.glibc]\ndescription="x"\npackage="libc6"\nrelease_call="x"\nstats_call="x"\n'
        '[allocators.nosuch]\ndescription="x"\nlibraries=["libnosuchalloc.so.9"]\npackage="libnosuch9"\n'
        'release_call="x"\nstats_call="x"\n')
    catalog = cat.load_catalog(str(catalog_file))
    with pytest.raises(AlloclabError, match="apt-get install -y libnosuch9"):
        parse_variant("nosuch", catalog)


def test_command_not_found(cli):
    p = cli("compare", "--", "no-such-program-anywhere")
    assert p.returncode == 2
    assert "Command not found: 'no-such-program-anywhere'" in p.stderr


def test_failing_under_one_allocator_is_recorded_and_others_go_on(build, cli, store_of):
    require_allocator("jemalloc")
    prog = build("churn")
    p = cli("compare", "--details", "--runs", "2", "-a", "glibc", "-a", "jemalloc", "--metric", OPS, "--",
            str(prog), "100", "1", "libjemalloc")
    assert p.returncode == 0, p.stderr
    e = store_of(cli.db).load()
    by_variant = {vi: [r for r in e.runs if r.variant_idx == vi] for vi in range(2)}
    assert all(r.status == "ok" for r in by_variant[0])
    assert all(r.status == "failed" and r.exit_code == 3 for r in by_variant[1])
    assert "refusing to run under libjemalloc" in by_variant[1][0].stderr
    assert "0/2" in p.stdout and "exited with status 3" in p.stdout


def test_metric_that_matches_nothing_names_the_run_and_shows_output(build, cli):
    prog = build("churn")
    p = cli("compare", "--runs", "1", "-a", "glibc", "--metric", "iops=IOPS: (\\d+)", "--", str(prog), "10", "1")
    assert p.returncode == 2
    assert "Metric 'iops'" in p.stderr and "matched nothing" in p.stderr
    assert "ops/s:" in p.stderr  # the output tail


def test_timeout_kills_the_process_group_and_marks_the_run(build, cli, store_of):
    prog = build("churn")
    started = time.monotonic()
    p = cli("compare", "--runs", "1", "--warmup", "0", "--no-verify", "-a", "glibc", "--timeout", "0.5",
            "--shell", "--", f"{prog} 10 1 '' 30 & {prog} 10 1 '' 30; wait")
    assert time.monotonic() - started < 20
    # Timing out under every variant in the first block is the limit's fault: stop and say so.
    assert p.returncode == 2 and "Every run of the first block timed out (--timeout 0.5 s)" in p.stderr
    assert "Raise --timeout" in p.stderr
    e = store_of(cli.db).load()
    assert [r.status for r in e.runs] == ["timeout"]
    assert "timed out after 0.5 s" in e.runs[0].error
    assert not [q for q in psutil.process_iter(["cmdline"]) if str(prog) in " ".join(q.info["cmdline"] or [])]


def test_ctrl_c_kills_children_and_keeps_partial_results(build, tmp_path, store_of):
    prog = build("churn")
    db = tmp_path / "int.db"
    proc = subprocess.Popen([*ALLOCLAB, "compare", "--db", str(db), "--runs", "5", "--warmup", "0",
                             "--no-verify", "-a", "glibc", "--metric", OPS, "--", str(prog), "10", "1", "", "0.3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Wait until at least two runs are stored, then interrupt mid-run.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.2)
        if db.exists():
            try:
                if len(store_of(db).load().runs) >= 2:
                    break
            except AlloclabError:
                pass
    time.sleep(0.1)
    children = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Interrupted" in err and "alloclab report --db" in err
    assert not still_left(lambda: running(children))
    e = store_of(db).load()
    assert e.row.status == "interrupted"
    assert sum(r.status == "ok" for r in e.runs) >= 2
    # The partial results are readable with the command the message gives, their tables with --details.
    rep = run_cli(["report", "--db", str(db)])
    assert rep.returncode == 0 and "experiment 1 (interrupted)" in rep.stdout
    rep = run_cli(["report", "--db", str(db), "--details"])
    assert rep.returncode == 0 and "ops" in rep.stdout


def test_the_runs_line_says_where_verification_ran(cli):
    # Asked for no warm-up block, verification runs an untimed block of its own, and says so.
    for warmup, where in (("0", "an untimed block of its own"), ("1", "first warm-up block")):
        cli("compare", "--runs", "1", "--warmup", warmup, "-a", "glibc", "--", "true", check=True)
        md = " ".join(cli("report", "-f", "md", check=True).stdout.split())   # wrapped between words for a mail
        assert f"after {warmup} warm-up block{'' if warmup == '1' else 's'}" in md and f"verification on ({where} under" in md
