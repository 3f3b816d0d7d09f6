"""Sweep, ablation and scaling logic, without running anything: expansion of the written forms,
and the decisions read from synthetic measurements (the end-to-end file runs the real thing)."""

from __future__ import annotations

import numpy as np
import pytest

from alloclab.store.config_model import ExperimentConfig
from alloclab.plan import param_sweep, sweep
from alloclab.stats import sweep as sweep_stats
from alloclab.stats.analysis import analyze
from alloclab.errors import AlloclabError
from alloclab.store.db import Experiment
from alloclab.catalog.variants import parse_variant, parse_variants
from alloclab.workloads.command import Workload


def texts(spec: str) -> list[str]:
    return [p["text"] for p in sweep.expand_variant_specs([spec])[1][0]["points"]]


# --- ranges and lists ---------------------------------------------------------------------------

def test_geometric_range_of_sizes():
    specs, sweeps = sweep.expand_variant_specs(["glibc:MALLOC_TOP_PAD_=128K..256M*4"])
    assert [p["text"] for p in sweeps[0]["points"]] == ["128K", "512K", "2M", "8M", "32M", "128M"]
    assert [p["value"] for p in sweeps[0]["points"]] == [128 << 10, 512 << 10, 2 << 20, 8 << 20, 32 << 20, 128 << 20]
    assert sweeps[0]["tunable"] == "MALLOC_TOP_PAD_" and sweeps[0]["fixed"] == {}
    assert specs[0].text == "glibc:MALLOC_TOP_PAD_=128K@glibc TOP_PAD=128K"
    # The concrete specs are ordinary variants: glibc reads the value in bytes.
    v = parse_variant(specs[-1])
    assert v.env["MALLOC_TOP_PAD_"] == str(128 << 20) and v.label == "glibc TOP_PAD=128M"


def test_range_stop_is_included_when_hit_and_even_steps():
    assert sweep.expand_range("1..8*2", "x") == ["1", "2", "4", "8"]
    assert sweep.expand_range("1..9*2", "x") == ["1", "2", "4", "8"]
    assert sweep.expand_range("0..10000+2500", "x") == ["0", "2500", "5000", "7500", "10000"]
    assert sweep.expand_range("1M..4M+1M", "x") == ["1M", "2M", "3M", "4M"]
    assert sweep.expand_range("5..5+1", "x") == ["5"]


def test_braces_inside_a_raw_value():
    specs, sweeps = sweep.expand_variant_specs(["jemalloc:MALLOC_CONF=dirty_decay_ms:{0,1000,10000}"])
    assert [s.text for s in specs] == [f"jemalloc:MALLOC_CONF=dirty_decay_ms:{v}@jemalloc CONF=dirty_decay_ms:{v}"
                     for v in (0, 1000, 10000)]
    s = sweeps[0]
    assert s["tunable"] == "dirty_decay_ms" and s["setting"] == "MALLOC_CONF"
    assert [p["value"] for p in s["points"]] == [0, 1000, 10000]


def test_braces_keep_the_rest_of_a_combined_value():
    specs, sweeps = sweep.expand_variant_specs(
        ["jemalloc:MALLOC_CONF=narenas:2,dirty_decay_ms:{0,5000},muzzy_decay_ms:0"])
    assert [s.text.split("@")[0] for s in specs] == [
        "jemalloc:MALLOC_CONF=narenas:2,dirty_decay_ms:0,muzzy_decay_ms:0",
        "jemalloc:MALLOC_CONF=narenas:2,dirty_decay_ms:5000,muzzy_decay_ms:0"]
    assert sweeps[0]["tunable"] == "dirty_decay_ms"


def test_range_inside_braces_and_non_numeric_items():
    assert texts("glibc:MALLOC_TOP_PAD_={0,128K..1M*2}") == ["0", "128K", "256K", "512K", "1M"]
    specs, sweeps = sweep.expand_variant_specs(["tcmalloc:TCMALLOC_AGGRESSIVE_DECOMMIT={true,false}"])
    assert [p["value"] for p in sweeps[0]["points"]] == ["true", "false"]


def test_cartesian_product_has_unique_labels_and_a_curve_along_each_tunable():
    specs, sweeps = sweep.expand_variant_specs(["glibc:MALLOC_TOP_PAD_={0,64M},MALLOC_ARENA_MAX={1,2,4}"])
    assert len(specs) == 6
    variants = parse_variants(specs)   # raises on a repeated label
    assert {v.env["MALLOC_ARENA_MAX"] for v in variants} == {"1", "2", "4"}
    assert {v.env["MALLOC_TOP_PAD_"] for v in variants} == {"0", str(64 << 20)}
    along = {}
    for s in sweeps:
        along.setdefault(s["tunable"], []).append(s)
    # Two curves along ARENA_MAX (one per TOP_PAD), three along TOP_PAD (one per ARENA_MAX).
    assert sorted(s["fixed"]["MALLOC_TOP_PAD_"] for s in along["MALLOC_ARENA_MAX"]) == ["0", "64M"]
    assert sorted(s["fixed"]["MALLOC_ARENA_MAX"] for s in along["MALLOC_TOP_PAD_"]) == ["1", "2", "4"]
    labels = {v.label for v in variants}
    assert all(p["variant"] in labels for s in sweeps for p in s["points"])


def test_user_label_gets_the_swept_value():
    specs, _ = sweep.expand_variant_specs(["glibc:MALLOC_TOP_PAD_={0,64M}@pad"])
    assert [s.given_label for s in specs] == ["pad TOP_PAD=0", "pad TOP_PAD=64M"]


def test_specs_without_sweep_pass_through():
    specs, sweeps = sweep.expand_variant_specs(["glibc", "jemalloc:MALLOC_CONF=narenas:2,dirty_decay_ms:0@j"])
    assert [s.text for s in specs] == ["glibc", "jemalloc:MALLOC_CONF=narenas:2,dirty_decay_ms:0@j"] and sweeps == []


@pytest.mark.parametrize("spec, message", [
    ("glibc:MALLOC_TOP_PAD_=128K..256M", "has no step"),
    ("glibc:MALLOC_TOP_PAD_=256M..128K*4", "runs backwards"),
    ("glibc:MALLOC_TOP_PAD_=0..1M*2", "start above 0 and a factor above 1"),
    ("glibc:MALLOC_TOP_PAD_=1K..1M*1", "start above 0 and a factor above 1"),
    ("glibc:MALLOC_ARENA_MAX=1..8+0", "whole step above 0"),
    ("glibc:MALLOC_ARENA_MAX=a..b*2", "Cannot read the range"),
    ("glibc:MALLOC_ARENA_MAX=1.5..4+1", "whole numbers"),
    ("glibc:MALLOC_ARENA_MAX=1..1000+1", "more than 64 points"),
    ("glibc:MALLOC_TOP_PAD_={0,64M", "without its '}'"),
    ("glibc:MALLOC_TOP_PAD_=0,64M}", "without its '{'"),
    ("glibc:MALLOC_TOP_PAD_={0,{1,2}}", "Nested braces"),
    ("glibc:MALLOC_TOP_PAD_={0,,64M}", "empty item"),
    ("glibc:MALLOC_TOP_PAD_={64M,65536K}", "same value twice"),
    ("glibc:MALLOC_TOP_PAD_={0,64M}..1G*2", "outside the braces"),
])
def test_malformed_sweeps_are_clear_errors(spec, message):
    with pytest.raises(AlloclabError, match=message) as e:
        sweep.expand_variant_specs([spec])
    assert f"variant '{spec}'" in str(e.value)   # names what the user wrote


def test_repeated_label_across_specs_is_an_error():
    with pytest.raises(AlloclabError, match="both give a variant labelled 'glibc TOP_PAD=64M'"):
        sweep.expand_variant_specs(["glibc:MALLOC_TOP_PAD_={0,64M}", "glibc:MALLOC_TOP_PAD_={64M,128M}"])


def test_too_big_a_product_is_refused():
    with pytest.raises(AlloclabError, match="expands to 144 variants"):
        sweep.expand_variant_specs(["glibc:MALLOC_TOP_PAD_=1..12+1,MALLOC_ARENA_MAX=1..12+1"])


# --- workload parameters ------------------------------------------------------------------------

@pytest.mark.parametrize("item", ["threads=1,2,4,8", "threads=1..8*2", "threads={1,2,4,8}", "threads=1,2..4*2,8"])
def test_param_lists_and_ranges(item):
    p = param_sweep.expand_params([item])
    assert p.combos == [{"threads": t} for t in ("1", "2", "4", "8")] and p.swept == ["threads"]


def test_param_product_and_fixed_values():
    p = param_sweep.expand_params(["threads=1,2", "working-set={1M,4M}", "ops=1000"])
    assert len(p.combos) == 4 and p.swept == ["threads", "working-set"]
    assert all(c["ops"] == "1000" for c in p.combos)
    assert {(c["threads"], c["working-set"]) for c in p.combos} == {("1", "1M"), ("1", "4M"), ("2", "1M"), ("2", "4M")}
    assert param_sweep.expand_params([]).combos == [{}]


@pytest.mark.parametrize("items, message", [
    (["threads"], "write NAME=VALUE"),
    (["threads=1", "threads=2"], "given twice"),
    (["threads=1,{2,4}"], "mixes a list in braces"),
    (["threads=1,1"], "same value twice"),
    (["threads=8..1*2"], "runs backwards"),
])
def test_param_errors(items, message):
    with pytest.raises(AlloclabError, match=message):
        param_sweep.expand_params(items)


def test_substitution_is_per_argument_and_leaves_other_braces():
    argv = ["prog", "--threads={threads}", "{threads}", "awk", "{print $1}", "{other}"]
    assert param_sweep.substitute(argv, {"threads": "4"}) == ["prog", "--threads=4", "4", "awk", "{print $1}", "{other}"]
    # A value with spaces or shell syntax stays one argument: nothing is ever parsed by a shell.
    assert param_sweep.substitute(["p", "{x}"], {"x": "a b; rm"}) == ["p", "a b; rm"]


def test_command_workloads_check_the_placeholder_and_refuse_a_shell():
    params = param_sweep.expand_params(["threads=1,2"])
    ws = param_sweep.command_workloads(["/bin/true", "-t", "{threads}"], params, [])
    assert [w.argv for w in ws] == [["/bin/true", "-t", "1"], ["/bin/true", "-t", "2"]]
    assert [w.params for w in ws] == params.combos
    assert param_sweep.param_sweeps(ws, params.swept)[0]["points"] == [
        {"workload": 0, "value": 1, "text": "1"}, {"workload": 1, "value": 2, "text": "2"}]
    with pytest.raises(AlloclabError, match="has no \\{threads\\}"):
        param_sweep.command_workloads(["/bin/true", "-t", "4"], params, [])
    with pytest.raises(AlloclabError, match="drop --shell"):
        param_sweep.command_workloads(["/bin/true {threads}"], params, [], shell=True)


def test_param_sweeps_group_by_program_and_other_params():
    ws = [Workload(f"w{i}", ["/bin/true"], params=p, info={"builtin": b}) for i, (b, p) in enumerate([
        ("larson", {"threads": "1", "rounds": "9"}), ("larson", {"threads": "2", "rounds": "9"}),
        ("simple", {}), ("xthread", {"threads": "1"}), ("xthread", {"threads": "2"}),
        ("larson", {"threads": "1", "rounds": "5"}), ("larson", {"threads": "2", "rounds": "5"})])]
    got = param_sweep.param_sweeps(ws, ["threads"])
    assert [(s["base"], s["fixed"], [p["workload"] for p in s["points"]]) for s in got] == [
        ("larson", {"rounds": "9"}, [0, 1]), ("xthread", {}, [3, 4]), ("larson", {"rounds": "5"}, [5, 6])]


# --- ablation -----------------------------------------------------------------------------------

def test_ablation_specs():
    specs, s = sweep.ablation_specs("glibc:MALLOC_TOP_PAD_=64M,MALLOC_ARENA_MAX=2")
    assert [s.text for s in specs] == ["glibc", "glibc:MALLOC_TOP_PAD_=64M@glibc TOP_PAD=64M",
                     "glibc:MALLOC_ARENA_MAX=2@glibc ARENA_MAX=2",
                     "glibc:MALLOC_TOP_PAD_=64M,MALLOC_ARENA_MAX=2@glibc TOP_PAD=64M,ARENA_MAX=2"]
    assert s["ablation"]["baseline"] == "glibc"
    assert s["ablation"]["combined"] == "glibc TOP_PAD=64M,ARENA_MAX=2"
    assert [x["setting"] for x in s["ablation"]["settings"]] == ["MALLOC_TOP_PAD_=64M", "MALLOC_ARENA_MAX=2"]
    assert [v.label for v in parse_variants(specs)] == ["glibc", "glibc TOP_PAD=64M", "glibc ARENA_MAX=2",
                                                        "glibc TOP_PAD=64M,ARENA_MAX=2"]


def test_ablation_keeps_commas_inside_a_combined_value():
    specs, s = sweep.ablation_specs("jemalloc:MALLOC_CONF=narenas:2,dirty_decay_ms:0,MALLOC_ARENA_MAX=2@both")
    assert [x["setting"] for x in s["ablation"]["settings"]] == ["MALLOC_CONF=narenas:2,dirty_decay_ms:0",
                                                                  "MALLOC_ARENA_MAX=2"]
    assert specs[-1].text.endswith("@both")


@pytest.mark.parametrize("spec, message", [
    ("glibc:MALLOC_TOP_PAD_=64M", "at least two settings"),
    ("glibc:MALLOC_TOP_PAD_={0,64M},MALLOC_ARENA_MAX=2", "contains a sweep"),
    ("glibc:MALLOC_ARENA_MAX=2,MALLOC_ARENA_MAX=2", "same setting twice"),
])
def test_ablation_errors(spec, message):
    with pytest.raises(AlloclabError, match=message):
        sweep.ablation_specs(spec)


def test_plan_variants_joins_and_drops_repeats():
    specs, sweeps = sweep.plan_variants(["glibc", "glibc:MALLOC_TOP_PAD_={0,64M}"],
                                        "glibc:MALLOC_TOP_PAD_=64M,MALLOC_ARENA_MAX=2")
    assert specs[0].text == "glibc" and [s.text for s in specs].count("glibc") == 1
    labels = [v.label for v in parse_variants(specs)]
    assert labels.count("glibc TOP_PAD=64M") == 1
    assert [next(iter(s)) for s in sweeps] == ["tunable", "ablation"]
    config = sweep.sweep_config(sweeps)
    assert config["sweeps"] == sweeps and config["sweep"] is sweeps[0]
    assert ExperimentConfig.of(config).stored_sweeps() == sweeps and sweep.sweep_config([]) == {}


# --- decisions on synthetic measurements --------------------------------------------------------

def fake_experiment(labels, workloads, data, metric="tput", higher=True, cores=2):
    """data[(workload_idx, variant_idx)] = values, one per block."""
    runs, rid = [], 0
    for (wi, vi), values in data.items():
        for block, v in enumerate(values):
            rid += 1
            runs.append({"id": rid, "workload_idx": wi, "variant_idx": vi, "block": block, "position": 0,
                         "warmup": 0, "status": "ok", "wall_s": 1.0, "extra": {},
                         "metrics": {metric: v, "peak_rss_mb": 10.0 + vi, "wall_s": 1.0}})
    defs = [d | {"workload_idx": wi} for wi in range(len(workloads)) for d in (
        {"name": metric, "unit": "ops/s", "higher_is_better": int(higher), "source": "json", "primary_metric": 1},
        {"name": "peak_rss_mb", "unit": "MiB", "higher_is_better": 0, "source": "run", "primary_metric": 0})]
    return Experiment(1, {"status": "complete", "title": "t"}, {}, {"usable_cores": cores},
                      [{"idx": i, "name": n, "argv": [], "params": p, "info": {}}
                       for i, (n, p) in enumerate(workloads)],
                      [{"label": lab} for lab in labels], defs, {}, runs)


def noisy(center: float, n: int = 10, spread: float = 0.01, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(center * (1 + spread * rng.standard_normal(n)))


def test_best_and_cheapest_within_noise():
    labels = ["p0", "p1", "p2", "p3"]
    centers = [10.0, 99.0, 100.0, 100.5]
    data = {(0, i): noisy(c, seed=i) for i, c in enumerate(centers)}
    a = analyze(fake_experiment(labels, [("w", {})], data))
    s = {"tunable": "PAD", "points": [{"variant": lab, "value": v, "text": str(v)}
                                      for lab, v in zip(labels, [0, 1, 2, 3])]}
    [curve] = sweep_stats.sweep_results(a, [s])
    assert curve.best.text == "3" or curve.best.text == "2"
    # 99 is not different from ~100 at 1% noise; 10 is.
    assert curve.points[0].vs_best.verdict == "worse" and not curve.points[0].within_noise
    assert curve.cheap.text == "1"
    assert curve.points[1].rss.median == 11.0
    assert not curve.notes


def test_lower_is_better_curve_and_too_few_runs_note():
    labels = ["a", "b"]
    data = {(0, 0): [5.0, 5.1, 4.9], (0, 1): [1.0, 1.1, 0.9]}
    a = analyze(fake_experiment(labels, [("w", {})], data, metric="ms", higher=False))
    [curve] = sweep_stats.sweep_results(a, [{"tunable": "X", "points": [{"variant": "b", "value": 2},
                                                                  {"variant": "a", "value": 1}]}])
    assert [p.text for p in curve.points] == ["1", "2"]   # sorted by value
    # Paired in blocks (the one engine), 3 blocks of a x5 difference decide: a is worse than the best.
    assert curve.best.label == "b" and curve.cheap.label == "b"
    assert curve.points[0].vs_best.method == "paired" and curve.points[0].vs_best.verdict == "worse"
    data = {(0, 0): [5.0], (0, 1): [1.0]}
    a = analyze(fake_experiment(labels, [("w", {})], data, metric="ms", higher=False))
    [curve] = sweep_stats.sweep_results(a, [{"tunable": "X", "points": [{"variant": "b", "value": 2},
                                                                  {"variant": "a", "value": 1}]}])
    assert "too few for an interval" in curve.notes[0]


def scaling_for(throughputs: list[float], threads=(1, 2, 4), cores=2, n=10):
    ws = [(f"larson threads={t}", {"threads": str(t)}) for t in threads]
    data = {(i, 0): noisy(tp, n=n, seed=i) for i, tp in enumerate(throughputs)}
    a = analyze(fake_experiment(["glibc"], ws, data, cores=cores))
    s = {"param": "threads", "base": "larson", "fixed": {},
         "points": [{"workload": i, "value": t, "text": str(t)} for i, t in enumerate(threads)]}
    [curve] = sweep_stats.sweep_results(a, [s])
    return curve.scaling


def test_scaling_stops_where_more_threads_give_less_than_ten_percent():
    sc = scaling_for([100.0, 190.0, 200.0])
    assert [s.threads for s in sc.steps] == [1, 2, 4]
    assert sc.steps[1].efficiency == pytest.approx(0.95, rel=0.03)
    assert sc.steps[2].efficiency == pytest.approx(0.5, rel=0.03)
    assert sc.stops_at == 2 and "less than +10%" in sc.reason
    assert "up to 4 threads but only 2 cores" in sc.cores_note


def test_scaling_stops_at_a_significant_drop_and_goes_on_when_it_scales():
    sc = scaling_for([100.0, 80.0, 70.0])
    assert sc.stops_at == 1 and "significant drop" in sc.reason
    sc = scaling_for([100.0, 200.0, 390.0], cores=8)
    assert sc.stops_at is None and sc.reason.startswith("still scaling at 4 threads")
    assert sc.cores_note is None


def test_scaling_efficiency_is_relative_to_the_fewest_threads():
    sc = scaling_for([200.0, 380.0], threads=(2, 4))
    assert sc.steps[0].efficiency == 1.0 and sc.steps[1].efficiency == pytest.approx(0.95, rel=0.03)


def ablation_on(base, a_, b_, both, spread=0.01):
    labels = ["glibc", "glibc A=1", "glibc B=1", "glibc A=1,B=1"]
    data = {(0, i): noisy(c, spread=spread, seed=i) for i, c in enumerate([base, a_, b_, both])}
    a = analyze(fake_experiment(labels, [("w", {})], data))
    s = {"ablation": {"baseline": "glibc", "combined": "glibc A=1,B=1",
                      "settings": [{"setting": "A=1", "variant": "glibc A=1"},
                                   {"setting": "B=1", "variant": "glibc B=1"}]}}
    [r] = sweep_stats.ablation_result(a, s)
    return r


def test_ablation_independent_effects_do_not_interact():
    r = ablation_on(100.0, 150.0, 120.0, 180.0)
    assert [e.comparison.verdict for e in r.singles] == ["better", "better"]
    assert r.singles[0].comparison.ratio == pytest.approx(1.5, rel=0.02)
    assert r.expected == pytest.approx(1.8, rel=0.03)
    assert r.interaction == pytest.approx(1.0, abs=0.03)
    assert r.interaction_low <= 1 <= r.interaction_high and r.verdict == "none"


def test_ablation_detects_redundant_and_synergistic_settings():
    r = ablation_on(100.0, 150.0, 150.0, 150.0)      # either one alone does the whole job
    assert r.verdict == "antagonism" and r.interaction_high < 1
    assert r.interaction == pytest.approx(150 / 225, rel=0.03)
    r = ablation_on(100.0, 100.0, 100.0, 150.0)      # only together they help
    assert r.verdict == "synergy" and r.interaction_low > 1
