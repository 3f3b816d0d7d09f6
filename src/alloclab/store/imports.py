"""An experiment exported as JSON (`--export-json`, `report -f json`), read back into a store: what
`alloclab diff A.json B.json` compares, as pyperf's compare_to compares two result files, on
another machine than the one that measured them.

In: the exported object (report/jsonout.py: the experiment's row, config, machine, workloads,
variants, metric definitions, verifications, fingerprints and runs with their metrics). Out: the
experiment's id in the store it was written to, which Store.load reads as any other.
"""

from __future__ import annotations

import json

from alloclab.errors import AlloclabError
from alloclab.store.db import Store

_TABLES = (("workloads", "workloads"), ("variants", "variants"), ("metric_defs", "metric_defs"),
           ("verification", "verifications"), ("fingerprints", "fingerprints"))


def _text(v):
    return json.dumps(v) if isinstance(v, (dict, list)) else v


def import_experiment(store: Store, data: dict, source: str) -> int:
    """Writes the exported experiment into `store`; its new id. A file that is not one (no runs, or
    another tool's JSON) is refused in one paragraph naming it."""
    need = ("experiment", "config", "machine", "workloads", "variants", "metric_defs", "runs")
    if not isinstance(data, dict) or any(k not in data for k in need) or not isinstance(data["runs"], list):
        raise AlloclabError(f"{source} is not an experiment exported by alloclab with its runs (it lacks "
                            f"{', '.join(k for k in need if not isinstance(data, dict) or k not in data)}). Export "
                            f"one with `alloclab compare ... --export-json FILE` or `alloclab report ID -f json -o FILE`.")
    db = store.db
    row = data["experiment"]
    cur = db.execute("INSERT INTO experiments (created, finished, kind, title, status, config, machine) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?)",
                     (row.get("created") or "", row.get("finished"), row.get("kind") or "compare",
                      row.get("title") or source, row.get("status") or "complete", json.dumps(data["config"]),
                      json.dumps(data["machine"])))
    exp = cur.lastrowid
    for key, table in _TABLES:
        columns = [c[1] for c in db.execute(f"PRAGMA table_info({table})")]
        for r in data.get(key) or []:
            r = dict(r) | {"experiment_id": exp}
            if table == "fingerprints":
                r = {"experiment_id": exp, "workload_idx": r.pop("workload_idx"), "variant_idx": r.pop("variant_idx"),
                     "data": {k: v for k, v in r.items() if k != "experiment_id"}}
            cols = [c for c in columns if c in r]
            db.execute(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                       [_text(r[c]) for c in cols])
    run_columns = [c[1] for c in db.execute("PRAGMA table_info(runs)") if c[1] != "id"]
    for r in data["runs"]:
        r = dict(r) | {"experiment_id": exp}
        cols = [c for c in run_columns if c in r]
        cur = db.execute(f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                         [_text(r[c]) for c in cols])
        metrics = [(cur.lastrowid, k, v) for k, v in (r.get("metrics") or {}).items() if v is not None]
        db.executemany("INSERT INTO metrics VALUES (?, ?, ?)", metrics)
    db.commit()
    return exp
