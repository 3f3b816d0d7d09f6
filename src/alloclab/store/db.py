"""SQLite store: every run is committed as soon as it ends, so a crash or Ctrl-C keeps it.

The database runs in WAL mode with synchronous=NORMAL. A commit is then an append to the
write-ahead log handed to the kernel, without the fsync that a rollback journal (or
synchronous=FULL) waits for: 2.1 ms a run before, a few tens of microseconds now. What that
keeps (tests/test_store_durability.py kills alloclab at random moments to check it):
  * alloclab killed (kill -9, OOM killer, Ctrl-C): every committed run survives, the file is
    never corrupt; the run in progress is lost.
  * the machine losing power or the kernel crashing: the file is still never corrupt, but the
    runs committed since the last checkpoint (at most ~1000 pages of log) may be lost.
Where WAL is not available (some network file systems), the store falls back to a rollback
journal with synchronous=FULL, as before.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from alloclab.errors import AlloclabError
from alloclab.store.config_model import ExperimentConfig, MachineRecord
from alloclab.store.model import (ListedExperiment, ExperimentRow, Run, StoredMetric, Verification, VariantRecord,
                                  WorkloadRecord)
from alloclab.store.run_record import RunRecord, now


# 2: the inspections table (`alloclab inspect`: an experiment of kind "inspect" holds its samples).
SCHEMA_VERSION = 2
DEFAULT_DB = "alloclab.db"
METRICS_PER_INSERT = 300

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS experiments (
    id INTEGER PRIMARY KEY, created TEXT NOT NULL, finished TEXT, kind TEXT NOT NULL,
    title TEXT NOT NULL, status TEXT NOT NULL, config TEXT NOT NULL, machine TEXT NOT NULL,
    summary TEXT);
CREATE TABLE IF NOT EXISTS workloads (
    experiment_id INTEGER NOT NULL REFERENCES experiments(id), idx INTEGER NOT NULL,
    name TEXT NOT NULL, argv TEXT NOT NULL, params TEXT NOT NULL, info TEXT NOT NULL,
    PRIMARY KEY (experiment_id, idx));
CREATE TABLE IF NOT EXISTS variants (
    experiment_id INTEGER NOT NULL REFERENCES experiments(id), idx INTEGER NOT NULL,
    label TEXT NOT NULL, spec TEXT NOT NULL, allocator TEXT, library TEXT, version TEXT,
    env TEXT NOT NULL, settings TEXT NOT NULL, notes TEXT NOT NULL,
    PRIMARY KEY (experiment_id, idx));
CREATE TABLE IF NOT EXISTS metric_defs (
    experiment_id INTEGER NOT NULL, workload_idx INTEGER NOT NULL, name TEXT NOT NULL,
    unit TEXT NOT NULL, higher_is_better INTEGER NOT NULL, source TEXT NOT NULL,
    pattern TEXT NOT NULL, primary_metric INTEGER NOT NULL, ord INTEGER NOT NULL,
    PRIMARY KEY (experiment_id, workload_idx, name));
CREATE TABLE IF NOT EXISTS verifications (
    experiment_id INTEGER NOT NULL, workload_idx INTEGER NOT NULL, variant_idx INTEGER NOT NULL,
    status TEXT NOT NULL, reasons TEXT NOT NULL, notes TEXT NOT NULL,
    PRIMARY KEY (experiment_id, workload_idx, variant_idx));
CREATE TABLE IF NOT EXISTS fingerprints (
    experiment_id INTEGER NOT NULL, workload_idx INTEGER NOT NULL, variant_idx INTEGER NOT NULL,
    data TEXT NOT NULL, PRIMARY KEY (experiment_id, workload_idx, variant_idx));
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY, experiment_id INTEGER NOT NULL REFERENCES experiments(id),
    workload_idx INTEGER NOT NULL, variant_idx INTEGER NOT NULL, block INTEGER NOT NULL,
    position INTEGER NOT NULL, warmup INTEGER NOT NULL, started TEXT NOT NULL,
    status TEXT NOT NULL, exit_code INTEGER, signal INTEGER, error TEXT,
    wall_s REAL, stdout TEXT, stderr TEXT, rss_series TEXT, processes TEXT, extra TEXT);
CREATE INDEX IF NOT EXISTS runs_by_cell ON runs (experiment_id, workload_idx, variant_idx);
CREATE TABLE IF NOT EXISTS metrics (
    run_id INTEGER NOT NULL REFERENCES runs(id), name TEXT NOT NULL, value REAL NOT NULL,
    PRIMARY KEY (run_id, name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS inspections (
    experiment_id INTEGER NOT NULL REFERENCES experiments(id), idx INTEGER NOT NULL,
    pid INTEGER NOT NULL, t_s REAL NOT NULL, data TEXT NOT NULL, PRIMARY KEY (experiment_id, idx));
CREATE TABLE IF NOT EXISTS profiles (
    experiment_id INTEGER NOT NULL, workload_idx INTEGER NOT NULL, variant_idx INTEGER NOT NULL,
    summary TEXT NOT NULL, PRIMARY KEY (experiment_id, workload_idx, variant_idx));
"""


@functools.cache
def _insert_metrics(n: int) -> str:
    """One statement for a run's n metrics: a third less time per run than n executemany steps."""
    return "INSERT INTO metrics VALUES " + ",".join(["(?,?,?)"] * n)


class Store:
    def __init__(self, path: str | Path = DEFAULT_DB):
        self.path = Path(path)
        try:
            self.db = sqlite3.connect(self.path)
        except sqlite3.Error as exc:
            raise AlloclabError(f"Cannot open the database {self.path}: {exc}. Give a writable path with --db.") from None
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA foreign_keys = ON")
        self._set_journal()
        self._migrate()

    def _set_journal(self) -> None:
        """WAL with synchronous=NORMAL, or the safest rollback journal where WAL is refused."""
        try:
            mode = self.db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except sqlite3.OperationalError:
            mode = None  # read-only file or directory, a lock held elsewhere: keep the file's mode
        except sqlite3.DatabaseError as exc:
            raise AlloclabError(f"{self.path} is not an alloclab database ({exc}). Give another path with --db.") from None
        self.db.execute("PRAGMA synchronous = NORMAL" if mode == "wal" else "PRAGMA synchronous = FULL")

    def _migrate(self) -> None:
        row = None
        try:
            row = self.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        except sqlite3.OperationalError:
            pass
        except sqlite3.DatabaseError as exc:
            raise AlloclabError(f"{self.path} is not an alloclab database ({exc}). Give another path with --db.") from None
        if row and int(row[0]) > SCHEMA_VERSION:
            raise AlloclabError(f"{self.path} was written by a newer alloclab (schema {row[0]}, this one "
                                f"reads {SCHEMA_VERSION}). Upgrade alloclab or use another --db.")
        self.db.executescript(SCHEMA)
        self.db.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        self.db.commit()

    def close(self) -> None:
        self.db.close()

    # --- writing ---------------------------------------------------------------------------

    def new_experiment(self, kind: str, title: str, config: dict, machine: dict) -> int:
        cur = self.db.execute(
            "INSERT INTO experiments (created, kind, title, status, config, machine) VALUES (?,?,?,?,?,?)",
            (now(), kind, title, "running", json.dumps(config), json.dumps(machine)))
        self.db.commit()
        return cur.lastrowid

    # The write methods return what they wrote in the shape Store.load gives it, so that a writer can
    # keep the experiment in memory (store.records.Recorder) without reading it back.

    def add_workload(self, exp: int, idx: int, name: str, argv: list[str], params: dict, info: dict,
                     metric_defs: list) -> tuple[dict, list[dict]]:
        self.db.execute("INSERT INTO workloads VALUES (?,?,?,?,?,?)",
                        (exp, idx, name, json.dumps(argv), json.dumps(params), json.dumps(info)))
        defs = [{"experiment_id": exp, "workload_idx": idx, "name": m.name, "unit": m.unit,
                 "higher_is_better": int(m.higher_is_better), "source": m.source, "pattern": m.pattern,
                 "primary_metric": int(m.primary), "ord": ord_} for ord_, m in enumerate(metric_defs)]
        self.db.executemany("INSERT INTO metric_defs VALUES (:experiment_id, :workload_idx, :name, :unit, "
                            ":higher_is_better, :source, :pattern, :primary_metric, :ord)", defs)
        self.db.commit()
        return (WorkloadRecord(idx, name, argv, params, info, exp),
                [StoredMetric(m.name, m.unit, bool(m.higher_is_better), m.source, m.pattern, bool(m.primary), idx, o, exp)
                 for o, m in enumerate(metric_defs)])

    def add_variant(self, exp: int, idx: int, v, version: str) -> VariantRecord:
        rec = VariantRecord(idx, v.label, v.spec, v.allocator.name if v.allocator else None,
                            str(v.library) if v.library else None, version, dict(v.env),
                            [[s.key, s.written, s.value] for s in v.settings], list(v.notes), exp)
        self.db.execute("INSERT INTO variants VALUES (?,?,?,?,?,?,?,?,?,?)", (
            exp, idx, rec.label, rec.spec, rec.allocator, rec.library, version,
            json.dumps(rec.env), json.dumps(rec.settings), json.dumps(rec.notes)))
        self.db.commit()
        return rec

    def set_verification(self, exp: int, workload_idx: int, variant_idx: int, status: str,
                         reasons: list[str], notes: list[str]) -> dict:
        self.db.execute("INSERT OR REPLACE INTO verifications VALUES (?,?,?,?,?,?)",
                        (exp, workload_idx, variant_idx, status, json.dumps(reasons), json.dumps(notes)))
        self.db.commit()
        return Verification(workload_idx, variant_idx, status, list(reasons), list(notes), exp)

    def set_fingerprint(self, exp: int, workload_idx: int, variant_idx: int, data: dict) -> None:
        """The allocation fingerprint of a cell's untimed run (measure/fingerprint.py)."""
        self.db.execute("INSERT OR REPLACE INTO fingerprints VALUES (?,?,?,?)",
                        (exp, workload_idx, variant_idx, json.dumps(data)))
        self.db.commit()

    def add_run(self, exp: int, workload_idx: int, variant_idx: int, block: int, position: int,
                warmup: bool, result, metrics: dict[str, float], extra: dict) -> int:
        return self.insert_run(exp, RunRecord.of(workload_idx, variant_idx, block, position, warmup, result,
                                                 metrics, extra))

    def insert_run(self, exp: int, r: RunRecord) -> int:
        """One run and its metrics, committed at once: a run survives the process being killed."""
        cur = self.db.execute(
            "INSERT INTO runs (experiment_id, workload_idx, variant_idx, block, position, warmup, started,"
            " status, exit_code, signal, error, wall_s, stdout, stderr, rss_series, processes, extra)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (exp, r.workload_idx, r.variant_idx, r.block, r.position, int(r.warmup), r.started, r.status,
             r.exit_code, r.signal, r.error, r.wall_s, r.stdout, r.stderr,
             json.dumps(r.rss_series) if r.rss_series else "[]",
             json.dumps(r.processes) if r.processes else "[]",
             json.dumps(r.extra)))
        run_id = cur.lastrowid
        rows = [x for k, v in r.metrics.items() for x in (run_id, k, v)]
        for i in range(0, len(rows), 3 * METRICS_PER_INSERT):   # within SQLite's 999 parameters
            chunk = rows[i:i + 3 * METRICS_PER_INSERT]
            self.db.execute(_insert_metrics(len(chunk) // 3), chunk)
        self.db.commit()
        return run_id

    def set_config(self, exp: int, config: dict) -> None:
        self.db.execute("UPDATE experiments SET config=? WHERE id=?", (json.dumps(config), exp))
        self.db.commit()

    def set_machine(self, exp: int, machine: dict) -> None:
        self.db.execute("UPDATE experiments SET machine=? WHERE id=?", (json.dumps(machine), exp))
        self.db.commit()

    def save_profiles(self, exp: int, summaries: list[tuple[int, int, dict]]) -> None:
        """(workload_idx, variant_idx, summary) of each profiled cell, replacing earlier ones."""
        self.db.executemany("INSERT OR REPLACE INTO profiles VALUES (?,?,?,?)",
                            [(exp, wi, vi, json.dumps(summary)) for wi, vi, summary in summaries])
        self.db.commit()

    def add_inspection(self, exp: int, idx: int, inspection) -> None:
        """One process at one sample of `alloclab inspect` (store/inspect_model.py's Inspection)."""
        snap = inspection.snapshot
        self.db.execute("INSERT INTO inspections VALUES (?,?,?,?,?)",
                        (exp, idx, snap.pid, snap.t_s, json.dumps(inspection.to_dict())))
        self.db.commit()

    def inspections(self, exp: int) -> list:
        """The samples of an inspection, in the order taken; empty for any other experiment."""
        from alloclab.store.inspect_model import Inspection
        rows = self.db.execute("SELECT data FROM inspections WHERE experiment_id=? ORDER BY idx", (exp,))
        return [Inspection.from_dict(json.loads(r[0])) for r in rows]

    def kind(self, exp: int) -> str | None:
        row = self.db.execute("SELECT kind FROM experiments WHERE id=?", (exp,)).fetchone()
        return row[0] if row else None

    def finish(self, exp: int, status: str, summary: dict | None = None) -> None:
        self.db.execute("UPDATE experiments SET status=?, finished=?, summary=? WHERE id=?",
                        (status, now(), json.dumps(summary or {}), exp))
        self.db.commit()

    # --- reading ---------------------------------------------------------------------------

    def experiments(self) -> list[sqlite3.Row]:
        return self.db.execute("SELECT * FROM experiments ORDER BY id").fetchall()

    def listing(self) -> list[ListedExperiment]:
        """One row per experiment, counted in SQL so that a long history lists fast."""
        q = self.db.execute
        variants: dict[int, list[str]] = {}
        for r in q("SELECT experiment_id, label FROM variants ORDER BY experiment_id, idx"):
            variants.setdefault(r[0], []).append(r[1])
        workloads = dict(q("SELECT experiment_id, count(*) FROM workloads GROUP BY experiment_id").fetchall())
        runs = {r[0]: (r[1], r[2]) for r in q(
            "SELECT experiment_id, count(*), sum(status = 'ok') FROM runs WHERE warmup = 0 GROUP BY experiment_id")}
        out = []
        for id_, created, kind, status, title, machine in q(
                "SELECT id, created, kind, status, title, machine FROM experiments ORDER BY id"):
            machine = json.loads(machine)
            total, ok = runs.get(id_, (0, 0))
            m = MachineRecord.of(machine)
            out.append(ListedExperiment(id_, created, kind, status, title, workloads.get(id_, 0),
                                        variants.get(id_, []), total, ok or 0, m.host or "", m.kernel or "",
                                        m.glibc or ""))
        return out

    def profiles(self, exp: int) -> list[dict]:
        """The stored profile summaries of an experiment, by workload then variant."""
        rows = self.db.execute("SELECT summary FROM profiles WHERE experiment_id=? ORDER BY workload_idx, variant_idx",
                               (exp,)).fetchall()
        return [json.loads(r[0]) for r in rows]

    def latest(self) -> int:
        row = self.db.execute("SELECT max(id) FROM experiments").fetchone()
        if not row or row[0] is None:
            raise AlloclabError(f"The database {self.path} holds no experiment yet. Run `alloclab compare -- CMD` "
                                f"or `alloclab suite` first, or point --db at another database.")
        return row[0]

    def load(self, exp: int | None = None) -> "Experiment":
        exp = self.latest() if exp is None else exp
        row = self.db.execute(f"SELECT {ExperimentRow.COLUMNS}, config, machine FROM experiments WHERE id=?",
                              (exp,)).fetchone()
        if row is None:
            ids = [str(id_) for id_, in self.db.execute("SELECT id FROM experiments ORDER BY id")]
            raise AlloclabError(f"No experiment {exp} in {self.path}; it holds {', '.join(ids) or 'none'}. "
                                f"Run `alloclab experiments` to list them.")
        *head, config, machine = row

        def records(rec, table: str, order: str = "") -> list:
            # Columns by name, in the order rec.from_row reads them: a table's own order may differ.
            rows = self.db.execute(f"SELECT {rec.COLUMNS} FROM {table} WHERE experiment_id=? {order}", (exp,))
            return [rec.from_row(r) for r in rows]

        def by_cell(table: str, column: str) -> dict:
            return {(wi, vi): json.loads(text) for wi, vi, text in self.db.execute(
                f"SELECT workload_idx, variant_idx, {column} FROM {table} WHERE experiment_id=?", (exp,))}

        runs = records(Run, "runs", "ORDER BY id")
        values: dict[int, dict[str, float]] = {}
        for run_id, name, value in self.db.execute("SELECT m.run_id, m.name, m.value FROM metrics m JOIN runs r"
                                                   " ON r.id=m.run_id WHERE r.experiment_id=?", (exp,)):
            values.setdefault(run_id, {})[name] = value
        for run in runs:
            run.metrics = values.get(run.id, {})
        return Experiment(
            id=exp, row=ExperimentRow.from_row(head), config=json.loads(config), machine=json.loads(machine),
            workloads=records(WorkloadRecord, "workloads", "ORDER BY idx"),
            variants=records(VariantRecord, "variants", "ORDER BY idx"),
            metric_defs=records(StoredMetric, "metric_defs", "ORDER BY workload_idx, ord"),
            verifications={(v.workload_idx, v.variant_idx): v for v in records(Verification, "verifications")},
            runs=runs, fingerprints=by_cell("fingerprints", "data"), profiles=by_cell("profiles", "summary"),
        )


@dataclass
class Experiment:
    """Everything stored about one experiment, as typed records (store/model.py) for statistics and
    reports."""

    id: int
    row: ExperimentRow
    config: ExperimentConfig
    machine: MachineRecord
    workloads: list[WorkloadRecord]
    variants: list[VariantRecord]
    metric_defs: list[StoredMetric]
    verifications: dict[tuple[int, int], Verification]
    runs: list[Run]
    fingerprints: dict = field(default_factory=dict)   # (workload_idx, variant_idx) -> measure/fingerprint.py's dict
    profiles: dict = field(default_factory=dict)       # (workload_idx, variant_idx) -> ProfileSummary.to_dict()

    def __post_init__(self) -> None:
        # Records built as dicts (a fleet host's wire, a test) become typed here, once.
        self.row = ExperimentRow.of(self.row)
        self.config = ExperimentConfig.of(self.config)
        self.machine = MachineRecord.of(self.machine)
        self.workloads = [WorkloadRecord.of({"idx": i} | w if isinstance(w, dict) else w)
                          for i, w in enumerate(self.workloads)]
        self.variants = [VariantRecord.of({"idx": i} | v if isinstance(v, dict) else v)
                         for i, v in enumerate(self.variants)]
        self.metric_defs = [StoredMetric.of(d) for d in self.metric_defs]
        self.verifications = {k: Verification.of({"workload_idx": k[0], "variant_idx": k[1]} | v
                                                 if isinstance(v, dict) else v)
                              for k, v in self.verifications.items()}
        self.runs = [Run.of(r) for r in self.runs]

    def cell_runs(self, workload_idx: int, variant_idx: int, include_warmup: bool = False) -> list[Run]:
        return [r for r in self.runs if r.workload_idx == workload_idx and r.variant_idx == variant_idx
                and (include_warmup or not r.warmup)]

    def defs_for(self, workload_idx: int) -> list[StoredMetric]:
        return [d for d in self.metric_defs if d.workload_idx == workload_idx]
