"""The runner's stopping rule on the fake executor: no process, no timing noise, a fake clock.

Each experiment here is glibc against glibc:MALLOC_ARENA_MAX=1 (no library to install); only the
fake executor's mean per variant makes them differ. Every test runs in a fraction of a second.
"""

from __future__ import annotations

import pytest

from alloclab.catalog.variants import parse_variants
from alloclab.errors import AlloclabError, Interrupted
from alloclab.measure import machine
from alloclab.measure.fake import FakeClock, FakeExecutor
from alloclab.measure.runner import Runner, Settings
from alloclab.stats.looks import Judge
from alloclab.store.db import Store
from alloclab.workloads.command import Workload

VARIANTS = ["glibc", "glibc:MALLOC_ARENA_MAX=1"]


def SEESAW(env: dict, n: int) -> float:
    """The candidate's runs alternate 10% slower and 10% faster than the baseline's 0.1 s."""
    return 0.1 * (1 + (0.1 if n % 2 else -0.1)) if env else 0.1


@pytest.fixture(autouse=True)
def no_perf(monkeypatch):
    # perf stat is started once to find hardware counters: the fake runs count nothing.
    monkeypatch.setattr(machine, "perf_counters", lambda: (False, "fake executor"))


def run(tmp_path, executor: FakeExecutor, clock: FakeClock | None = None, **settings):
    """Runs the experiment; returns (stored experiment, error raised or None)."""
    store = Store(tmp_path / "fake.db")
    s = Settings(**({"warmup": 0, "verify": False, "until_decided": True, "runs": 4, "first_look": 4,
                     "max_runs": 40, "max_seconds": 1e9} | settings))
    exp = Runner(store, [Workload("fake", ["fake"], executor=executor)], parse_variants(VARIANTS), s,
                     judge=Judge(), **({"clock": clock} if clock else {}))
    error = None
    try:
        exp.run()
    except AlloclabError as exc:
        error = exc
    assert executor.cleaned_up or executor.prepare_error is not None
    return store.load(exp.exp_id), error


def measured(e) -> dict[int, int]:
    out: dict[int, int] = {}
    for r in e.runs:
        if not r.warmup:
            out[r.variant_idx] = out.get(r.variant_idx, 0) + 1
    return out


def test_a_clear_difference_stops_at_the_first_look_as_decided(tmp_path):
    # 20% apart with 1% noise: decided at the first look, nothing more is run.
    e, error = run(tmp_path, FakeExecutor(lambda env, n: 0.08 if env else 0.1, noise=0.01))
    assert error is None
    assert e.row.status == "complete" and e.config.stopped == "decided"
    assert measured(e) == {0: 4, 1: 4} and e.config.runs_done == 4


def NEAR(env: dict, n: int) -> float:
    """4% faster on average, 10% either way run by run: not decided in 12 runs, yet not hopeless
    at the look before (futility keeps it open)."""
    return 0.1 * (1 - 0.04 + (0.1 if n % 2 else -0.1)) if env else 0.1


def test_an_undecided_difference_runs_to_max_runs(tmp_path):
    e, error = run(tmp_path, FakeExecutor(NEAR), max_runs=12)
    assert error is None
    assert e.row.status == "complete" and e.config.stopped == "max-runs"
    assert measured(e) == {0: 12, 1: 12}


def SEESAW5(env: dict, n: int) -> float:
    return 0.1 * (1 + (0.05 if n % 2 else -0.05)) if env else 0.1


def test_a_comparison_more_runs_cannot_decide_is_bounded_before_max_runs(tmp_path):
    # The candidate alternates 5% faster and 5% slower: no difference on average, and no
    # interval within reach narrow enough to call it equivalent within ±2%: closed as futile
    # once its interval is a bound worth stating (within ±10%).
    e, error = run(tmp_path, FakeExecutor(SEESAW5), max_runs=60)
    assert error is None
    assert e.row.status == "complete" and e.config.stopped == "bounded"
    assert measured(e)[1] < 60


def test_a_wide_interval_is_not_closed_as_futile(tmp_path):
    # 10% either way: at 12 runs its interval is still wider than ±10%, so it runs on.
    e, error = run(tmp_path, FakeExecutor(SEESAW), max_runs=12)
    assert error is None
    assert e.config.stopped == "max-runs" and measured(e)[1] == 12


def test_the_budget_stops_adding_blocks(tmp_path):
    # Each block takes ~0.2 fake seconds; a 1.5 s budget ends it long before --max-runs.
    clock = FakeClock()
    e, error = run(tmp_path, FakeExecutor(SEESAW, clock=clock),
                   clock=clock, max_seconds=1.5, max_runs=40)
    assert error is None
    assert e.config.stopped == "budget"
    n = measured(e)
    assert n[0] == n[1] and 4 <= n[0] < 40
    # Blocks are not started when the next would overrun: the fake time spent stays near the budget.
    assert clock.now <= 1.5 + 2 * 0.25


def test_fixed_runs_need_no_judge_and_run_exactly_that_many(tmp_path):
    e, error = run(tmp_path, FakeExecutor(lambda env, n: 0.1), until_decided=False, runs=3, warmup=1)
    assert error is None and e.row.status == "complete"
    assert measured(e) == {0: 3, 1: 3} and len(e.runs) == 8   # 2 warm-up runs


def test_ctrl_c_keeps_the_runs_so_far_and_marks_the_record_interrupted(tmp_path):
    ex = FakeExecutor(lambda env, n: 0.1, interrupt_at=6)
    e, error = run(tmp_path, ex)
    assert isinstance(error, Interrupted) and "kept in" in str(error)
    assert e.row.status == "interrupted" and e.config.stopped == "interrupted"
    assert len(e.runs) == 5   # the five runs before Ctrl-C, each stored as it ended


def test_a_failing_set_up_step_marks_the_record_failed(tmp_path):
    ex = FakeExecutor(lambda env, n: 0.1, prepare_error=AlloclabError("initdb failed"))
    e, error = run(tmp_path, ex)
    assert str(error) == "initdb failed"
    assert e.row.status == "failed" and e.runs == []


@pytest.mark.parametrize("raised, status", [(AlloclabError("cannot read it back"), "failed"),
                                            (OSError("no such file"), "failed"),
                                            (KeyboardInterrupt(), "interrupted")])
def test_an_error_or_ctrl_c_while_reading_settings_back_never_leaves_it_running(tmp_path, monkeypatch,
                                                                                  raised, status):
    def read_back(self):
        raise raised
    monkeypatch.setattr(Runner, "_read_settings_back", read_back)
    store = Store(tmp_path / "fake.db")
    exp = Runner(store, [Workload("fake", ["fake"], executor=FakeExecutor(lambda env, n: 0.1))],
                     parse_variants(VARIANTS), Settings(warmup=0, verify=False, runs=2))
    with pytest.raises((AlloclabError, OSError)):
        exp.run()
    assert store.load(exp.exp_id).row.status == status


def test_what_stays_open_is_profiled_within_the_budget(tmp_path, monkeypatch):
    # The one-run profile of an open workload takes about a block: a budget of many blocks (15 here;
    # measure/blocks.py RESERVE_FROM_BLOCKS) keeps that much.
    from alloclab.measure import auto_profile
    clock = FakeClock()
    calls = []

    def fake_profile(exp, workload_idxs):
        calls.append(set(workload_idxs))
        clock.now += 0.2   # one block's worth
    monkeypatch.setattr(auto_profile, "profile_open", fake_profile)
    e, error = run(tmp_path, FakeExecutor(NEAR, clock=clock), clock=clock, max_seconds=3.0, max_runs=80,
                   auto_profile=True)
    assert error is None and e.config.stopped == "budget"
    assert calls == [{0}] and clock.now <= 3.0, clock.now


def test_a_decided_experiment_makes_no_profile(tmp_path, monkeypatch):
    from alloclab.measure import auto_profile
    calls = []
    monkeypatch.setattr(auto_profile, "profile_open", lambda exp, idxs: calls.append(idxs))
    e, error = run(tmp_path, FakeExecutor(lambda env, n: 0.08 if env else 0.1, noise=0.01), auto_profile=True)
    assert error is None and e.config.stopped == "decided" and calls == []


def test_a_first_look_that_cannot_fit_the_budget_is_sized_down_and_said(tmp_path):
    # 4 s a run, 2 variants, a first look of 10 runs: 80 s of measured blocks after an 8 s warm-up
    # block against a 40 s budget. The warm-up block shows the pace; the first look shrinks to fit.
    clock = FakeClock()
    notes: list[str] = []
    from alloclab.measure.runner import Progress
    store = Store(tmp_path / "fit.db")
    s = Settings(warmup=1, verify=False, until_decided=True, runs=10, first_look=10, max_runs=40, max_seconds=40)
    exp = Runner(store, [Workload("fake", ["fake"], executor=FakeExecutor(lambda env, n: 4.0, noise=0.01, clock=clock))],
                 parse_variants(VARIANTS), s, judge=Judge(), clock=clock, progress=Progress(note=notes.append))
    exp.run()
    e = store.load(exp.exp_id)
    assert clock.now <= 8 + 40 + 1e-6, clock.now
    assert any("sized down to 4 runs" in n and "> the 40 s budget" in n for n in notes), notes
    assert e.config.runs == 4 and e.config.design["looks"][0] == 4
    assert measured(e) == {0: 4, 1: 4}
