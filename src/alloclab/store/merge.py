"""A fleet session's store merged into the fleet experiment: the SQL side of fleet/merge.py.

Only the client writes the store. Each run keeps everything the session recorded, plus the
host that ran it (extra.host); its block is moved past every block already merged, so that each
block of the experiment is one host's whole block (the analysis pairs the runs of a block).
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
from pathlib import Path

from alloclab.store.db import Store


def _columns(store: Store, table: str, schema: str) -> list[str]:
    return [r[1] for r in store.db.execute(f"PRAGMA {schema}.table_info({table})")]


def merge_session(store: Store, exp_id: int, db_bytes: bytes, host: str) -> dict:
    """Copy one session's runs into experiment `exp_id`; returns what the session recorded besides
    its runs: {"runs": n, "measured_blocks": n, "config", "machine", "verifications": {(wi, vi): row}}."""
    with tempfile.TemporaryDirectory(prefix="alloclab-merge-") as tmp:
        path = Path(tmp) / "session.db"
        path.write_bytes(db_bytes)
        db = store.db
        db.commit()
        db.execute("ATTACH DATABASE ? AS src", (str(path),))
        try:
            got = _merge(store, exp_id, host)
            db.commit()        # one host's session at once: never a run without its metrics
            return got
        except BaseException:
            db.rollback()
            raise
        finally:
            db.execute("DETACH DATABASE src")


def _merge(store: Store, exp_id: int, host: str) -> dict:
    db = store.db
    row = db.execute("SELECT id, config, machine FROM src.experiments ORDER BY id DESC LIMIT 1").fetchone()
    if row is None:
        return {"runs": 0, "measured_blocks": 0, "config": {}, "machine": {}, "verifications": {}}
    src, config, machine = row
    if db.execute("SELECT count(*) FROM workloads WHERE experiment_id=?", (exp_id,)).fetchone()[0] == 0:
        # The first session back defines what was run; every host ran the same spec.
        for table in ("workloads", "metric_defs", "variants"):
            cols = [c for c in _columns(store, table, "src") if c in _columns(store, table, "main")]
            rest = [c for c in cols if c != "experiment_id"]
            db.execute(f"INSERT INTO main.{table} (experiment_id, {', '.join(rest)}) "
                       f"SELECT ?, {', '.join(rest)} FROM src.{table} WHERE experiment_id=?", (exp_id, src))
    block_offset = db.execute("SELECT coalesce(max(block) + 1, 0) FROM main.runs WHERE experiment_id=?",
                              (exp_id,)).fetchone()[0]
    cols = [c for c in _columns(store, "runs", "src") if c in _columns(store, "runs", "main")
            and c not in ("id", "experiment_id", "block", "extra")]
    n = 0
    for r in db.execute("SELECT id FROM src.runs WHERE experiment_id=? ORDER BY id", (src,)).fetchall():
        cur = db.execute(
            f"INSERT INTO main.runs (experiment_id, block, extra, {', '.join(cols)}) "
            f"SELECT ?, block + ?, json_set(coalesce(extra, '{{}}'), '$.host', ?), {', '.join(cols)} "
            f"FROM src.runs WHERE id=?", (exp_id, block_offset, host, r[0]))
        db.execute("INSERT INTO main.metrics (run_id, name, value) SELECT ?, name, value FROM src.metrics "
                   "WHERE run_id=?", (cur.lastrowid, r[0]))
        n += 1
    measured = db.execute("SELECT count(DISTINCT block) FROM src.runs WHERE experiment_id=? AND warmup=0",
                          (src,)).fetchone()[0]
    # The fleet's wire shape: a host's verifications travel in the experiment's machine record.
    verifications = {(wi, vi): {"status": status, "reasons": json.loads(reasons), "notes": json.loads(notes)}
                     for wi, vi, status, reasons, notes in db.execute(
                         "SELECT workload_idx, variant_idx, status, reasons, notes FROM src.verifications"
                         " WHERE experiment_id=?", (src,))}
    return {"runs": n, "config": json.loads(config), "machine": json.loads(machine),
            "verifications": verifications, "measured_blocks": measured}


def fold_wal(db: Path) -> None:
    """The store runs in WAL mode: runs a session committed but never checkpointed (it was killed)
    are in its -wal file. Fold them into the file, whose bytes are all that travels back."""
    if not db.exists():
        return
    try:
        with sqlite3.connect(db) as con:
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        con.close()
    except sqlite3.Error:
        pass  # an unreadable file travels as it is; the client reports what it can read
