"""CSV: one row per run (warm-up and failed runs included, marked), every metric a column, and the
verdict of the run's variant on its workload's primary metric (the same on every run of a cell, so
a spreadsheet can filter on it without a second table)."""

from __future__ import annotations

import csv
import io
from typing import TYPE_CHECKING

from alloclab.stats.analysis import Analysis

if TYPE_CHECKING:
    from alloclab.stats.results import Results

SUFFIX = ".csv"
RUN_COLUMNS = ("experiment", "workload_idx", "workload", "variant_idx", "variant", "allocator", "version",
               "block", "position", "warmup", "status", "exit_code", "signal", "error", "started")
VERDICT_COLUMNS = ("primary_metric", "verdict", "effect_pct", "ci_low_pct", "ci_high_pct", "more_runs")


def metric_columns(a: Analysis) -> list[str]:
    """Metric names in the order the experiment defined them, then any other recorded one."""
    names = list(dict.fromkeys(d.name for d in a.experiment.metric_defs))
    extra = sorted({k for r in a.experiment.runs for k in r.metrics} - set(names))
    return names + extra


def export(results: Results, options=None) -> str:
    a = results.analysis
    e = a.experiment
    metrics = metric_columns(a)
    names = {w.idx: w.name for w in e.workloads}
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow([*RUN_COLUMNS, *VERDICT_COLUMNS, *metrics])
    verdicts = _verdicts(a)
    for run in e.runs:
        v = e.variants[run.variant_idx]
        out.writerow([e.id, run.workload_idx, names.get(run.workload_idx, ""), run.variant_idx, v.label,
                      v.allocator or v.library or "", v.version or "", run.block,
                      run.position, int(bool(run.warmup)), run.status, _blank(run.exit_code),
                      _blank(run.signal), run.error or "", run.started,
                      *verdicts.get((run.workload_idx, run.variant_idx), [""] * len(VERDICT_COLUMNS)),
                      *(_number(run.metrics.get(m)) for m in metrics)])
    return buf.getvalue()


def _verdicts(a: Analysis) -> dict[tuple[int, int], list[str]]:
    from alloclab.report.common import primary_comparisons
    out = {}
    pct = lambda r: _number((r - 1) * 100) if r == r else ""  # noqa: E731
    for w, row, vi, c in primary_comparisons(a):
        out.setdefault((w.idx, vi), [row.name, c.verdict, pct(c.ratio), pct(c.ci_low), pct(c.ci_high),
                                     _blank(c.more_runs)])
    return out


def _blank(v) -> str:
    return "" if v is None else str(v)


def _number(v) -> str:
    # repr keeps every digit; a spreadsheet reads it back exactly.
    return "" if v is None else repr(float(v))
