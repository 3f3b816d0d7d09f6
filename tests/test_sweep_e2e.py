"""Sweeps, ablation and thread scaling end to end: real built-in programs under real allocators,
through the same functions `compare` and `suite` call (expansion, run_experiment, analyze)."""

from __future__ import annotations

import json
import os

import pytest
from rich.console import Console

from alloclab.catalog.variants import parse_variants
from alloclab.cli import app as cli_app
from alloclab.plan import param_sweep, sweep
from alloclab.stats import sweep as sweep_stats
from alloclab.stats.analysis import analyze
from alloclab.stats.results import build_results
from alloclab.cli.sweep import render_sweeps
from alloclab.workloads.metrics import MetricDef
from alloclab.measure.runner import Settings
from alloclab.store.db import Store
from alloclab.workloads import builtin
from conftest import require_allocator

pytestmark = pytest.mark.e2e

OVERSIZED = {"queries": "10"}     # ~0.2 s a run under plain glibc, ~10 ms once the heap top is kept


def run(tmp_path, workloads, specs, runs, sweeps=None, max_runs=None):
    """`runs` runs per variant; with `max_runs`, sequentially (as `compare` does by default): the
    first look after `runs`, then more blocks until every primary comparison is decided."""
    store = Store(tmp_path / "sweep.db")
    settings = (Settings(runs=runs, warmup=0, timeout_s=60) if max_runs is None else
                Settings(runs=runs, warmup=0, timeout_s=60, until_decided=True, first_look=runs,
                         max_runs=max_runs))
    if sweeps:
        settings.extra_config = sweep.sweep_config(sweeps)
    exp_id = cli_app.run_experiment(store, workloads, parse_variants(specs), settings)
    return store, exp_id, analyze(store.load(exp_id))


def rendered(a) -> str:
    """The sweep tables of the experiment `a` analysed, from the sweeps stored with it."""
    console = Console(width=200, record=True, file=open(os.devnull, "w"))
    render_sweeps(build_results(a.experiment, sweeps=True), console)
    return console.export_text()


def test_top_pad_sweep_on_oversized_finds_the_threshold(tmp_path):
    # 27 KB x 1000 chunks per query: a pad below ~27 MB still trims and regrows the heap every query.
    specs, sweeps = sweep.expand_variant_specs(["glibc:MALLOC_TOP_PAD_={0,2M,64M}"])
    w = builtin.workload("oversized", OVERSIZED, quick=True)
    # 8 runs, not 4: beside make test's other worker (or a CPU hog), one preempted run of the 10 ms
    # variant moves its block's log-ratio by ~2.3; with 4 blocks that left 2M against 64M undecided
    # (seen beside `yes`), with 8 the interval absorbs it (the effect is about x20).
    store, exp_id, a = run(tmp_path, [w], specs, runs=8, sweeps=sweeps)
    e = store.load(exp_id)
    assert [v.env.get("MALLOC_TOP_PAD_") for v in e.variants] == ["0", str(2 << 20), str(64 << 20)]
    # Every point ran in every block, in shuffled order: drift cannot pass for a trend.
    blocks: dict[int, list[int]] = {}
    for r in e.runs:
        if not r.warmup:
            blocks.setdefault(r.block, []).append(r.variant_idx)
    assert len(blocks) == 8 and all(sorted(v) == [0, 1, 2] for v in blocks.values())
    assert len({tuple(v) for v in blocks.values()}) > 1

    [curve] = sweep_stats.sweep_results(a, sweeps)
    assert curve.metric == "queries_per_s" and [p.text for p in curve.points] == ["0", "2M", "64M"]
    assert curve.best.text == "64M"
    assert [p.vs_best.verdict for p in curve.points[:2]] == ["worse", "worse"]
    assert curve.cheap is curve.best     # nothing smaller is as fast
    assert all(p.rss is not None and p.rss.n == 8 and p.rss.median > 0 for p in curve.points)
    text = rendered(a)
    assert "MALLOC_TOP_PAD_ sweep on oversized queries=10" in text
    assert "best MALLOC_TOP_PAD_=64M" in text and "peak RSS MiB" in text


def test_ablation_of_two_settings_that_do_the_same_job(tmp_path):
    # Either a 64 MB pad or a 64 MB trim threshold stops glibc trimming the heap after each query:
    # each alone gives nearly the whole speed-up, so together is far below their product.
    specs, structure = sweep.ablation_specs("glibc:MALLOC_TOP_PAD_=64M,MALLOC_TRIM_THRESHOLD_=64M")
    w = builtin.workload("oversized", OVERSIZED, quick=True)
    # Sequential, as `compare` runs by default: a first look after 8 blocks, then more until all
    # three are decided. A fixed 6 runs left MALLOC_TRIM_THRESHOLD_ undecided beside the other
    # pytest worker (make test's -n 2 on 2 cores): a fast run's timed window is a few tenths of a
    # millisecond, so one preemption by a competing process makes that run 10 times slower, and with
    # 6 blocks one such block widens the interval by orders of magnitude (measured beside 3 `yes`
    # processes at 6 runs: [x1.36, x18944] for an effect of x300). Here noise costs runs, not the verdict;
    # quiet or beside 3 CPU hogs every comparison was decided at the first look (4-7 s).
    _, _, a = run(tmp_path, [w], specs, runs=8, sweeps=[structure], max_runs=40)
    [r] = sweep_stats.ablation_result(a, structure)
    assert r.baseline == "glibc" and [e.name for e in r.singles] == ["MALLOC_TOP_PAD_=64M",
                                                                      "MALLOC_TRIM_THRESHOLD_=64M"]
    assert [e.comparison.verdict for e in r.singles] == ["better", "better"]
    assert r.combined.comparison.verdict == "better"
    assert r.expected == pytest.approx(r.singles[0].comparison.ratio * r.singles[1].comparison.ratio)
    # the interaction is estimated within blocks (together x baseline / the two alone, per block),
    # with its interval: near the ratio of the summaries, and far below 1
    assert r.interaction_low <= r.interaction <= r.interaction_high
    assert r.interaction == pytest.approx(r.combined.comparison.ratio / r.expected, rel=0.6)
    assert r.verdict == "antagonism" and r.interaction_high < 1
    text = rendered(a)
    assert "MALLOC_TOP_PAD_=64M alone" in text and "interaction = together / product" in text
    assert "they overlap or conflict" in text


def test_thread_scaling_of_a_builtin_workload(tmp_path):
    require_allocator("tcmalloc-minimal")
    params = param_sweep.expand_params(["threads=1..4*2", "rounds=4"])
    workloads = param_sweep.builtin_workloads(["larson"], params, quick=True)
    assert [w.name for w in workloads] == [f"larson threads={t} rounds=4" for t in (1, 2, 4)]
    sweeps = param_sweep.param_sweeps(workloads, params.swept)
    store, exp_id, a = run(tmp_path, workloads, ["glibc", "tcmalloc-minimal"], runs=3, sweeps=sweeps)
    for r in store.load(exp_id).runs:     # each point's value reached the program
        assert json.loads(r.stdout.strip().splitlines()[-1])["threads"] == [1, 2, 4][r.workload_idx]
    curves = sweep_stats.sweep_results(a, sweeps)
    assert [c.subject for c in curves] == ["glibc", "tcmalloc-minimal"]
    cores = len(os.sched_getaffinity(0))
    for c in curves:
        sc = c.scaling
        assert [s.threads for s in sc.steps] == [1, 2, 4]
        assert sc.steps[0].efficiency == 1.0
        for s in sc.steps:
            assert s.throughput == pytest.approx(c.points[[p.value for p in c.points].index(s.threads)].summary.median)
            assert s.efficiency == pytest.approx(s.speedup / s.threads)
        assert (sc.cores_note is not None) == (cores < 4)
        assert sc.stops_at in (None, 1, 2)
    text = rendered(a)
    assert "threads sweep with rounds=4 of larson" in text and "eff 100%" in text
    if cores < 4:
        assert f"only {cores} cores are usable" in text


def test_threads_placeholder_in_a_command_reaches_the_program(tmp_path):
    exe = builtin.binary(builtin.get("larson"))
    params = param_sweep.expand_params(["threads=1,2"])
    metric = MetricDef("ops_per_s", "ops/s", True, "json", "ops_per_s", True)
    workloads = param_sweep.command_workloads([str(exe), "--threads={threads}", "--rounds", "30"], params, [metric])
    sweeps = param_sweep.param_sweeps(workloads, params.swept)
    store, exp_id, a = run(tmp_path, workloads, ["glibc"], runs=3, sweeps=sweeps)
    e = store.load(exp_id)
    for r in e.runs:
        printed = json.loads(r.stdout.strip().splitlines()[-1])
        assert printed["threads"] == int(e.workloads[r.workload_idx].params["threads"])
    [curve] = sweep_stats.sweep_results(a, sweeps)
    assert curve.base == f"{exe} --threads={{threads}} --rounds 30"
    assert [s.threads for s in curve.scaling.steps] == [1, 2]


def test_sweep_structure_is_stored_and_shown_by_the_sweep_command(tmp_path, cli):
    specs, sweeps = sweep.expand_variant_specs(["glibc:MALLOC_TOP_PAD_={0,64M}"])
    w = builtin.workload("oversized", OVERSIZED, quick=True)
    store, exp_id, _ = run(tmp_path, [w], specs, runs=2, sweeps=sweeps)
    config = store.load(exp_id).config
    assert config.sweeps == sweeps and config.sweep == sweeps[0]
    p = cli("sweep", "--db", str(store.path), str(exp_id))
    assert p.returncode == 0, p.stderr
    assert "MALLOC_TOP_PAD_ sweep on oversized queries=10" in p.stdout


def test_sweep_command_on_an_experiment_without_a_sweep(cli, tmp_path):
    p = cli("compare", "--runs", "1", "--warmup", "0", "--no-verify", "-a", "glibc", "--", "true")
    assert p.returncode == 0, p.stderr
    p = cli("sweep", "--db", str(cli.db))
    assert p.returncode == 2 and "has no sweep" in p.stderr and "--ablate" in p.stderr
