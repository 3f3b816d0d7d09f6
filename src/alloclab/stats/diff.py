"""What changed between two experiments: their workloads matched by program, each metric's
values compared, and the context (host, kernel, allocator versions) that differs.

In: two stored Experiments. Out: a Diff, which report/diff.py renders (terminal, Markdown, JSON).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from alloclab.errors import AlloclabError
from alloclab.stats import decide
from alloclab.stats import estimates as stats
from alloclab.stats.analysis import DEFAULT_STANDARD
from alloclab.store.db import Experiment
from alloclab.store.model import WorkloadRecord

# What may differ between two experiments and explain a change.
CONTEXT_KEYS = ("host", "cpu_model", "usable_cores", "kernel", "os", "glibc", "thp", "thp_defrag", "governor",
                "alloclab")


@dataclass
class DiffCell:
    label: str
    a: stats.CellSummary
    b: stats.CellSummary
    comparison: stats.Comparison


@dataclass
class DiffRow:
    metric: str
    unit: str
    higher_is_better: bool
    cells: list[DiffCell]


@dataclass
class DiffWorkload:
    name_a: str
    name_b: str
    rows: list[DiffRow]


@dataclass
class Diff:
    a: Experiment
    b: Experiment
    labels: list[str]
    workloads: list[DiffWorkload]
    changes: list[tuple[str, str, str]] = field(default_factory=list)   # (what, in A, in B)
    notes: list[str] = field(default_factory=list)
    alpha: float = 0.05


def _values(e: Experiment, wi: int, vi: int, metric: str) -> list[float]:
    return [r.metrics[metric] for r in e.cell_runs(wi, vi) if r.status == "ok" and metric in r.metrics]


def _program_key(w: WorkloadRecord) -> tuple:
    # The same program under another path (another machine, another build directory).
    argv = w.argv
    return (argv[0].rsplit("/", 1)[-1], *argv[1:]) if argv else ()


def _match_workloads(a: Experiment, b: Experiment,
                     notes: list[str]) -> list[tuple[WorkloadRecord, WorkloadRecord]]:
    pairs = []
    for wa in a.workloads:
        wb = next((w for w in b.workloads if w.name == wa.name), None) or \
            next((w for w in b.workloads if w.argv == wa.argv), None) or \
            next((w for w in b.workloads if _program_key(w) == _program_key(wa)), None)
        if wb:
            pairs.append((wa, wb))
            if wb.argv != wa.argv:
                notes.append(f"'{wa.name}' and '{wb.name}' run the same program from different paths; "
                             f"compared as the same workload.")
    if not pairs:
        raise AlloclabError(
            f"Experiments {a.id} and {b.id} share no workload: {a.id} ran {', '.join(w.name for w in a.workloads)}; "
            f"{b.id} ran {', '.join(w.name for w in b.workloads)}. `alloclab diff` compares two experiments of "
            f"the same workload (same command and arguments); pick them from `alloclab experiments`.")
    unmatched = [w.name for w in a.workloads if all(w is not p[0] for p in pairs)]
    if unmatched:
        notes.append(f"Workloads only in experiment {a.id}, left out: {', '.join(unmatched)}.")
    return pairs


def _changes(a: Experiment, b: Experiment, labels: list[str]) -> list[tuple[str, str, str]]:
    out = []
    for key in CONTEXT_KEYS:
        va, vb = a.machine.get(key), b.machine.get(key)
        if va != vb:
            out.append((key, str(va), str(vb)))
    variants_a = {v.label: v for v in a.variants}
    variants_b = {v.label: v for v in b.variants}
    for label in labels:
        va, vb = variants_a[label], variants_b[label]
        if va.version != vb.version:
            out.append((f"{label} version", str(va.version), str(vb.version)))
        if va.env != vb.env:
            out.append((f"{label} environment", json.dumps(va.env), json.dumps(vb.env)))
    for key in ("runs", "warmup", "seed"):
        if a.config.get(key) != b.config.get(key):
            out.append((key, str(a.config.get(key)), str(b.config.get(key))))
    return out


def diff_experiments(a: Experiment, b: Experiment, alpha: float = 0.05, min_effect: float = 0.0,
                     details: bool = False) -> Diff:
    labels_a = [v.label for v in a.variants]
    labels_b = [v.label for v in b.variants]
    labels = [label for label in labels_a if label in labels_b]
    if not labels:
        raise AlloclabError(
            f"Experiments {a.id} and {b.id} have no variant label in common ({', '.join(labels_a)} against "
            f"{', '.join(labels_b)}). Give the variants the same @LABEL in both runs to compare them.")
    notes: list[str] = []
    workloads = []
    for wa, wb in _match_workloads(a, b, notes):
        names_b = {d.name for d in b.defs_for(wb.idx)}
        rows = []
        for d in a.defs_for(wa.idx):
            if d.name not in names_b:
                continue
            if not details and d.source == "run" and d.name not in DEFAULT_STANDARD:
                continue
            hib = bool(d.higher_is_better)
            values = []   # (label, values in A, values in B) of the variants either ran
            for label in labels:
                va = _values(a, wa.idx, labels_a.index(label), d.name)
                vb = _values(b, wb.idx, labels_b.index(label), d.name)
                if va or vb:
                    values.append((label, va, vb))
            if values:
                # The one engine, unpaired (two experiments share no blocks), Bonferroni over the same
                # family as a comparison: the variants on one workload and metric.
                cells = [DiffCell(label, stats.summarize(va), stats.summarize(vb),
                                  decide.judge(va, vb, hib, margin=min_effect, design=decide.Design.fixed(1, alpha),
                                               blocks=1, family=len(values)))
                         for label, va, vb in values]
                rows.append(DiffRow(d.name, d.unit, hib, cells))
        workloads.append(DiffWorkload(wa.name, wb.name, rows))
    missing = [x for x in labels_a + labels_b if x not in labels]
    if missing:
        notes.append(f"Only in one experiment, left out: {', '.join(dict.fromkeys(missing))}.")
    return Diff(a, b, labels, workloads, _changes(a, b, labels), notes, alpha)


# --- rendering ----------------------------------------------------------------------------------
