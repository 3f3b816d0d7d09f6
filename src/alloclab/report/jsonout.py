"""JSON: every raw sample, the metadata, and (when analysed) summaries and verdicts."""

from __future__ import annotations

import dataclasses
import json
import math

from ..analysis import Analysis
from ..store import Experiment

JSON_SCHEMA_VERSION = 1


def _clean(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def experiment_dict(e: Experiment) -> dict:
    return {
        "schema": JSON_SCHEMA_VERSION,
        "experiment": {k: e.row[k] for k in ("id", "created", "finished", "kind", "title", "status")},
        "config": e.config,
        "machine": e.machine,
        "workloads": e.workloads,
        "variants": e.variants,
        "metric_defs": e.metric_defs,
        "verification": [v for v in e.verifications.values()],
        "runs": [{k: (json.loads(v) if k in ("rss_series", "processes") and isinstance(v, str) else v)
                  for k, v in r.items()} for r in e.runs],
    }


def analysis_dict(a: Analysis) -> dict:
    out = experiment_dict(a.experiment)
    out["baseline"] = a.labels[a.baseline_idx]
    out["results"] = [{
        "workload": w.name,
        "metrics": [{
            "name": row.name, "unit": row.unit, "higher_is_better": row.higher_is_better,
            "cells": [{"variant": a.labels[c.variant_idx], "summary": dataclasses.asdict(c.summary),
                       "comparison": dataclasses.asdict(c.comparison) if c.comparison else None,
                       "findings": [dataclasses.asdict(f) for f in c.findings]} for c in row.cells],
        } for row in w.rows],
    } for w in a.workloads]
    return out


def render(a: Analysis) -> str:
    return json.dumps(_clean(analysis_dict(a)), indent=1, default=str)
