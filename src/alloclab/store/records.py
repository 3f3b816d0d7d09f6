"""Typed run records, and an experiment written run by run while kept in memory.

The runner writes every run to the store as it ends (a crash or kill -9 keeps it), and the
sequential rule looks at the experiment every few blocks. Reading the whole experiment back from
SQLite at each look (every run with its output) is what the store is not for: the Recorder
keeps the experiment it writes as a store.db.Experiment, the type Store.load returns and the
statistics read, so that a look costs no SQL.

In: what the runner measured. Out: the same rows in the store and in `Recorder.experiment`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from alloclab.store.db import Experiment, Store, now


@dataclass
class RunRecord:
    """One run as stored (a row of `runs` with its metrics)."""

    workload_idx: int
    variant_idx: int
    block: int
    position: int
    warmup: bool
    status: str
    wall_s: float | None
    metrics: dict[str, float]
    extra: dict
    exit_code: int | None = None
    signal: int | None = None
    error: str | None = None
    stdout: str = ""
    stderr: str = ""
    rss_series: list = field(default_factory=list)
    processes: list[dict] = field(default_factory=list)
    started: str = ""

    @classmethod
    def of(cls, workload_idx: int, variant_idx: int, block: int, position: int, warmup: bool, result,
           metrics: dict[str, float | None], extra: dict) -> "RunRecord":
        """From a measure.run.RunResult; metrics without a value are not stored."""
        return cls(workload_idx, variant_idx, block, position, bool(warmup), result.status, result.wall_s,
                   {k: float(v) for k, v in metrics.items() if v is not None}, extra,
                   result.exit_code, result.signal, result.error, result.stdout, result.stderr,
                   list(result.rss_series or []), [p.__dict__ for p in result.processes or []], now())

    def row(self, run_id: int, exp_id: int) -> dict:
        """As Store.load gives the run, less its output (stdout, stderr, RSS series, processes):
        the statistics never read those, and a long experiment would hold them all in memory."""
        return {"id": run_id, "experiment_id": exp_id, "workload_idx": self.workload_idx,
                "variant_idx": self.variant_idx, "block": self.block, "position": self.position,
                "warmup": int(self.warmup), "started": self.started, "status": self.status,
                "exit_code": self.exit_code, "signal": self.signal, "error": self.error, "wall_s": self.wall_s,
                "extra": self.extra, "metrics": self.metrics}


OUTPUT_KEYS = ("stdout", "stderr", "rss_series", "processes")   # in Store.load's runs, not in memory


class Recorder:
    """Writes one experiment to the store and keeps it in memory as it goes."""

    def __init__(self, store: Store, kind: str, title: str, config: dict, machine: dict):
        self.store = store
        exp_id = store.new_experiment(kind, title, config, machine)
        self.experiment = Experiment(id=exp_id, row={"id": exp_id, "kind": kind, "title": title, "status": "running"},
                                     config=config, machine=machine, workloads=[], variants=[], metric_defs=[],
                                     verifications={}, runs=[])

    @property
    def id(self) -> int:
        return self.experiment.id

    def add_workload(self, idx: int, name: str, argv: list[str], params: dict, info: dict, metric_defs: list) -> None:
        workload, defs = self.store.add_workload(self.id, idx, name, argv, params, info, metric_defs)
        self.experiment.workloads.append(workload)
        self.experiment.metric_defs.extend(defs)

    def add_variant(self, idx: int, variant, version: str) -> None:
        self.experiment.variants.append(self.store.add_variant(self.id, idx, variant, version))

    def add_run(self, workload_idx: int, variant_idx: int, block: int, position: int, warmup: bool, result,
                metrics: dict[str, float | None], extra: dict) -> int:
        """A measure.run.RunResult and what was read from it, stored (committed) and kept."""
        run = RunRecord.of(workload_idx, variant_idx, block, position, warmup, result, metrics, extra)
        run_id = self.store.insert_run(self.id, run)
        self.experiment.runs.append(run.row(run_id, self.id))
        return run_id

    def set_verification(self, workload_idx: int, variant_idx: int, status: str, reasons: list[str],
                         notes: list[str]) -> None:
        self.experiment.verifications[(workload_idx, variant_idx)] = self.store.set_verification(
            self.id, workload_idx, variant_idx, status, reasons, notes)

    def set_config(self, config: dict) -> None:
        self.store.set_config(self.id, config)
        self.experiment.config = config

    def finish(self, status: str, summary: dict | None = None) -> None:
        self.store.finish(self.id, status, summary)
        self.experiment.row["status"] = status
