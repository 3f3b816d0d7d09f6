"""A fleet session's store merged into the client's experiment (store.merge): every run, its
metrics and its host; each session's blocks after those already merged."""

from __future__ import annotations

import pytest

from alloclab.catalog.variants import parse_variants
from alloclab.measure import machine
from alloclab.measure.fake import FakeExecutor
from alloclab.measure.runner import Runner, Settings
from alloclab.store.db import Store
from alloclab.store.merge import fold_wal, merge_session
from alloclab.workloads.command import Workload


def session_db(path) -> bytes:
    store = Store(path)
    Runner(store, [Workload("fake", ["fake"], executor=FakeExecutor(lambda env, n: 0.1))],
               parse_variants(["glibc", "glibc:MALLOC_ARENA_MAX=1"]),
               Settings(runs=3, warmup=1, verify=False)).run()
    store.close()
    fold_wal(path)
    return path.read_bytes()


def test_two_sessions_merge_into_one_experiment_with_hosts_and_distinct_blocks(tmp_path, monkeypatch):
    monkeypatch.setattr(machine, "perf_counters", lambda: (False, "fake executor"))
    client = Store(tmp_path / "client.db")
    exp = client.new_experiment("compare", "fleet", {}, {})
    a = merge_session(client, exp, session_db(tmp_path / "a.db"), "host-a")
    b = merge_session(client, exp, session_db(tmp_path / "b.db"), "host-b")
    assert a["runs"] == b["runs"] == 8 and a["measured_blocks"] == 3
    assert set(a["verifications"]) == {(0, 0), (0, 1)}
    e = client.load(exp)
    assert [w.name for w in e.workloads] == ["fake"] and len(e.variants) == 2
    assert len(e.runs) == 16 and all(r.metrics["wall_s"] == pytest.approx(0.1) for r in e.runs)
    hosts = {r.extra["host"] for r in e.runs}
    assert hosts == {"host-a", "host-b"}
    blocks = {h: {r.block for r in e.runs if r.extra["host"] == h} for h in hosts}
    assert blocks["host-a"] == {0, 1, 2, 3} and blocks["host-b"] == {4, 5, 6, 7}
