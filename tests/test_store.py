"""The store's per-run write: every metric kept, and databases made before the metrics table
changed shape still written and read."""

from __future__ import annotations

import sqlite3

from alloclab.measure.run import RunResult
from alloclab.store.db import METRICS_PER_INSERT, Store


def _result() -> RunResult:
    r = RunResult("ok", 0.5)
    r.exit_code = 0
    return r


def test_a_run_with_more_metrics_than_one_statement_takes_keeps_them_all(tmp_path):
    store = Store(tmp_path / "a.db")
    exp = store.new_experiment("compare", "t", {}, {})
    metrics = {f"m{i}": float(i) for i in range(2 * METRICS_PER_INSERT + 7)} | {"absent": None}
    run_id = store.add_run(exp, 0, 0, 0, 0, False, _result(), metrics, {})
    got = dict(store.db.execute("SELECT name, value FROM metrics WHERE run_id=?", (run_id,)).fetchall())
    assert got == {k: v for k, v in metrics.items() if v is not None}


def test_a_database_whose_metrics_table_has_rowids_is_still_written_and_read(tmp_path):
    path = tmp_path / "old.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE metrics (run_id INTEGER NOT NULL REFERENCES runs(id), name TEXT NOT NULL, "
                "value REAL NOT NULL, PRIMARY KEY (run_id, name))")
    con.commit()
    con.close()
    store = Store(path)
    exp = store.new_experiment("compare", "t", {}, {})
    for block in range(3):
        store.add_run(exp, 0, 0, block, 0, False, _result(), {"wall_s": 0.5 + block, "cpu_s": 0.1}, {})
    store.finish(exp, "complete")
    loaded = Store(path).load(exp)
    assert sorted(r.metrics["wall_s"] for r in loaded.runs) == [0.5, 1.5, 2.5]
    sql = store.db.execute("SELECT sql FROM sqlite_master WHERE name='metrics'").fetchone()[0]
    assert "WITHOUT ROWID" not in sql.upper()   # the old table was kept, not rebuilt
    fresh = Store(tmp_path / "new.db").db.execute("SELECT sql FROM sqlite_master WHERE name='metrics'").fetchone()[0]
    assert "WITHOUT ROWID" in fresh.upper()
