"""An experiment written run by run while kept in memory.

The runner writes every run to the store as it ends (a crash or kill -9 keeps it), and the
sequential rule looks at the experiment every few blocks. Reading the whole experiment back from
SQLite at each look (every run with its output) is what the store is not for: the Recorder
keeps the experiment it writes as a store.db.Experiment, the type Store.load returns and the
statistics read, so that a look costs no SQL.

In: what the runner measured. Out: the same rows in the store and in `Recorder.experiment`.
"""

from __future__ import annotations

from alloclab.store.db import Experiment, Store
from alloclab.store.config_model import ExperimentConfig
from alloclab.store.model import ExperimentRow
from alloclab.store.run_record import OUTPUT_KEYS, RunRecord  # noqa: F401 (OUTPUT_KEYS: the records' words)


class Recorder:
    """Writes one experiment to the store and keeps it in memory as it goes."""

    def __init__(self, store: Store, kind: str, title: str, config: dict, machine: dict):
        self.store = store
        exp_id = store.new_experiment(kind, title, config, machine)
        self.experiment = Experiment(id=exp_id, row=ExperimentRow(exp_id, kind=kind, title=title, status="running"),
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
        self.experiment.config = ExperimentConfig.of(config)

    def finish(self, status: str, summary: dict | None = None) -> None:
        self.store.finish(self.id, status, summary)
        self.experiment.row.status = status
