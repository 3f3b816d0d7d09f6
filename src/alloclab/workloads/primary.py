"""Which metrics a workload's verdict rests on, in one rule for the runner, the statistics, the
profiler and the reports: the metrics marked primary (a service has one per client); else the
program's first metric; else wall time.

The rule reads anything with `.name`, `.source` and `.primary`: metric definitions
(workloads.metrics.MetricDef), the store's (store.model.StoredMetric) and the analysis' rows
(stats.analysis.MetricRow) alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

M = TypeVar("M")


def primary_metrics(metrics: Sequence[M]) -> list[M]:
    marked = [m for m in metrics if m.primary]
    if marked:
        return marked
    program = next((m for m in metrics if m.source != "run"), None)
    if program is not None:
        return [program]
    return [m for m in metrics if m.name == "wall_s"][:1]


def primary_metric(metrics: Sequence[M]) -> M | None:
    """The first of primary_metrics: the one a single-metric view (summary, sweep, profile) shows."""
    found = primary_metrics(metrics)
    return found[0] if found else None
