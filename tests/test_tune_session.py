"""TuneRun, start to answer, in seconds: a fake UI and clock over the FakeExecutor, with the diagnosis's
fingerprints read from real ones stored in tests/fixtures/tune (msgchurn: two threads churning 64 KiB
messages under glibc, whose arenas trim and regrow; cacheidle: a program linked to jemalloc that
fills a cache, frees it and idles). Each stop reason with its exit code, the screen's choice, the race
of every candidate to its first look, the raised run cap, and the one rule that picks the best."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from alloclab import defaults
from alloclab.catalog import allocators as cat
from alloclab.catalog.variants import parse_variants
from alloclab.measure import fingerprint as fingerprint_stage
from alloclab.measure import machine
from alloclab.measure.fake import FakeClock, FakeExecutor
from alloclab.measure.runner import Runner
from alloclab.store.db import Store
from alloclab.tune import session
from alloclab.tune.session import Stop, TuneOptions, TuneRun
from alloclab.workloads.command import Workload

FIXTURES = Path(__file__).parent / "fixtures" / "tune"


def stored(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


class FakeUI:
    """Runs each experiment on the runner with the fake clock; a fingerprint run stores the fixture's
    fingerprint of the allocator it names (a variant with settings: its allocator's)."""

    def __init__(self, clock: FakeClock, fingerprints: dict, monkeypatch):
        self.clock, self.fingerprints, self.said, self.told, self.kinds = clock, fingerprints, [], [], []
        monkeypatch.setattr(fingerprint_stage, "run_all", self._fingerprints)

    def _fingerprints(self, runner, root) -> None:
        for c in runner.cells:
            v = runner.variants[c.variant_idx]
            fp = self.fingerprints.get(v.label) or self.fingerprints.get(v.allocator.name if v.allocator else "")
            runner.store.set_fingerprint(runner.exp_id, c.workload_idx, c.variant_idx, fp)
            self.clock.now += fp.get("wall_s") or 1.0

    def run(self, store, workloads, variants, settings, judge=None) -> int:
        self.kinds.append(settings.kind)
        runner = Runner(store, workloads, variants, settings, judge=judge, clock=self.clock)
        runner.run()
        return runner.exp_id

    def note(self, text: str) -> None:
        pass

    def say(self, text: str, style: str = "") -> None:
        self.said.append(text)

    def tell(self, fact: dict) -> None:
        self.told.append(fact)


@pytest.fixture(autouse=True)
def no_perf(monkeypatch):
    monkeypatch.setattr(machine, "perf_counters", lambda: (False, "fake executor"))


@pytest.fixture(autouse=True)
def recorded_allocators(monkeypatch):
    """The machine the fixtures were recorded on: an allocator installed here since (tbbmalloc) has no
    fingerprint in them, so the fake tune sees only those they hold."""
    recorded = set(stored("msgchurn")["fingerprints"]) | {"glibc-linked"}
    installed = cat.is_installed
    monkeypatch.setattr(cat, "is_installed", lambda a: a.name in recorded and installed(a))


def _tune(tmp_path, monkeypatch, fps: dict, mean_s, budget_s: float, question=None, **opts):
    clock = FakeClock()
    ui = FakeUI(clock, fps, monkeypatch)
    executor = FakeExecutor(mean_s, noise=0.01, clock=clock)
    options = TuneOptions(tmp_path / "tune.db", budget_s=budget_s, verify=False, **opts)
    run = TuneRun(options, [Workload("fake", ["fake"], executor=executor)], defaults.TUNE, "fake", ui, clock=clock,
                  question=question)
    return run.run(), ui


def _msgchurn(tmp_path, monkeypatch, mean_s, budget_s: float, **opts):
    fps = stored("msgchurn")["fingerprints"]
    return _tune(tmp_path, monkeypatch, fps, mean_s, budget_s, **opts)


def pad_wins(env: dict, n: int) -> float:
    """glibc's arenas trim and regrow: 1.3 s; its pad or another allocator, 0.07 s."""
    return 0.07 if env else 1.3


def test_every_candidate_races_to_its_first_look_where_that_fits(tmp_path, monkeypatch):
    out, ui = _msgchurn(tmp_path, monkeypatch, pad_wins, 180.0)
    assert out.stop is None and ui.kinds == ["tune-diagnosis", "tune"], ui.kinds
    e = Store(tmp_path / "tune.db").load(out.race_id)
    labels = [v.label for v in e.variants]
    assert labels[0] == "glibc" and "glibc TOP_PAD=1M" in labels and {"tcmalloc", "jemalloc", "mimalloc"} <= set(labels)
    runs = {vi: len(e.cell_runs(0, vi)) for vi in range(len(labels))}
    assert all(n >= defaults.TUNE.early_look for n in runs.values()), runs
    # Decided at the first look: a tenfold effect with 1% noise needs no second.
    assert max(runs.values()) == defaults.TUNE.early_look, runs
    ans = out.results.tune
    assert ans.picks and ans.picks[0].goals[0] in ("both", "speed")
    assert e.config.tune.candidates[0].spec == "glibc:MALLOC_TOP_PAD_=1M"


def test_a_screen_only_where_one_look_at_every_candidate_does_not_fit(tmp_path, monkeypatch):
    # Five seconds a run (a server's): six variants to the first look would take 210 s of the 100 left.
    fps = {k: dict(v, wall_s=5.0) for k, v in stored("msgchurn")["fingerprints"].items()}
    out, ui = _tune(tmp_path, monkeypatch, fps, lambda env, n: 4.0 if env else 5.0, 120.0)
    assert ui.kinds == ["tune-diagnosis", "tune-screen", "tune"], ui.kinds
    rec = Store(tmp_path / "tune.db").load(out.race_id).config.tune
    raced = [c.spec for c in rec.candidates]
    # The fix of the default's own mechanism races first, whatever the screen says.
    assert raced[0] == "glibc:MALLOC_TOP_PAD_=1M" and len(raced) < 5, raced
    assert {s["spec"] for s in rec.screened_out} | set(raced) >= {"tcmalloc", "jemalloc", "mimalloc"}
    assert all(s["estimates"] for s in rec.screened_out)


def test_a_files_own_question_races_without_a_screen_that_would_leave_it_too_few_runs(tmp_path, monkeypatch):
    # The same 5 s runs and 120 s, from a file that asks about tcmalloc (PostgreSQL's recipe asks about
    # the pad and tcmalloc): a screen of all six would leave the two too few runs; they race alone.
    fps = {k: dict(v, wall_s=5.0) for k, v in stored("msgchurn")["fingerprints"].items()}
    out, ui = _tune(tmp_path, monkeypatch, fps, lambda env, n: 4.0 if env else 5.0, 120.0, question=["glibc", "tcmalloc"])
    assert ui.kinds == ["tune-diagnosis", "tune"], ui.kinds
    rec = Store(tmp_path / "tune.db").load(out.race_id).config.tune
    assert [c.spec for c in rec.candidates] == ["glibc:MALLOC_TOP_PAD_=1M", "tcmalloc"]
    assert rec.question == ["glibc", "tcmalloc"]
    from alloclab.tune.race import own_fixes
    # The race's budget keeps it as it keeps the own fix (tune/race.py narrowed).
    assert own_fixes(Store(tmp_path / "tune.db").load(out.race_id)) == {"glibc:MALLOC_TOP_PAD_=1M", "tcmalloc"}
    left = {s["spec"]: s for s in rec.screened_out}
    assert {"jemalloc", "mimalloc"} <= set(left) and all("not_screened" in s for s in left.values()), left
    from alloclab.report.tune import answer_lines
    said = " ".join(t for _, t in answer_lines(out.results.tune))
    assert "jemalloc" in said and "not raced: the budget fits only the race of the file's question" in said, said


def test_a_tight_budget_keeps_no_time_for_a_profile():
    from alloclab.measure.blocks import PROFILE_COST, RESERVE_FROM_BLOCKS, profile_reserve
    assert profile_reserve(True, 900.0, 96.0) == 0.0   # 9 blocks: the runs first
    assert profile_reserve(True, RESERVE_FROM_BLOCKS * 10.0, 10.0) == PROFILE_COST * 10.0
    assert profile_reserve(True, 3600.0, 10.0, share=0.5) == PROFILE_COST * 5.0
    assert profile_reserve(False, 3600.0, 10.0) == 0.0


def test_the_run_cap_is_raised_to_what_the_budget_fits(tmp_path, monkeypatch):
    slow_pad = lambda env, n: 0.1 * (1.0 + (0.05 if n % 2 else -0.05)) if env else 0.1
    out, _ = _msgchurn(tmp_path, monkeypatch, slow_pad, 3600.0, max_runs=None)
    rec = Store(tmp_path / "tune.db").load(out.race_id).config.tune
    assert rec.run_cap is None   # a command's cap (300) is already what the budget fits at most
    # A file's cap of 12 with an hour left: raised.
    (tmp_path / "b").mkdir()
    clock = FakeClock()
    ui = FakeUI(clock, stored("msgchurn")["fingerprints"], monkeypatch)
    run = TuneRun(TuneOptions(tmp_path / "b" / "t.db", budget_s=3600.0, verify=False),
                  [Workload("fake", ["fake"], executor=FakeExecutor(slow_pad, noise=0.01, clock=clock))],
                  defaults.TUNE.__class__(**{**defaults.TUNE.__dict__, "max_runs": 12}), "fake", ui, clock=clock)
    out = run.run()
    rec = Store(tmp_path / "b" / "t.db").load(out.race_id).config.tune
    assert rec.run_cap is not None and rec.run_cap[0] == 12 and rec.run_cap[1] > 12, rec.run_cap


def test_the_default_fails_plain_too_the_answer_is_the_fault(tmp_path, monkeypatch):
    fps = dict(stored("msgchurn")["fingerprints"])
    fps["glibc"] = {"error": "the program failed", "status": "failed", "run_error": "killed by signal 6",
                    "run_stderr": "free(): double free detected in tcache 2"}
    failing = FakeExecutor(lambda env, n: 0.1, clock=None)
    clock = FakeClock()
    ui = FakeUI(clock, fps, monkeypatch)

    def execute(env, variant_env, workdir, **kw):
        r = FakeExecutor.execute(failing, env, variant_env, workdir, **kw)
        r.status, r.signal, r.stderr = "failed", 6, "free(): double free detected in tcache 2"
        return r
    monkeypatch.setattr(failing, "execute", execute)
    run = TuneRun(TuneOptions(tmp_path / "t.db", budget_s=60.0, verify=False),
                  [Workload("fake", ["fake"], executor=failing)], defaults.TUNE, "fake", ui, clock=clock)
    out = run.run()
    assert out.stop == Stop.DEFAULT_FAILS and out.stop.exit_code == 1
    assert ui.kinds == ["tune-diagnosis", "tune-check"]
    from alloclab.report.tune import stop_line
    style, text = stop_line(out.stop, out.stop_data)
    assert "fails under the default (glibc)" in text and "double free" in text


def test_a_fingerprint_that_fails_only_under_alloclab_is_alloclabs_and_the_race_goes_on(tmp_path, monkeypatch):
    fps = dict(stored("msgchurn")["fingerprints"])
    fps["glibc"] = {"error": "the program failed", "status": "failed", "run_error": "killed by signal 6"}
    out, ui = _tune(tmp_path, monkeypatch, fps, pad_wins, 180.0)
    assert out.stop is None and ui.kinds == ["tune-diagnosis", "tune-check", "tune"], ui.kinds
    fact = next(f for f in ui.told if f["fact"] == "alloclab-failure")
    assert fact["plain_runs"] >= 2 and fact["plain_failed"] == 0 and fact["variant"] == "glibc"
    from alloclab.report.tune import answer_lines, fact_line
    assert "the failure is alloclab's, not the program's" in fact_line(fact)
    ans = out.results.tune
    assert ans.failures and "find the bug" not in " ".join(t for _, t in answer_lines(ans)).lower()
    # Without glibc's reading no glibc rule fired; the plain allocators raced all the same.
    raced = {c.spec for c in Store(tmp_path / "tune.db").load(out.race_id).config.tune.candidates}
    assert {"tcmalloc", "jemalloc", "mimalloc"} <= raced and not any(s.startswith("glibc:") for s in raced)


def test_nothing_to_tune_where_the_bound_is_below_the_margin(tmp_path, monkeypatch):
    from alloclab.tune.bound import QuietBound, ShareBound
    quiet = dict(stored("msgchurn")["fingerprints"])
    quiet = {k: dict(v, syscall_bytes=None, allocs_per_s=30000.0) for k, v in quiet.items()}
    monkeypatch.setattr(session, "quiet_bound", lambda *a, **k: QuietBound(
        ShareBound("fake", 0.004, 0.006, 20000, None, False), "glibc", 1, 30000.0, ("allocator-bound",), 0.02))
    out, ui = _tune(tmp_path, monkeypatch, quiet, pad_wins, 180.0)
    assert out.stop == Stop.NOTHING_TO_TUNE and out.stop.exit_code == 0 and ui.kinds == ["tune-diagnosis"]
    from alloclab.report.tune import stop_line
    assert "no allocator or setting can improve wall time" in stop_line(out.stop, out.stop_data)[1]


def test_no_candidate_where_the_installed_allocators_refuse_every_setting(tmp_path, monkeypatch):
    monkeypatch.setattr(session._Resolved, "refusal", lambda self, spec: "refused by a test")
    out, _ = _msgchurn(tmp_path, monkeypatch, pad_wins, 180.0)
    assert out.stop == Stop.NO_CANDIDATE and out.stop.exit_code == 3


def test_a_program_linked_to_jemalloc_is_raced_against_jemalloc_as_linked(tmp_path, monkeypatch):
    """The baseline as the diagnosis reads it: jemalloc's books, its rule, and glibc as a candidate."""
    from alloclab.tune import baseline as base_mod
    fx = stored("cacheidle")
    linked = base_mod.Baseline(parse_variants(["jemalloc@jemalloc (linked)"])[0], "jemalloc", base_mod.LINKED,
                               "cacheidle", "5.3.0", "libjemalloc.so.2")
    monkeypatch.setattr(session, "baseline_of", lambda workloads: linked)
    decay = lambda env, n: 0.75 * (1.03 if "MALLOC_CONF" in env else 1.0) * (1 + (0.02 if n % 2 else -0.02))
    out, ui = _tune(tmp_path, monkeypatch, fx["fingerprints"], decay, 300.0)
    assert ui.told[0]["fact"] == "baseline" and ui.told[0]["allocator"] == "jemalloc"
    e = Store(tmp_path / "tune.db").load(out.race_id)
    labels = [v.label for v in e.variants]
    assert labels[0] == "jemalloc (linked)" and "glibc" in labels and "jemalloc" not in labels, labels
    rec = e.config.tune
    assert "jemalloc-dirty-rest" in rec.fired and rec.baseline["how"] == "linked"
    assert any(c.spec == "jemalloc:dirty_decay_ms=0,muzzy_decay_ms=0" for c in rec.candidates)
    from alloclab.report.tune import answer_lines
    assert answer_lines(out.results.tune)[0][1].startswith("cacheidle links jemalloc 5.3.0 (libjemalloc.so.2)")


def test_the_race_and_the_answer_pick_the_same_best_from_one_analysis(tmp_path, monkeypatch):
    from alloclab.stats.analysis import analyze
    from alloclab.stats.best import speed_pick
    from alloclab.stats.tune_answer import answer
    from alloclab.tune.race import RaceJudge

    # Two decided better on speed; the faster holds 30% more at its peak.
    mean = lambda env, n: 0.05 if "tcmalloc" in env.get("LD_PRELOAD", "") else 0.07 if env else 0.1
    peak = lambda env: 13_312 if "tcmalloc" in env.get("LD_PRELOAD", "") else 10_240
    store = Store(tmp_path / "b.db")
    from alloclab.measure.runner import Settings
    s = Settings(warmup=0, verify=False, until_decided=True, runs=6, first_look=6, max_runs=12, max_seconds=1e9,
                 kind="tune")
    runner = Runner(store, [Workload("fake", ["fake"], executor=FakeExecutor(mean, noise=0.01, peak_kb=peak))],
                    parse_variants(["glibc", "tcmalloc", "glibc:MALLOC_TOP_PAD_=1M"]), s, judge=RaceJudge())
    runner.run()
    a = analyze(store.load(runner.exp_id))
    for limit, label in ((None, "tcmalloc"), (0.1, "glibc TOP_PAD=1M")):
        race = speed_pick(a, limit)
        ans = answer(a, [], max_rss_increase=limit)
        speed = next(p for p in ans.picks if "speed" in p.goals)
        assert a.labels[race] == speed.label == label, (limit, a.labels[race], speed.label)
        assert RaceJudge(limit).max_rss_increase == limit


def test_the_answer_leads_with_better_on_both_and_a_slow_memory_pick_names_what_costs_no_time(tmp_path):
    """The Ruby job runner's shape: jemalloc with no decay holds the least at x3.2 the time; glibc's
    ARENA_MAX=2 is faster and holds almost as little."""
    from alloclab.measure.runner import Settings
    from alloclab.report.tune import answer_lines
    from alloclab.stats.analysis import analyze
    from alloclab.stats.tune_answer import answer
    from alloclab.tune.race import RaceJudge

    specs = ["glibc", "jemalloc:dirty_decay_ms=0,muzzy_decay_ms=0", "glibc:MALLOC_ARENA_MAX=2", "tcmalloc"]
    mean = lambda env, n: (3.2 if "MALLOC_CONF" in env else 0.92 if "MALLOC_ARENA_MAX" in env
                           else 1.05 if "tcmalloc" in env.get("LD_PRELOAD", "") else 1.0) * 0.1
    peak = lambda env: (32_000 if "MALLOC_CONF" in env else 37_000 if "MALLOC_ARENA_MAX" in env
                        else 120_000 if "tcmalloc" in env.get("LD_PRELOAD", "") else 100_000)
    store = Store(tmp_path / "p.db")
    s = Settings(warmup=0, verify=False, until_decided=True, runs=6, first_look=6, max_runs=12, max_seconds=1e9,
                 kind="tune")
    runner = Runner(store, [Workload("fake", ["fake"], executor=FakeExecutor(mean, noise=0.01, peak_kb=peak))],
                    parse_variants(specs), s, judge=RaceJudge())
    runner.run()
    ans = answer(analyze(store.load(runner.exp_id)), [])
    assert [p.goals for p in ans.picks][:2] == [("both", "speed"), ("memory",)], [(p.label, p.goals) for p in ans.picks]
    assert ans.picks[0].label == "glibc ARENA_MAX=2"
    memory = ans.picks[1]
    assert memory.label.startswith("jemalloc") and memory.instead.label == "glibc ARENA_MAX=2"
    lines = [t for _, t in answer_lines(ans)]
    assert lines[0].startswith("Better on both, and best for speed: glibc ARENA_MAX=2: wall time -8.")
    beside = next(t for t in lines if t.startswith("  beside it: wall time x3."))
    assert "costs no time: glibc ARENA_MAX=2 (peak RSS -63." in beside, beside
    # tcmalloc: slower and larger: ruled out, with its figures.
    tc = next(o for o in ans.others if o.label == "tcmalloc")
    assert tc.outcome.value == "ruled out" and tc.reason.value in ("decided worse", "below the leader")


@pytest.mark.parametrize("budget_s", [25.0, 60.0, 200.0])
def test_a_tune_ends_within_its_budget(tmp_path, monkeypatch, budget_s):
    # Runs of 0.4 s with 30% noise: undecided for long, so only the budget stops the race.
    noisy = lambda env, n: 0.4 * (1.0 + (0.3 if n % 2 else -0.3)) * (0.99 if env else 1.0)
    fps = {k: dict(v, wall_s=0.4) for k, v in stored("msgchurn")["fingerprints"].items()}
    clock = FakeClock()
    ui = FakeUI(clock, fps, monkeypatch)
    run = TuneRun(TuneOptions(tmp_path / "t.db", budget_s=budget_s, verify=False),
                  [Workload("fake", ["fake"], executor=FakeExecutor(noisy, noise=0.05, clock=clock))],
                  defaults.TUNE, "fake", ui, clock=clock)
    out = run.run()
    assert out.race_id is not None and clock.now <= budget_s, (clock.now, budget_s)


def test_the_cli_times_the_budget_from_the_process_start_less_the_answers_time():
    import time

    import psutil

    from alloclab.cli.tune import ANSWER_S, _command_began
    age = time.time() - psutil.Process().create_time()
    began = _command_began()
    now = time.monotonic()
    # This test process started `age` seconds ago: the budget began then, less the answer's reserve.
    assert now - began >= age + ANSWER_S - 0.05 and now - began <= age + ANSWER_S + 1.0, (now - began, age)
