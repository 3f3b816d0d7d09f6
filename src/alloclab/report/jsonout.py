"""JSON: every raw sample, the metadata, and (when analysed) summaries, verdicts and the
recommendation. The schema is versioned by the integer "schema": fields are only ever added
under one number; a number changes when a field changes meaning or goes away (docs/reports.md)."""

from __future__ import annotations

import dataclasses
import json
import math
import uuid
from typing import TYPE_CHECKING

from alloclab import __version__
from alloclab.store.db import Experiment
from alloclab.report import json_answer
from alloclab.report.common import advice, stored_note, baseline_warning, full_delta, process_lines, statistics_line, \
    verification_summary, wrapper_answers
from alloclab.report.bounds import cpu_bounds

if TYPE_CHECKING:
    from alloclab.stats.results import Results

SUFFIX = ".json"

# 3: the answers, the picks' effects and cpu_bounds as numbers, one metric key (the results'), picks
#    and fronts by label; 2: four verdicts ("same" is gone), paired effects, answers, design.
# Readers of exports (store/imports.py: diff of two files) read only the experiment and its runs,
# which no schema number has changed: a schema 2 file is read as a schema 3 one.
JSON_SCHEMA_VERSION = 3


def json_safe(obj):
    """NaN and infinities become null: JSON has no spelling for them."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def _run_json(run) -> str:
    """One run as JSON text. The RSS series and process list are stored as JSON already: they are
    spliced in as they are rather than parsed and written again (most of the cost at 10,000 runs)."""
    r = run.to_row()
    raw = {k: r[k] for k in ("rss_series", "processes") if isinstance(r.get(k), str) and r[k]}
    rest = {k: v for k, v in r.items() if k not in raw}
    # Stored metrics are finite (SQLite keeps no NaN); the cheap check keeps the promise anyway.
    rest["metrics"] = {k: (v if math.isfinite(v) else None) for k, v in run.metrics.items()}
    body = json.dumps(rest, separators=(",", ":"), default=str)
    return "{" + "".join(f'"{k}":{v},' for k, v in raw.items()) + body[1:]


def _run(run) -> dict:
    return json.loads(_run_json(run))


def _verification(v) -> dict:
    """As stored; one never stored (no verification ran) as its status alone."""
    if v.experiment_id is None:
        return {"status": v.status, "reasons": v.reasons, "notes": [stored_note(n) for n in v.notes]}
    return v.to_row()


def experiment_dict(e: Experiment, runs: bool = True) -> dict:
    return {
        "schema": JSON_SCHEMA_VERSION,
        "generator": f"alloclab {__version__}",
        "experiment": {"id": e.row.id, "created": e.row.created, "finished": e.row.finished, "kind": e.row.kind,
                       "title": e.row.title, "status": e.row.status},
        "config": e.config.to_dict(),
        "machine": e.machine.to_dict(),
        "workloads": [w.to_row() for w in e.workloads],
        "variants": [v.to_row() for v in e.variants],
        "metric_defs": [d.to_row() for d in e.metric_defs],
        "verification": [v.to_row() for v in e.verifications.values()],
        "fingerprints": [{"workload_idx": wi, "variant_idx": vi} | fp
                         for (wi, vi), fp in sorted(getattr(e, "fingerprints", {}).items())],
        "runs": [_run(r) for r in e.runs] if runs else [],
    }


def results_dict(r: Results, runs: bool = True) -> dict:
    a = r.analysis
    # First, as in every other format: a reader (or jq .baseline_warning) sees it before anything.
    out = {"baseline_warning": baseline_warning(a)} | experiment_dict(a.experiment, runs=False)
    out["baseline"] = a.labels[a.baseline_idx]
    level, sentence = verification_summary(a)
    out["analysis"] = {"alpha": a.alpha, "min_effect": a.min_effect, "margin": a.min_effect,
                       "baseline": a.labels[a.baseline_idx],
                       "design": a.design.to_config() if a.design else None,
                       "method": statistics_line(a),
                       "verdicts": "better | worse | equivalent | undecided",
                       "verification": {"level": level, "summary": sentence}}
    out["answers"] = json_answer.answers(a)
    out["wrappers"] = wrapper_answers(a)   # added under schema 2: the named program is not what ran
    out["cpu_bounds"] = [b.to_dict() for b in cpu_bounds(a)]   # undecided, bounded by the allocator's share of a profile
    out["results"] = [{
        "workload": w.name,
        "workload_idx": w.idx,
        "argv": w.argv,
        "runs": {a.labels[vi]: {"total": w.runs_total[vi], "failed": len(w.runs_failed[vi])}
                 for vi in range(len(a.labels))},
        "verification": {a.labels[vi]: _verification(v) for vi, v in w.verification.items()},
        "processes": process_lines(a, w),
        "metrics": [{
            "name": row.name, "unit": row.unit, "higher_is_better": row.higher_is_better,
            "source": row.source, "primary": row.primary,
            "cells": [{"variant": a.labels[c.variant_idx], "summary": dataclasses.asdict(c.summary),
                       "comparison": dataclasses.asdict(c.comparison) if c.comparison else None,
                       "text": full_delta(c.comparison) if c.comparison else None,
                       "findings": [{**dataclasses.asdict(f), "advice": advice(a, f)} for f in c.findings]}
                      for c in row.cells],
        } for row in w.rows],
    } for w in a.workloads]
    out["recommendation"] = json_answer.recommendation(a, r.recommendation)
    if r.tune is not None:   # a tune race's answer: its picks, each with its mechanism and how to apply it
        out["tune"] = r.tune.to_dict()
    out = json_safe(out)
    if runs:
        out["runs"] = [_run(run) for run in a.experiment.runs]
    return out


def render(r: Results) -> str:
    # Compact, through the C encoder (ten times faster than the indenting one): 10,000 runs with
    # their RSS series are megabytes no one reads unformatted anyway (use jq).
    marker = f"@runs-{uuid.uuid4().hex}@"
    out = results_dict(r, runs=False)
    out["runs"] = marker
    text = json.dumps(out, separators=(",", ":"), default=str)
    runs = "[" + ",".join(_run_json(run) for run in r.experiment.runs) + "]"
    return text.replace(f'"{marker}"', runs, 1)


def export(r: Results, options) -> str:
    return render(r)
