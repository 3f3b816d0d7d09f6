"""The recommendation: Pareto front, the decision rule with and without a memory budget, and the
lines that apply it. Pure logic on synthetic experiments written through Store's public methods;
tests/test_reports.py checks the same on real runs of real allocators."""

from __future__ import annotations

import math
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest

from alloclab.catalog import allocators as cat
from alloclab.stats.analysis import analyze
from alloclab.measure.run import RunResult
from alloclab.workloads.metrics import STANDARD, MetricDef
from alloclab.stats.dominance import pareto_front
from alloclab.stats.recommend import recommend
from alloclab.store.db import Store

JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
MIMALLOC = "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2"
MACHINE = {"host": "testhost", "cpu_model": "Test CPU", "cores": 2, "usable_cores": 2, "kernel": "6.1.0-test",
           "os": "Debian GNU/Linux 12", "glibc": "2.36", "allocators": {}, "thp": "madvise",
           "thp_defrag": "madvise", "governor": None, "perf_counters": False, "alloclab": "0.1.0",
           "python": "3.11", "memory_total_mb": 4096}


def variant(label: str, allocator: str | None = None, env: dict | None = None, speed=1.0, rss=1.0,
            status: str = "verified") -> dict:
    """speed / rss: a factor, or {workload index: factor}."""
    return {"label": label, "allocator": allocator, "env": env or {}, "speed": speed, "rss": rss, "status": status}


def synthetic(db: Path, variants: list[dict], *, workloads=(("prog 1", ["prog", "1"]),), runs: int = 8,
              metric: MetricDef | None = None, config: dict | None = None, base_speed: float = 1000.0,
              series: bool = True) -> tuple[Store, int]:
    """An experiment with deterministic numbers: each variant's primary metric and peak RSS are
    the baseline's times its factor, with a small spread that never overlaps a 2% difference."""
    metric = metric or MetricDef("ops", "ops/s", True, "regex", r"ops/s: (\d+)", primary=True)
    store = Store(db)
    store.db.execute("PRAGMA synchronous = OFF")  # test data: no fsync per committed run
    cfg = {"runs": runs, "warmup": 1, "timeout_s": None, "seed": 1, "verify": True,
           "schedule": "randomized interleaved blocks", "removed_env": {}, "perf_counters": False} | (config or {})
    exp = store.new_experiment("compare", workloads[0][0], cfg, MACHINE | {
        "allocators": {v["label"]: "1.0" for v in variants}})
    for wi, (name, argv) in enumerate(workloads):
        store.add_workload(exp, wi, name, argv, {}, {}, [metric, *STANDARD])
    for vi, v in enumerate(variants):
        obj = SimpleNamespace(label=v["label"], spec=v["label"], env=v["env"], settings=[], notes=[],
                              allocator=SimpleNamespace(name=v["allocator"]) if v["allocator"] else None,
                              library=v["env"].get("LD_PRELOAD"))
        store.add_variant(exp, vi, obj, "1.0")
        for wi in range(len(workloads)):
            store.set_verification(exp, wi, vi, v["status"], ["no binding seen"] if v["status"] == "ineffective"
                                   else [], [])

    def factor(f, wi):
        return f[wi] if isinstance(f, dict) else f

    for block in range(runs):
        for wi in range(len(workloads)):
            for vi, v in enumerate(variants):
                spread = 1 + 0.001 * ((block * 7) % 5)
                value = base_speed * factor(v["speed"], wi) * spread
                rss_mb = 100 * factor(v["rss"], wi) * spread
                wall = 1.0 / factor(v["speed"], wi) * spread
                rss_series = [(0.0, 1024), (wall / 2, int(rss_mb * 512)), (wall, int(rss_mb * 1024))] if series else []
                result = RunResult("ok", wall, exit_code=0, user_s=wall * 0.9, sys_s=wall * 0.1,
                                   max_rss_kb=int(rss_mb * 1024), peak_rss_kb=int(rss_mb * 1024),
                                   final_rss_kb=int(rss_mb * 1024), minflt=int(rss_mb * 256),
                                   stdout=f"ops/s: {value:.0f}\n", rss_series=rss_series)
                metrics = {"wall_s": wall, "cpu_s": wall, "user_s": wall * 0.9, "sys_s": wall * 0.1,
                           "peak_rss_mb": rss_mb, "max_rss_mb": rss_mb, "final_rss_mb": rss_mb,
                           "minflt": rss_mb * 256, "majflt": 0, "nvcsw": 1, "nivcsw": 2, metric.name: value}
                store.add_run(exp, wi, vi, block, vi, False, result, metrics, {"load": 0.1})
    store.finish(exp, "complete")
    return store, exp


def analysis_of(tmp_path, variants, **kw):
    store, exp = synthetic(tmp_path / "s.db", variants, **kw)
    return analyze(store.load(exp))


THREE = [variant("glibc", "glibc"),
         variant("jemalloc", "jemalloc", {"LD_PRELOAD": JEMALLOC}, speed=1.30, rss=1.05),
         variant("mimalloc", "mimalloc", {"LD_PRELOAD": MIMALLOC}, speed=1.10, rss=0.90)]


def test_pareto_front_keeps_exactly_the_undominated_points():
    pts = [(10, 100), (12, 120), (9, 90), (11, 130), (12, 120), (8, 95), (math.nan, 10)]
    # (11,130) is dominated by (12,120); (8,95) by (9,90); nan is never on the front; ties stay.
    assert pareto_front(pts) == [0, 1, 2, 4]
    assert pareto_front([]) == []


def test_fastest_significant_variant_is_recommended_with_how_to_apply(tmp_path):
    rec = recommend(analysis_of(tmp_path, THREE))
    c = rec.workloads[0]
    assert rec.overall is c  # one workload: the overall answer is that workload's
    assert c.pick == 1 and c.reason == "speed"
    assert c.sentence.startswith("Use jemalloc for prog 1: ops +30.0%")
    assert "peak RSS +5.0%" in c.sentence
    # glibc is slower and fatter than mimalloc: not on the front.
    assert sorted(c.front) == [1, 2]
    assert c.apply.env_line == f"LD_PRELOAD={JEMALLOC} prog 1"
    assert f'Environment="LD_PRELOAD={JEMALLOC}"' in c.apply.systemd.splitlines()
    assert "[Service]" in c.apply.systemd.splitlines()
    assert c.apply.build == cat.load_catalog().allocators["jemalloc"].build_option
    assert "-ljemalloc" in c.apply.build


def test_memory_budget_moves_the_choice_and_can_exclude_everything(tmp_path):
    a = analysis_of(tmp_path, THREE)
    within = recommend(a, max_rss_increase=0.02).workloads[0]
    assert within.pick == 2 and within.reason == "speed"  # jemalloc's +5% RSS is over a 2% budget
    assert within.sentence.startswith("Use mimalloc")
    assert recommend(a, max_rss_increase=0.05).workloads[0].pick == 1  # +5% is within +5%
    none = recommend(a, max_rss_increase=-0.20).workloads[0]
    assert none.pick is None and none.apply is None
    assert none.sentence.startswith("Nothing is worth changing for prog 1 within the -20% peak-RSS budget: jemalloc")


def test_nothing_significantly_better_says_so(tmp_path):
    same = [variant("glibc", "glibc"), variant("jemalloc", "jemalloc", {"LD_PRELOAD": JEMALLOC})]
    c = recommend(analysis_of(tmp_path, same)).workloads[0]
    assert c.pick is None and c.apply is None
    assert c.sentence.startswith("Nothing is worth changing for prog 1: every variant is decided equivalent to glibc")


def test_undecided_is_never_nothing_to_change(tmp_path):
    # One run per variant decides nothing: the sentence says what is open, never "nothing to change".
    c = recommend(analysis_of(tmp_path, THREE, runs=1)).workloads[0]
    assert c.pick is None
    assert c.sentence.startswith("Undecided for prog 1: no variant is decided better than glibc yet")
    assert "Nothing is worth changing" not in c.sentence
    # The open ones by name (their estimates are the answer's rows, above the sentence).
    assert "2 comparisons are still open: jemalloc, mimalloc" in c.sentence


def test_lower_is_better_primary_metric_is_oriented(tmp_path):
    latency = MetricDef("latency_ms", "ms", False, "regex", r"lat: (\d+)", primary=True)
    vs = [variant("glibc", "glibc"),
          variant("jemalloc", "jemalloc", {"LD_PRELOAD": JEMALLOC}, speed=0.80),   # 20% lower latency
          variant("mimalloc", "mimalloc", {"LD_PRELOAD": MIMALLOC}, speed=0.90)]
    c = recommend(analysis_of(tmp_path, vs, metric=latency)).workloads[0]
    assert c.metric == "latency_ms" and not c.higher_is_better
    assert c.pick == 1, c.sentence
    assert "latency_ms -20.0%" in c.sentence


def test_leaner_variant_is_recommended_for_memory_when_speed_is_unchanged(tmp_path):
    vs = [variant("glibc", "glibc"), variant("mimalloc", "mimalloc", {"LD_PRELOAD": MIMALLOC}, rss=0.80)]
    c = recommend(analysis_of(tmp_path, vs)).workloads[0]
    assert c.pick == 1 and c.reason == "memory"
    assert c.sentence.startswith("Use mimalloc for prog 1 to save memory: peak RSS -20.0%")


def test_ineffective_variant_is_never_recommended(tmp_path):
    vs = [variant("glibc", "glibc"),
          variant("jemalloc", "jemalloc", {"LD_PRELOAD": JEMALLOC}, speed=1.5, status="ineffective"),
          variant("mimalloc", "mimalloc", {"LD_PRELOAD": MIMALLOC}, speed=1.1)]
    c = recommend(analysis_of(tmp_path, vs)).workloads[0]
    assert c.pick == 2
    assert 1 not in c.front


def test_unverified_pick_carries_a_caveat(tmp_path):
    vs = [variant("glibc", "glibc"), variant("jemalloc", "jemalloc", {"LD_PRELOAD": JEMALLOC}, speed=1.3,
                                             status="unknown")]
    c = recommend(analysis_of(tmp_path, vs)).workloads[0]
    assert c.pick == 1
    assert c.caveats == ["jemalloc was not verified on prog 1 (verification off or inconclusive)"]


def test_tunables_are_quoted_for_the_shell_and_escaped_for_systemd(tmp_path):
    env = {"LD_PRELOAD": JEMALLOC, "MALLOC_CONF": "narenas:2,dirty_decay_ms:0", "ODD": 'a "b" 50% $HOME'}
    vs = [variant("glibc", "glibc"), variant("jemalloc tuned", "jemalloc", env, speed=1.2)]
    c = recommend(analysis_of(tmp_path, vs)).workloads[0]
    tokens = shlex.split(c.apply.env_line)
    assert tokens == [f"LD_PRELOAD={JEMALLOC}", "MALLOC_CONF=narenas:2,dirty_decay_ms:0",
                      'ODD=a "b" 50% $HOME', "prog", "1"]
    lines = c.apply.systemd.splitlines()
    assert 'Environment="MALLOC_CONF=narenas:2,dirty_decay_ms:0"' in lines
    # systemd would expand %-specifiers and end the string at a bare quote.
    assert 'Environment="ODD=a \\"b\\" 50%% $HOME"' in lines
    assert "MALLOC_CONF=narenas:2,dirty_decay_ms:0" in c.apply.build  # tunables stay in the environment


def test_settings_of_the_baseline_are_unset(tmp_path):
    vs = [variant("glibc arena 1", "glibc", {"MALLOC_ARENA_MAX": "1"}), variant("glibc", "glibc", speed=1.2)]
    c = recommend(analysis_of(tmp_path, vs)).workloads[0]
    assert c.pick == 1
    assert c.apply.env_line == "env -u MALLOC_ARENA_MAX prog 1"
    assert "UnsetEnvironment=MALLOC_ARENA_MAX" in c.apply.systemd.splitlines()
    assert c.apply.build is None  # glibc is the default: nothing to link


def test_overall_needs_better_somewhere_and_worse_nowhere(tmp_path):
    from alloclab.report.across import sentence

    two = (("prog 1", ["prog", "1"]), ("prog 2", ["prog", "2"]))
    vs = [variant("glibc", "glibc"),
          variant("jemalloc", "jemalloc", {"LD_PRELOAD": JEMALLOC}, speed={0: 1.2, 1: 1.1}, rss=1.02),
          variant("mimalloc", "mimalloc", {"LD_PRELOAD": MIMALLOC}, speed={0: 1.5, 1: 0.8}, rss=0.95)]
    rec = recommend(analysis_of(tmp_path, vs, workloads=two))
    assert [c.pick for c in rec.workloads] == [2, 1]
    o = rec.overall
    assert o.scope == "overall" and o.pick == 1
    assert o.points[2].speed_verdict == "worse"
    assert o.across.tallies[1].better == ("prog 1", "prog 2") and not o.across.tallies[1].worse
    assert o.across.tallies[2].better == ("prog 1",) and o.across.tallies[2].worse == ("prog 2",)
    # The line states the rule with the counts, and no mean: mimalloc wins no more workloads, so no clause.
    line = sentence(o)
    assert line == ("Use jemalloc for both workloads. jemalloc is better on 2, worse on none, equivalent on none, "
                    "undecided on none (the rule: better somewhere, worse nowhere, then better on the most).")
    assert o.apply.env_line == f"LD_PRELOAD={JEMALLOC} CMD"


def test_a_variant_better_on_more_workloads_is_told_why_it_is_not_the_pick(tmp_path):
    # mimalloc wins two workloads by far and loses the third; jemalloc wins one, by a little, and
    # loses none. A mean of ratios would pick mimalloc (x1.5 * x1.5 * x0.9); the rule picks jemalloc
    # and says why not mimalloc.
    from alloclab.report.across import sentence

    three = (("prog 1", ["prog", "1"]), ("prog 2", ["prog", "2"]), ("prog 3", ["prog", "3"]))
    vs = [variant("glibc", "glibc"),
          variant("jemalloc", "jemalloc", {"LD_PRELOAD": JEMALLOC}, speed={0: 1.1, 1: 1.0, 2: 1.0}),
          variant("mimalloc", "mimalloc", {"LD_PRELOAD": MIMALLOC}, speed={0: 1.5, 1: 1.5, 2: 0.9})]
    o = recommend(analysis_of(tmp_path, vs, workloads=three)).overall
    assert o.pick == 1 and o.points[2].speed > o.points[1].speed   # the larger mean is not the pick
    assert [(r.variant_idx, [w.value for w in r.why]) for r in o.across.rivals] == [(2, ["worse"])]
    line = sentence(o)
    assert "jemalloc is better on 1, worse on none, equivalent on 2, undecided on none" in line
    assert line.endswith("Better on more but not the pick: mimalloc (better on 2, worse on 1: ops in prog 3).")
    assert "geomean" not in line and "x1." not in line


def test_no_overall_pick_where_the_counts_tie(tmp_path):
    # x10 in one workload for jemalloc, x1.3 in another for mimalloc, no change elsewhere: each is
    # better on one and worse on none. A mean would crown jemalloc on one workload's x10; the counts
    # do not tell them apart, so no single pick: the best per workload and the Pareto set instead.
    from alloclab.report.across import sentence

    three = (("prog 1", ["prog", "1"]), ("prog 2", ["prog", "2"]), ("prog 3", ["prog", "3"]))
    vs = [variant("glibc", "glibc"),
          variant("jemalloc", "jemalloc", {"LD_PRELOAD": JEMALLOC}, speed={0: 10.0, 1: 1.0, 2: 1.0}, rss=1.0),
          variant("mimalloc", "mimalloc", {"LD_PRELOAD": MIMALLOC}, speed={0: 1.0, 1: 1.3, 2: 1.0}, rss=1.0)]
    rec = recommend(analysis_of(tmp_path, vs, workloads=three))
    o = rec.overall
    assert o.pick is None and o.across.tied == [1, 2] and not o.across.rivals
    assert o.sentence.startswith("No single variant is picked for all 3 workloads: jemalloc and mimalloc are each")
    assert "Best per workload: prog 1: jemalloc; prog 2: mimalloc" in o.sentence
    assert "Pareto set across the workloads" in o.sentence and "jemalloc, mimalloc" in o.sentence
    assert sentence(o).endswith("Each is better on 1, worse on none, equivalent on 2, undecided on none (the rule: "
                                "better somewhere, worse nowhere, then better on the most).")


def test_the_stored_demos_line_across_workloads_follows_the_rule_from_the_verdicts(tmp_path):
    # The pick, recomputed here from each workload's own verdicts: better on some workload's primary
    # metric, worse on none, then the most wins; every variant that wins more is named with its losses.
    import shutil

    from alloclab.report.across import sentence
    from alloclab.stats.results import build_results
    from alloclab.store.db import Store
    db = tmp_path / "demo.db"   # the store may write beside it: never open the checked-in copy
    shutil.copyfile(Path(__file__).parent / "fixtures" / "demo-suite-trimmed.db", db)
    r = build_results(Store(db).load(None), summary=True)
    o, choices, labels = r.recommendation.overall, r.recommendation.workloads, r.analysis.labels
    verdicts = {vi: [c.points[vi].speed_verdict for c in choices] for vi in range(len(labels))
                if vi != r.analysis.baseline_idx}
    eligible = {vi: (v.count("better"), -v.count("undecided")) for vi, v in verdicts.items()
                if "better" in v and "worse" not in v}
    best = max(eligible.values())
    assert [vi for vi, rank in eligible.items() if rank == best] == [o.pick]
    wins = verdicts[o.pick].count("better")
    more = {vi for vi, v in verdicts.items() if v.count("better") > wins}
    assert more and {x.variant_idx for x in o.across.rivals} == more
    line = sentence(o)
    for vi in more:
        assert labels[vi] in line.split("Better on more but not the pick: ")[1]
    assert f"{labels[o.pick]} is better on {wins}, worse on none" in line and "geomean" not in line


@pytest.mark.parametrize("lone", [0, 1])
def test_a_lone_variant_is_not_called_equivalent_to_itself(tmp_path, lone):
    rec = recommend(analysis_of(tmp_path, THREE[lone:lone + 1]))
    c = rec.workloads[0]
    assert c.pick is None
    assert "the only variant measured" in c.sentence and "equivalent" not in c.sentence
    # The example names another allocator than the one measured.
    example = c.sentence.split("(e.g. ")[1].split(")")[0].split()
    assert example[0] == "-a" and example[2] == "-a" and example[1] != example[3], c.sentence
