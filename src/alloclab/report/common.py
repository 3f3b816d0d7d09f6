"""Formatting shared by every exporter."""

from __future__ import annotations

import math

from .. import stats
from ..analysis import Analysis, MetricRow

STATUS_MARK = {"verified": "verified", "ineffective": "INEFFECTIVE", "unknown": "unknown"}


def fmt_value(v: float) -> str:
    if v is None or not math.isfinite(v):
        return "n/a"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.3g}" if a < 10 else f"{v:.2f}"
    if a == 0:
        return "0"
    return f"{v:.3g}"


def metric_title(row: MetricRow) -> str:
    arrow = "higher is better" if row.higher_is_better else "lower is better"
    unit = f" ({row.unit})" if row.unit else ""
    return f"{row.name}{unit}", arrow


def delta_text(row: MetricRow, vi: int) -> str:
    c = row.cells[vi].comparison
    return stats.format_comparison(c) if c else ""


def verification_line(a: Analysis, w, vi: int) -> str:
    v = w.verification[vi]
    return STATUS_MARK.get(v["status"], v["status"])


def findings_for(w) -> list[tuple[str, str, stats.Finding]]:
    """(variant label, metric, finding), each finding once per cell, failed-runs once per variant."""
    out, seen = [], set()
    for row in w.rows:
        for c in row.cells:
            for f in c.findings:
                key = (c.variant_idx, f.code) if f.code in ("failed-runs", "all-failed", "high-load", "short-runs") \
                    else (c.variant_idx, row.name, f.code)
                if key in seen:
                    continue
                seen.add(key)
                out.append((c.variant_idx, row.name, f))
    return out
