"""tune's race on the fake executor: a candidate decided worse leaves the race at the look that
decides it, so the remaining blocks go to the candidates still open."""

from __future__ import annotations

import re

import pytest

from alloclab.catalog.variants import parse_variants
from alloclab.measure import machine
from alloclab.measure.fake import FakeExecutor
from alloclab.measure.runner import Runner, Settings
from alloclab.stats.analysis import analyze
from alloclab.stats.looks import Judge
from alloclab.store.db import Store
from alloclab.stats.tune_answer import Outcome, Reason, State, answer
from alloclab.tune.prescribe import Candidate
from alloclab.workloads.command import Workload

VARIANTS = ["glibc", "glibc:MALLOC_ARENA_MAX=1", "glibc:MALLOC_TOP_PAD_=8M"]


@pytest.fixture(autouse=True)
def no_perf(monkeypatch):
    monkeypatch.setattr(machine, "perf_counters", lambda: (False, "fake executor"))


def mean_s(env: dict, n: int) -> float:
    """ARENA_MAX=1 is 40% slower (decided at once); TOP_PAD is 3% faster with 6% run-to-run swings."""
    if "MALLOC_ARENA_MAX" in env:
        return 0.14
    if "MALLOC_TOP_PAD_" in env:
        return 0.1 * (0.97 + (0.06 if n % 2 else -0.06))
    return 0.1


def test_a_decided_loser_leaves_the_race_early_and_the_answer_rules_it_out(tmp_path):
    store = Store(tmp_path / "race.db")
    s = Settings(warmup=0, verify=False, until_decided=True, runs=4, first_look=4, max_runs=40, max_seconds=1e9,
                 kind="tune")
    runner = Runner(store, [Workload("fake", ["fake"], executor=FakeExecutor(mean_s, noise=0.01))],
                    parse_variants(VARIANTS), s, judge=Judge())
    runner.run()
    e = store.load(runner.exp_id)
    runs = {}
    for r in e.runs:
        runs[r.variant_idx] = runs.get(r.variant_idx, 0) + 1
    assert runs[1] == 4, runs          # decided worse at the first look: no more blocks
    assert runs[2] > runs[1], runs     # the open candidate got the blocks that followed
    cands = [Candidate(VARIANTS[1], "glibc-arena-bloat", "less memory", "m", "w"),
             Candidate(VARIANTS[2], "glibc-trim-churn", "faster", "m", "w")]
    ans = answer(analyze(e), cands)
    out = next(o for o in ans.others if o.label == "glibc ARENA_MAX=1")
    assert out.outcome == Outcome.RULED_OUT and out.reason == Reason.WORSE, out
    assert all(p.label != "glibc ARENA_MAX=1" for p in ans.picks)


def _race(tmp_path, mean, max_runs: int):
    store = Store(tmp_path / "r.db")
    s = Settings(warmup=0, verify=False, until_decided=True, runs=4, first_look=4, max_runs=max_runs,
                 max_seconds=1e9, kind="tune")
    runner = Runner(store, [Workload("fake", ["fake"], executor=FakeExecutor(mean, noise=0.01))],
                    parse_variants(VARIANTS[:2]), s, judge=Judge())
    runner.run()
    cands = [Candidate(VARIANTS[1], "glibc-arena-bloat", "less memory", "m", "w")]
    return answer(analyze(store.load(runner.exp_id)), cands)


def test_an_open_candidate_is_never_answered_with_keep_the_default(tmp_path):
    # 4% faster with 10% swings run by run: still open at --max-runs 6.
    ans = _race(tmp_path, lambda env, n: 0.1 * (0.96 + (0.1 if n % 2 else -0.1)) if env else 0.1, 6)
    assert ans.picks == [] and ans.state == State.OPEN and ans.largest_open.label == "glibc ARENA_MAX=1"
    from alloclab.report.tune import state_line
    assert "not shown to be right" in state_line(ans)[1] and "keep the default" not in state_line(ans)[1]


def test_keep_the_default_only_when_every_candidate_is_decided_not_better(tmp_path):
    ans = _race(tmp_path, lambda env, n: 0.14 if env else 0.1, 12)
    assert ans.picks == [] and ans.state == State.KEEP and ans.largest_open is None
    from alloclab.report.tune import state_line
    assert "keep the default" in state_line(ans)[1]


def test_a_screen_is_planned_only_when_the_full_race_would_not_fit():
    from alloclab.tune import screen
    # PostgreSQL under tune: 6 candidates, 2 client counts, about 22 s a run, 23.5 min left: the first
    # look of all of them would take 7 x 7 x 2 x 22 s = 36 min.
    sp = screen.plan(6, 2, 22.0, 1410.0, first_look=6, warmup=1)
    assert sp is not None and sp.runs == 1 and "6 candidates" in sp.why
    # A program of a tenth of a second: every candidate races.
    assert screen.plan(9, 1, 0.1, 600.0, first_look=10, warmup=1) is None
    # Two candidates: nothing to choose between.
    assert screen.plan(2, 2, 22.0, 100.0, first_look=4, warmup=1) is None
    # A program of 1.6 s with 7 candidates and 173 s left: every candidate reaches the first look
    # (8 x 7 x 1.6 s = 90 s); the race is not sized as if each ran to its 300th run.
    assert screen.plan(7, 1, 1.6, 173.0, first_look=6, warmup=1) is None
    # Ceph's RBD client: 9 candidates x 4 workloads at 4.5 s a run, 1415 s left. Their first look alone
    # fits (7.5 x 10 x 4 x 4.5 s = 1350 s), but then nothing is left to take the 3 glibc fixes of
    # the default's own mechanisms on from 5 runs to 20, and nothing gets decided: a screen.
    assert screen.plan(9, 4, 4.5, 1415.0, first_look=5, warmup=1) is None
    sp = screen.plan(9, 4, 4.5, 1415.0, first_look=5, warmup=1, own=3, own_runs=20)
    assert sp is not None and "3 fixes of the default's own mechanisms on to 20 runs" in sp.why, sp
    assert "variants x 4 workloads x 4.5 s" in sp.why, sp
    # The same time in one workload and one fix: each said in the singular.
    one = screen.plan(9, 1, 18.0, 1415.0, first_look=5, warmup=1, own=1, own_runs=20)
    assert one is not None and "the 1 fix of the default's" in one.why and "x 1 workload x" in one.why, one
    # With time for both, every candidate races.
    assert screen.plan(9, 4, 4.5, 2500.0, first_look=5, warmup=1, own=3, own_runs=20) is None
    # How many reach the first look after a screen: (warm-up + 6 runs + a profile) x 2 workloads x 22 s = 374 s each.
    assert screen.race_slots(2, 22.0, 1130.0, first_look=6, warmup=1) == 2
    assert screen.race_slots(1, 0.5, 600.0, first_look=6, warmup=1) == 140
    assert screen.race_slots(2, 22.0, 300.0, first_look=6, warmup=1) == 1   # at least one
    # PostgreSQL: 17 s a run, 2 client counts, 1176 s left after the screen: the pad and the default to
    # the recipe's 12 runs first (8 more x 2 x 2 x 17 s = 544 s), then one more candidate to its first look.
    assert screen.race_slots(2, 17.0, 1176.0, first_look=4, warmup=1, own=1, own_runs=12) == 1
    assert screen.race_slots(2, 17.0, 1176.0, first_look=4, warmup=1) == 4


def test_the_screen_keeps_the_leaders_and_the_race_decides_on_its_own_runs(tmp_path):
    from alloclab.tune import screen
    specs = ["glibc", "glibc:MALLOC_ARENA_MAX=1", "glibc:MALLOC_TOP_PAD_=8M", "glibc:MALLOC_TRIM_THRESHOLD_=8M",
             "glibc:MALLOC_MMAP_MAX_=0"]
    speed = {"MALLOC_ARENA_MAX": 0.14, "MALLOC_TOP_PAD_": 0.08, "MALLOC_TRIM_THRESHOLD_": 0.09,
             "MALLOC_MMAP_MAX_": 0.12}

    def mean(env, n):
        return next((t for k, t in speed.items() if k in env), 0.1)

    store = Store(tmp_path / "s.db")
    workload = Workload("fake", ["fake"], executor=FakeExecutor(mean, noise=0.01))
    runner = Runner(store, [workload], parse_variants(specs), Settings(runs=1, warmup=0, verify=False,
                                                                       kind="tune-screen"), judge=Judge())
    runner.run()
    cands = [Candidate(specs[1], "glibc-arena-bloat", "less memory", "m", "w")] + \
        [Candidate(s, "glibc-trim-churn", "faster", "m", "w") for s in specs[2:]]
    chosen = screen.finalists(analyze(store.load(runner.exp_id)), cands, slots=2)
    # Two slots: the fastest and the runner-up; the memory candidate only where it held less than the default.
    assert [c.spec for c in chosen.kept] == [specs[2], specs[3]]
    assert len(chosen.screened_out) == 2
    # Each screened out with its estimate (one run: no interval yet), slower here: wall time +20%.
    mmap = next(s for s in chosen.screened_out if "MMAP_MAX=0" in s["label"])
    assert [e["axis"] for e in mmap["estimates"]] == ["speed"] and 1.15 <= mmap["estimates"][0]["ratio"] <= 1.25, mmap
    assert all("verdict" not in s for s in chosen.screened_out)
    from alloclab.report.tune import _screened_line
    assert re.search(r"speed: \+(1[5-9]|2[0-5])\.\d%", _screened_line(mmap)), _screened_line(mmap)
    assert [e["metric"] for e in mmap["estimates"]] == ["wall_s"], mmap
    one = screen.finalists(analyze(store.load(runner.exp_id)), cands, slots=1)
    assert [c.spec for c in one.kept] == [specs[2]] and len(one.screened_out) == 3
    # The setting of a rule that fired stays a finalist, however it screened on one run: the
    # mechanism's own fix (the screen's noise once dropped PostgreSQL's pad at "x1.10").
    kept = screen.finalists(analyze(store.load(runner.exp_id)), cands, slots=1, fired=["glibc-trim-churn"],
                            screen_runs=1)
    assert {c.spec for c in kept.kept} == set(specs[2:])
    # After two runs or more, only an interval wholly on the worse side drops it.
    dropped = screen.finalists(analyze(store.load(runner.exp_id)), cands, slots=1, fired=["glibc-arena-bloat"],
                               screen_runs=2)
    assert specs[1] in {c.spec for c in dropped.kept}   # no interval after one run: not wholly worse


def _leader_race(tmp_path, judge, peak_kb=lambda env: 10_240):
    """TOP_PAD four times as fast (decided at the first look); ARENA_MAX=1 2% slower with 8% swings run
    by run: undecided against the default for many looks, and at most ~1.1x faster at the first."""
    def mean(env, n):
        if "MALLOC_TOP_PAD_" in env:
            return 0.025
        if "MALLOC_ARENA_MAX" in env:
            return 0.1 * (1.02 + (0.08 if n % 2 else -0.08))
        return 0.1
    store = Store(tmp_path / "leader.db")
    s = Settings(warmup=0, verify=False, until_decided=True, runs=4, first_look=4, max_runs=40, max_seconds=1e9,
                 kind="tune")
    runner = Runner(store, [Workload("fake", ["fake"], executor=FakeExecutor(mean, noise=0.01, peak_kb=peak_kb))],
                    parse_variants(VARIANTS), s, judge=judge)
    runner.run()
    e = store.load(runner.exp_id)
    runs = {}
    for r in e.runs:
        runs[r.variant_idx] = runs.get(r.variant_idx, 0) + 1
    return e, runs


def test_a_candidate_that_cannot_reach_the_leader_is_dropped_and_ruled_out(tmp_path):
    from alloclab.tune.race import RaceJudge

    e, runs = _leader_race(tmp_path, RaceJudge())
    assert runs[2] == 4, runs      # the leader: decided better at the first look
    assert runs[1] == 4, runs      # below the leader at the first look, though undecided against glibc
    assert e.config.dropped == [[0, 1, "glibc TOP_PAD=8M", 4]]
    a = analyze(e)
    c = a.workloads[0].primary().cells[1].comparison
    assert c.verdict == "undecided" and c.stopped == "leader"
    cands = [Candidate(VARIANTS[1], "glibc-arena-bloat", "less memory", "m", "w"),
             Candidate(VARIANTS[2], "glibc-trim-churn", "faster", "m", "w")]
    ans = answer(a, cands)
    assert [p.label for p in ans.picks] == ["glibc TOP_PAD=8M"]
    dropped = next(o for o in ans.others if o.label == "glibc ARENA_MAX=1")
    assert ans.of(Outcome.OPEN) == [] and dropped.outcome == Outcome.RULED_OUT, ans.others
    assert dropped.reason == Reason.BELOW_LEADER and dropped.leader == "glibc TOP_PAD=8M" and dropped.runs == 4
    from alloclab.report.tune import sections
    ruled = dict((t, ls) for t, _, ls in sections(ans))["Ruled out (decided worse or equivalent, or below the leader)"]
    assert any("dropped at 4 runs" in line and "below the least glibc TOP_PAD=8M" in line for line in ruled), ruled


def test_without_the_racing_rule_the_same_candidate_runs_on(tmp_path):
    # The control: compare's judge keeps it until its own comparison is decided.
    _, runs = _leader_race(tmp_path, Judge())
    assert runs[1] > 4, runs


def test_a_candidate_that_may_hold_least_memory_stays_in_the_race(tmp_path):
    from alloclab.tune.race import RaceJudge

    # ARENA_MAX=1 holds half the memory: below the leader on speed, but the memory pick, whose cost
    # in speed the answer states: it races on until that is decided.
    e, runs = _leader_race(tmp_path, RaceJudge(), peak_kb=lambda env: 5_120 if "MALLOC_ARENA_MAX" in env else 10_240)
    assert runs[1] > 4 and not e.config.dropped, runs
    # The control: the same memory as the default's (equivalent), and it leaves at the first look.
    (tmp_path / "x").mkdir()
    e, runs = _leader_race(tmp_path / "x", RaceJudge(),
                           peak_kb=lambda env: 10_240 + (1 if "MALLOC_ARENA_MAX" in env else 0))
    assert runs[1] == 4 and e.config.dropped, runs


def _wobbly_pad(above: float = 0.10, swing: float = 0.06, arena_kb: int = 5_120):
    """Peak RSS: TOP_PAD's `above` the default's with `swing` run by run (undecided for some looks);
    ARENA_MAX=1 holds `arena_kb` (half: it races on as the memory pick); the default holds 10 MiB."""
    n = 0

    def peak_kb(env):
        nonlocal n
        if "MALLOC_TOP_PAD_" in env:
            n += 1
            return int(10_240 * (1 + above + (swing if n % 2 else -swing)))
        return arena_kb if "MALLOC_ARENA_MAX" in env else 10_240
    return peak_kb


def test_the_speed_pick_runs_on_while_its_memory_cost_is_open_and_others_race(tmp_path):
    from alloclab.tune.race import RaceJudge

    # TOP_PAD is decided 4x faster at the first look; its peak RSS is not. ARENA_MAX=1 races on for
    # memory, so blocks follow anyway: the pick runs in them, and its cost beside it gets decided.
    e, runs = _leader_race(tmp_path, RaceJudge(), peak_kb=_wobbly_pad())
    rss = analyze(e).workloads[0].row("peak_rss_mb").cells[2].comparison
    assert 4 < runs[2] < runs[1] and rss.verdict == "worse", (runs, rss.verdict)   # then it left
    # The control: a pick whose memory is decided at the first look (the default's, exactly) leaves then.
    (tmp_path / "x").mkdir()
    e, runs = _leader_race(tmp_path / "x", RaceJudge(),
                           peak_kb=lambda env: 5_120 if "MALLOC_ARENA_MAX" in env else 10_240)
    assert runs[2] == 4 and runs[1] > 4, runs


def test_where_the_budget_cannot_take_every_candidate_to_the_next_look_the_own_fix_goes_on():
    from alloclab.tune.race import narrowed
    open_ = {0: {1, 2, 3, 4, 5, 6}, 1: {1, 2, 3, 4, 5, 6}}
    most = {1: 1.3, 2: 1.05, 3: 1.6, 4: 1.02, 5: 1.1, 6: 1.2}
    # 300 s left, 16 s a run, from 4 runs to 7: k candidates with the default cost 3 x 2 x 16 x (k + 1) s.
    assert narrowed(open_, (300.0, 16.0, 4, 7, None), own={2}, most=most) == {2, 3}   # the own fix, the most to gain
    keep = narrowed(open_, (500.0, 16.0, 4, 7, None), own={2}, most=most)
    assert keep == {2, 3, 1, 6}, keep
    assert narrowed(open_, (50.0, 16.0, 4, 7, None), own={2}, most=most) == {2}   # one at least: the own fix
    # Room for all of them: nothing closes.
    assert narrowed(open_, (1e6, 16.0, 4, 7, None), own={2}, most=most) == set(range(1, 7))


def test_the_own_fix_keeps_the_budget_for_its_look_beyond_the_others():
    from alloclab.tune.race import narrowed
    # PostgreSQL's race at its first look: the pad (own) and tcmalloc at 2 client counts, 16.3 s a run,
    # looks 4, 7, 12. The pad and the default to 12 cost 8 x 2 x 2 x 16.3 = 522 s; tcmalloc to 7, 98 s more.
    open_ = {0: {1, 2}, 1: {1, 2}}
    most = {1: 1.3, 2: 1.2}
    assert narrowed(open_, (550.0, 16.3, 4, 7, 12), own={1}, most=most) == {1}
    assert narrowed(open_, (650.0, 16.3, 4, 7, 12), own={1}, most=most) == {1, 2}
    # Where the pad could not reach 12 even alone, its further look reserves nothing: both go to 7.
    assert narrowed(open_, (300.0, 16.3, 4, 7, 12), own={1}, most=most) == {1, 2}
    # Without an own fix open, the further look changes nothing.
    assert narrowed(open_, (550.0, 16.3, 4, 7, 12), own=set(), most=most) == {1, 2}


def test_of_two_own_fixes_the_budget_keeps_the_one_that_may_be_better_on_both():
    from alloclab.tune.race import narrowed
    # A threaded CPython program at its first look, 4 runs, 4.3 s a run, 59 s left: room for one
    # candidate to 8. The pad (own, the most to gain on speed, peak RSS decided worse) and ARENA_MAX=2
    # (own, peak RSS decided better, speed open): the one that may be better on both goes on.
    open_ = {0: {1, 2, 3}}
    most = {1: 1.6, 2: 1.3, 3: 1.4}
    assert narrowed(open_, (40.0, 4.3, 4, 8, None), own={1, 2}, most=most, hopeful_={2}) == {2}
    # The control: with neither hopeful, the own fix that may gain the most.
    assert narrowed(open_, (40.0, 4.3, 4, 8, None), own={1, 2}, most=most) == {1}


def test_a_screen_line_names_each_memory_metric_where_an_axis_has_several():
    from alloclab.report.tune import _screened_line
    nan = float("nan")
    est = lambda axis, w, m, r: {"axis": axis, "workload": w, "metric": m, "ratio": r, "low": nan, "high": nan}
    s = {"label": "tcmalloc AGGRESSIVE_DECOMMIT=true", "rule": "tcmalloc-release", "expect": "less memory", "runs": 1,
         "worse_throughout": False,
         "estimates": [est("memory", "1 client", "rss_after_load_mb", 1.27),
                       est("memory", "1 client", "rss_after_disconnect_mb", 1.25),
                       est("speed", "1 client", "tps", 1.1), est("speed", "2 clients", "tps", 1.02)]}
    line = _screened_line(s)
    # PostgreSQL's screen printed "1 client: +27.0%; 1 client: +27.0%": two metrics, unnamed.
    assert "1 client: RSS after load +27.0%; 1 client: RSS after disconnect +25.0%" in line, line
    assert "speed: 1 client: +10.0%; 2 clients: +2.0%" in line, line


def test_a_candidate_better_on_speed_races_on_alone_until_its_memory_may_make_it_better_on_both(tmp_path):
    from alloclab.stats.best import better_on_both
    from alloclab.tune.race import RaceJudge

    # TOP_PAD is decided 4x faster at the first look; its peak RSS swings 1.5% around the default's:
    # undecided then, equivalent after more runs. ARENA_MAX=1 leaves below it, so TOP_PAD runs on
    # alone with the default until the answer can say "better on both".
    e, runs = _leader_race(tmp_path, RaceJudge(), peak_kb=_wobbly_pad(above=0.0, swing=0.015, arena_kb=10_240))
    a = analyze(e)
    assert runs[1] == 4 and runs[2] > 4, runs
    assert a.workloads[0].row("peak_rss_mb").cells[2].comparison.verdict == "equivalent"
    assert better_on_both(a, 2)
    # The control: its memory decided worse at the first look (twice the default's): it leaves then.
    (tmp_path / "x").mkdir()
    e, runs = _leader_race(tmp_path / "x", RaceJudge(),
                           peak_kb=lambda env: 20_480 if "MALLOC_TOP_PAD_" in env else 10_240)
    assert runs == {0: 4, 1: 4, 2: 4}, runs


def _dominance_race(tmp_path, pad_kb: int):
    """ARENA_MAX=1 about x3.4 the default's time with swings that keep it undecided at the first look,
    holding half the memory; TOP_PAD as fast as the default, holding `pad_kb`. A race's design."""
    from alloclab.tune.race import RaceJudge

    def mean(env, n):
        if "MALLOC_ARENA_MAX" in env:
            return 0.4 * (1.8 if n % 2 else 0.5)
        return 0.1
    peak = lambda env: 5_120 if "MALLOC_ARENA_MAX" in env else pad_kb if "MALLOC_TOP_PAD_" in env else 10_240
    store = Store(tmp_path / "dominance.db")
    s = Settings(warmup=0, verify=False, until_decided=True, race=True, runs=5, first_look=5, max_runs=40,
                 max_seconds=1e9, kind="tune")
    runner = Runner(store, [Workload("fake", ["fake"], executor=FakeExecutor(mean, noise=0.01, peak_kb=peak))],
                    parse_variants(VARIANTS), s, judge=RaceJudge())
    runner.run()
    e = store.load(runner.exp_id)
    return e, sum(1 for r in e.runs if r.variant_idx == 1)


def test_a_candidate_x3_slower_than_one_that_holds_no_more_stops_at_the_first_look(tmp_path):
    e, runs = _dominance_race(tmp_path, pad_kb=5_120)
    a = analyze(e)
    speed = a.workloads[0].primary().cells[1].comparison
    assert speed.verdict == "undecided" and speed.gain < 1 / 3, speed   # the rule, not a verdict, stopped it
    assert runs == 5 and e.config.dropped == [[0, 1, "glibc TOP_PAD=8M", 5]], (runs, e.config.dropped)
    # The control: where the fast one holds the default's memory, the slow one may be the memory pick.
    (tmp_path / "x").mkdir()
    e, runs = _dominance_race(tmp_path / "x", pad_kb=10_240)
    assert runs > 5 and not any(d[1] == 1 for d in (e.config.dropped or [])), (runs, e.config.dropped)


def test_a_race_design_is_planned_over_its_budget_and_judges_few_blocks_by_the_plain_t():
    from alloclab.plan.design import Design
    from alloclab.stats import decide

    d = Design.race(40)
    assert d.looks == (5, 8, 12, 18, 27, 40) and all(abs(x - 0.05 / 6) < 1e-12 for x in d.look_alphas[:3])
    assert abs(sum(d.look_alphas) - 0.05) < 1e-12
    assert Design.of_stored(d.to_config(), None) == d
    logs = [0.10, 0.14, 0.12, 0.18, 0.11]
    plain = decide.yuen(logs, 0.99, trim_from=d.trim_from, plain_t=True)
    yuen = decide.yuen(logs, 0.99, df_drop=1, trim_from=d.trim_from)
    import numpy as np
    from scipy import stats
    sd = np.std(logs, ddof=1)
    assert abs(plain[2] - plain[1] - 2 * stats.t.ppf(0.995, 4) * sd / np.sqrt(5)) < 1e-9   # the textbook t
    assert (yuen[2] - yuen[1]) > 1.9 * (plain[2] - plain[1])   # Yuen's factor and one df fewer


def test_the_screen_gives_its_first_slot_to_a_candidate_it_saw_better_on_both(tmp_path):
    from alloclab.tune import screen
    # TOP_PAD the fastest (expected faster); ARENA_MAX=1 a little faster and holding half the memory
    # (expected less memory): better on both on the screen's run, so it takes the one slot.
    specs = ["glibc", "glibc:MALLOC_ARENA_MAX=1", "glibc:MALLOC_TOP_PAD_=8M"]
    speed = {"MALLOC_ARENA_MAX": 0.09, "MALLOC_TOP_PAD_": 0.07}
    mean = lambda env, n: next((t for k, t in speed.items() if k in env), 0.1)

    def run(peak, name):
        store = Store(tmp_path / f"{name}.db")
        workload = Workload("fake", ["fake"], executor=FakeExecutor(mean, noise=0.01, peak_kb=peak))
        runner = Runner(store, [workload], parse_variants(specs), Settings(runs=1, warmup=0, verify=False,
                                                                           kind="tune-screen"), judge=Judge())
        runner.run()
        cands = [Candidate(specs[1], "glibc-arena-bloat", "less memory", "m", "w"),
                 Candidate(specs[2], "glibc-trim-churn", "faster", "m", "w")]
        return [c.spec for c in screen.finalists(analyze(store.load(runner.exp_id)), cands, slots=1).kept]
    assert run(lambda env: 5_120 if "MALLOC_ARENA_MAX" in env else 10_240, "half") == [specs[1]]
    # The control: holding the default's memory, it is no better on both, and speed's leader goes first.
    assert run(lambda env: 10_240, "same") == [specs[2]]


def _pad_race_answer(path, arena_s: float, arena_kb: int, pad_kb: int, pad_speed: float, arena_rule: tuple):
    """A six-block race: ARENA_MAX=1 at `arena_s` (the default 0.1 s) holding `arena_kb` (the default
    10,240), both decided; TOP_PAD holding `pad_kb` at `pad_speed` the default's time by its estimate,
    with swings that keep its speed open. `arena_rule`: (rule, expect) of ARENA_MAX=1's candidate."""
    def mean(env, n):
        if "MALLOC_ARENA_MAX" in env:
            return arena_s
        if "MALLOC_TOP_PAD_" in env:
            return 0.1 * (pad_speed + (0.3 if n % 2 else -0.3))
        return 0.1
    store = Store(path)
    peak = lambda env: arena_kb if "MALLOC_ARENA_MAX" in env else pad_kb if "MALLOC_TOP_PAD_" in env else 10_240
    runner = Runner(store, [Workload("fake", ["fake"], executor=FakeExecutor(mean, noise=0.01, peak_kb=peak))],
                    parse_variants(VARIANTS), Settings(runs=6, warmup=0, verify=False, kind="tune"), judge=Judge())
    runner.run()
    pad_rule = ("glibc-trim-churn", "faster") if arena_rule[1] == "less memory" else ("glibc-arena-free", "less memory")
    cands = [Candidate(VARIANTS[1], *arena_rule, "m", "w"), Candidate(VARIANTS[2], *pad_rule, "m", "w")]
    return answer(analyze(store.load(runner.exp_id)), cands)


def _slow_pick_answer(path, pad_kb: int):
    """ARENA_MAX=1 holds a fifth of the memory at twice the time; TOP_PAD faster by its estimate."""
    return _pad_race_answer(path, 0.2, 2_048, pad_kb, 0.9, ("glibc-arena-bloat", "less memory"))


def test_a_slow_memory_pick_does_not_lead_while_a_candidate_that_may_be_better_on_both_is_open(tmp_path):
    ans = _slow_pick_answer(tmp_path / "open.db", 9_000)
    assert ans.picks[0].label == "glibc ARENA_MAX=1" and ans.picks[0].goals[0].startswith("memory"), ans.picks
    assert ans.open_on_both is not None and ans.open_on_both.label == "glibc TOP_PAD=8M", ans.open_on_both
    assert ans.to_dict()["open_on_both"] == "glibc TOP_PAD=8M"
    # The control: holding more than the default, TOP_PAD cannot be better on both.
    ans = _slow_pick_answer(tmp_path / "more.db", 12_000)
    assert ans.open_on_both is None, ans.open_on_both


def test_the_answer_leads_with_the_open_candidate_before_a_slow_memory_pick(tmp_path):
    from alloclab.report.tune import answer_lines
    lines = [text for _, text in answer_lines(_slow_pick_answer(tmp_path / "lead.db", 9_000))]
    first = next(i for i, t in enumerate(lines) if t.startswith(("Not decided yet", "Best for", "Better on")))
    assert lines[first].startswith("Not decided yet: glibc TOP_PAD=8M may be better on both"), lines
    assert "costs x2.00 the time" in lines[first] and lines[first + 1].startswith("Best for memory: glibc ARENA_MAX=1")


def _costly_speed_pick_answer(path, pad_kb: int, pad_speed: float = 0.9):
    """ARENA_MAX=1 twice as fast, holding three times the memory; TOP_PAD at `pad_speed`."""
    return _pad_race_answer(path, 0.05, 30_720, pad_kb, pad_speed, ("allocator-bound", "faster"))


def test_a_speed_pick_that_holds_x3_does_not_lead_while_one_that_may_be_better_on_both_is_open(tmp_path):
    # A threaded CPython program: tcmalloc -35% wall at x3.97 at its end led, while glibc's
    # ARENA_MAX=2 (-65% at its end, its speed open at -20%) sat under "Also".
    from alloclab.report.tune import answer_lines
    ans = _costly_speed_pick_answer(tmp_path / "open.db", 5_120)
    assert ans.picks[0].label == "glibc ARENA_MAX=1" and ans.picks[0].goals[0] == "speed", ans.picks
    assert ans.open_on_both is not None and ans.open_on_both.label == "glibc TOP_PAD=8M", ans.open_on_both
    lines = [text for _, text in answer_lines(ans)]
    first = next(i for i, t in enumerate(lines) if t.startswith(("Not decided yet", "Best for", "Better on")))
    assert lines[first].startswith("Not decided yet: glibc TOP_PAD=8M may be better on both"), lines
    assert "The speed pick below, glibc ARENA_MAX=1, costs x3.00 the default's peak RSS" in lines[first], lines[first]
    # The control: holding more than the default, TOP_PAD cannot be better on both.
    ans = _costly_speed_pick_answer(tmp_path / "more.db", 12_000)
    assert ans.open_on_both is None, ans.open_on_both


def test_an_open_speed_a_little_on_the_slower_side_may_still_come_out_even(tmp_path):
    # Within the 2% margin on the slower side, its speed may be decided equivalent: better on both.
    # (1.053 +- 0.3 alternating: a geometric-mean estimate of about +1%.)
    ans = _costly_speed_pick_answer(tmp_path / "even.db", 5_120, pad_speed=1.053)
    assert ans.open_on_both is not None and ans.open_on_both.label == "glibc TOP_PAD=8M", ans.open_on_both
    # The control: 10% slower by its estimate, it is not offered as better on both.
    ans = _costly_speed_pick_answer(tmp_path / "slow.db", 5_120, pad_speed=1.10)
    assert ans.open_on_both is None, ans.open_on_both
