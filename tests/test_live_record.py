"""The runner keeps the experiment it writes in memory (store.records.Recorder): a look reads that,
never the store, and it is the experiment Store.load gives back, less the runs' output."""

from __future__ import annotations

import dataclasses

import pytest

from alloclab.catalog.variants import parse_variants
from alloclab.measure import machine
from alloclab.measure.fake import FakeExecutor
from alloclab.measure.runner import Runner, Settings
from alloclab.stats.looks import Judge
from alloclab.store.db import Store
from alloclab.store.records import OUTPUT_KEYS
from alloclab.workloads.command import Workload


def seesaw(env: dict, n: int) -> float:
    # 5% faster on average, 6% either way: undecided at every look, never closed as futile
    return 0.1 * (1 - 0.05 + (0.06 if n % 2 else -0.06)) if env else 0.1


@pytest.fixture
def experiment(tmp_path, monkeypatch):
    monkeypatch.setattr(machine, "perf_counters", lambda: (False, "fake executor"))
    store = Store(tmp_path / "live.db")
    w = Workload("fake", ["fake"], executor=FakeExecutor(seesaw, stdout="ops=1000\n" + "x" * 500))
    exp = Runner(store, [w], parse_variants(["glibc", "glibc:MALLOC_ARENA_MAX=1"]),
                     Settings(warmup=1, verify=False, until_decided=True, runs=4, first_look=4, max_runs=12),
                     judge=Judge())
    return store, exp


def test_the_looks_read_no_sql(experiment):
    store, exp = experiment
    statements: list[str] = []
    store.db.set_trace_callback(statements.append)
    exp.run()
    store.db.set_trace_callback(None)
    assert exp.config["design"]["looks"] == [4, 7, 12]   # three looks happened on the way
    assert exp.recorder.experiment.config.stopped == "max-runs"
    assert [s for s in statements if s.lstrip().upper().startswith("SELECT")] == []
    assert sum(s.startswith("INSERT INTO runs") for s in statements) == 26   # 2 warm-up + 2 x 12


def test_the_record_in_memory_is_what_the_store_gives_back(experiment):
    store, exp = experiment
    exp_id = exp.run()
    live, stored = exp.recorder.experiment, store.load(exp_id)
    assert live.id == stored.id == exp_id
    assert live.config == stored.config and live.machine == stored.machine
    assert live.workloads == stored.workloads and live.variants == stored.variants
    assert live.metric_defs == stored.metric_defs and live.verifications == stored.verifications
    assert live.runs == [dataclasses.replace(r, **dict.fromkeys(OUTPUT_KEYS)) for r in stored.runs]
    assert stored.runs[0].stdout.startswith("ops=1000")   # the output is in the store, not in memory
    assert live.row.status == stored.row.status == "complete"
    judge = Judge()
    assert judge.open_comparisons(live, {0}, 0.02) == judge.open_comparisons(stored, {0}, 0.02)
