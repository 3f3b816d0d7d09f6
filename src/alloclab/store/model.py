"""An experiment's records as typed values: what Store.load gives back and what the Recorder keeps in
memory as it writes, read by the statistics, tune and the reports.

In: SQLite rows (store/db.py), or what the runner and the fleet write. Out: ExperimentRow,
WorkloadRecord, VariantRecord, StoredMetric, Verification and Run. Dicts stay at the edges that
serialize (the SQLite rows, JSON export, the fleet's wire); `to_dict()` gives each record's row.

Each `from_row` reads the columns its `COLUMNS` names,
in that order (Store.load selects them so), decoding the JSON ones.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from alloclab.workloads.metrics import MetricDef


class Record:
    """A dataclass record with its row (`to_dict`) and a lenient constructor (`of`); `ALIASES` maps a
    stored key to its attribute where the names differ."""

    ALIASES: ClassVar[dict[str, str]] = {}

    def keys(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self)]

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.keys()}

    @classmethod
    def of(cls, data):
        """From a row or dict (unknown keys dropped, so older and newer stores load), or as is."""
        if isinstance(data, cls):
            return data
        names = {f.name for f in dataclasses.fields(cls)}
        src = dict(data)
        for old, new in cls.ALIASES.items():
            if old in src and new not in src:
                src[new] = src.pop(old)
        return cls(**{k: v for k, v in src.items() if k in names})


def _json(text, default):
    if text is None or text == "":
        return default
    return json.loads(text) if isinstance(text, str) else text


@dataclass
class ExperimentRow(Record):
    """The experiments table's row: what, when, and how it ended."""

    id: int | None = None
    created: str = ""
    finished: str | None = None
    kind: str = ""
    title: str = ""
    status: str = ""
    summary: dict = field(default_factory=dict)

    COLUMNS: ClassVar[str] = "id, created, finished, kind, title, status, summary"

    @classmethod
    def of(cls, data):
        if isinstance(data, cls):
            return data
        d = dict(data)
        return super().of(d | {"summary": _json(d.get("summary"), {})})

    @classmethod
    def from_row(cls, r) -> "ExperimentRow":
        *head, summary = r
        return cls(*head, _json(summary, {}))


@dataclass
class WorkloadRecord(Record):
    idx: int
    name: str
    argv: list[str]
    params: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    experiment_id: int | None = None

    def to_row(self) -> dict:
        return {"experiment_id": self.experiment_id, "idx": self.idx, "name": self.name, "argv": self.argv,
                "params": self.params, "info": self.info}

    COLUMNS: ClassVar[str] = "idx, name, argv, params, info, experiment_id"

    @classmethod
    def from_row(cls, r) -> "WorkloadRecord":
        idx, name, argv, params, info, exp = r
        return cls(idx, name, json.loads(argv), json.loads(params), json.loads(info), exp)


@dataclass
class VariantRecord(Record):
    idx: int
    label: str
    spec: str = ""
    allocator: str | None = None
    library: str | None = None
    version: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    settings: list = field(default_factory=list)   # [key, as written, value] per setting
    notes: list[str] = field(default_factory=list)
    experiment_id: int | None = None

    def __post_init__(self) -> None:
        if not self.spec:
            self.spec = self.label

    def to_row(self) -> dict:
        return {"experiment_id": self.experiment_id, "idx": self.idx, "label": self.label, "spec": self.spec,
                "allocator": self.allocator, "library": self.library, "version": self.version, "env": self.env,
                "settings": self.settings, "notes": self.notes}

    COLUMNS: ClassVar[str] = "idx, label, spec, allocator, library, version, env, settings, notes, experiment_id"

    @classmethod
    def from_row(cls, r) -> "VariantRecord":
        *head, env, settings, notes, exp = r
        return cls(*head, json.loads(env), json.loads(settings), json.loads(notes), exp)


@dataclass(frozen=True)
class StoredMetric(MetricDef, Record):
    """A metric definition as stored for one workload, in the order reports show it."""

    ALIASES: ClassVar[dict[str, str]] = {"primary_metric": "primary"}
    workload_idx: int = 0
    ord: int = 0
    experiment_id: int | None = None

    def to_row(self) -> dict:
        return {"experiment_id": self.experiment_id, "workload_idx": self.workload_idx, "name": self.name,
                "unit": self.unit, "higher_is_better": int(self.higher_is_better), "source": self.source,
                "pattern": self.pattern, "primary_metric": int(self.primary), "ord": self.ord}

    COLUMNS: ClassVar[str] = ("name, unit, higher_is_better, source, pattern, primary_metric, workload_idx, ord, "
                              "experiment_id")

    @classmethod
    def from_row(cls, r) -> "StoredMetric":
        name, unit, higher, source, pattern, primary, *rest = r
        return cls(name, unit, bool(higher), source, pattern, bool(primary), *rest)


@dataclass
class Verification(Record):
    workload_idx: int
    variant_idx: int
    status: str = "unknown"
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    experiment_id: int | None = None

    def to_row(self) -> dict:
        return {"experiment_id": self.experiment_id, "workload_idx": self.workload_idx,
                "variant_idx": self.variant_idx, "status": self.status, "reasons": self.reasons, "notes": self.notes}

    COLUMNS: ClassVar[str] = "workload_idx, variant_idx, status, reasons, notes, experiment_id"

    @classmethod
    def from_row(cls, r) -> "Verification":
        wi, vi, status, reasons, notes, exp = r
        return cls(wi, vi, status, json.loads(reasons), json.loads(notes), exp)


@dataclass
class Run(Record):
    """One run as stored; its output (stdout, stderr, RSS series, processes) only where it was loaded
    from the store: the statistics never read it, and a recorder keeps runs without it."""

    workload_idx: int
    variant_idx: int
    block: int = 0
    position: int = 0
    warmup: bool = False
    status: str = "ok"
    wall_s: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    extra: dict = field(default_factory=dict)
    exit_code: int | None = None
    signal: int | None = None
    error: str | None = None
    started: str = ""
    id: int | None = None
    experiment_id: int | None = None
    stdout: str | None = None
    stderr: str | None = None
    rss_series: Any = None
    processes: Any = None

    def to_row(self) -> dict:
        """The stored row's shape (SQLite's column order, warmup as 0/1), with its output where loaded."""
        out = {"id": self.id, "experiment_id": self.experiment_id, "workload_idx": self.workload_idx,
               "variant_idx": self.variant_idx, "block": self.block, "position": self.position,
               "warmup": int(self.warmup), "started": self.started, "status": self.status,
               "exit_code": self.exit_code, "signal": self.signal, "error": self.error, "wall_s": self.wall_s}
        if self.stdout is not None:
            out |= {"stdout": self.stdout, "stderr": self.stderr, "rss_series": self.rss_series,
                    "processes": self.processes}
        return out | {"extra": self.extra, "metrics": self.metrics}

    COLUMNS: ClassVar[str] = ("workload_idx, variant_idx, block, position, warmup, status, wall_s, extra, exit_code, "
                              "signal, error, started, id, experiment_id, stdout, stderr, rss_series, processes")

    @classmethod
    def from_row(cls, r) -> "Run":
        """Without its metrics (another table): the caller adds them."""
        wi, vi, block, position, warmup, status, wall_s, extra, *rest = r
        return cls(wi, vi, block, position, bool(warmup), status, wall_s, {}, json.loads(extra or "{}"), *rest)


@dataclass
class ListedExperiment(Record):
    """One line of `alloclab experiments`: an experiment counted in SQL, without its runs."""

    id: int
    date: str
    kind: str
    status: str
    title: str
    workloads: int = 0
    variants: list[str] = field(default_factory=list)
    runs: int = 0
    runs_ok: int = 0
    host: str = ""
    kernel: str = ""
    glibc: str = ""
