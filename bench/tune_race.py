#!/usr/bin/env python3
"""tune's time to its answer against measuring every candidate to the end, same candidates.

1. `alloclab tune` on the program (diagnosis, screen where it screens, race), timed as a whole;
2. measuring every candidate to the end, beside the same diagnosis. With --measure: `alloclab
   compare` (or `run`) of every candidate the rules proposed, until each comparison with the default
   is decided (compare's own rule, same budget): no candidate leaves because another leads, none is
   screened out. Without it (a server whose runs cost 20 s: an hour), an estimate: every candidate
   to N runs (N = the most runs any variant got in the race) after a warm-up block, at the race's own
   mean time per run (from its runs' start times, server start and stop included).
Prints both, and their ratio (the issue's target: tune at most half). With --repeat K, the whole
measurement K times in a row, and the median ratio.

Usage: python bench/tune_race.py [--budget 10m] [--measure] [--repeat K] -- CMD [ARGS]...
       python bench/tune_race.py recipe:NAME
       python bench/tune_race.py --from-db tune.db --tune-seconds 971   (a tune run already timed)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ALLOCLAB = [sys.executable, "-m", "alloclab.cli"]


def timed(argv: list[str]) -> float:
    t = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    print(proc.stdout[-6000:])
    return time.monotonic() - t


def seconds_between(a: str, b: str) -> float:
    return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()


def main() -> None:
    ratios = []
    args = None
    while args is None or len(ratios) < args.repeat:
        args, ratio = one()
        ratios.append(ratio)
    if len(ratios) > 1:
        ratios.sort()
        print(f"ratios {', '.join(f'{r:.3f}' for r in ratios)}; median {ratios[len(ratios) // 2]:.3f}")


def one():
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", default=None)
    ap.add_argument("--measure", action="store_true", help="run the every-candidate comparison instead of "
                                                           "estimating it from the race's time per run")
    ap.add_argument("--from-db", help="a tune already run and timed (with --tune-seconds): estimate from its "
                                       "store instead of running tune again")
    ap.add_argument("--tune-seconds", type=float)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("target", nargs="*")
    args = ap.parse_args()
    from alloclab.store.db import Store

    tmp = Path(tempfile.mkdtemp(prefix="tune-race-"))
    is_file = len(args.target) == 1 and (args.target[0].startswith("recipe:") or args.target[0].endswith(".toml"))
    budget = ["--budget", args.budget] if args.budget else []
    target = args.target if is_file else ["--", *args.target]
    if args.from_db:
        store, t_tune = Store(args.from_db), args.tune_seconds
    else:
        t_tune = timed([*ALLOCLAB, "tune", "--db", str(tmp / "tune.db"), *budget, *target])
        store = Store(tmp / "tune.db")
    exps = {e["kind"]: store.load(e["id"]) for e in store.experiments()}
    diag, race = exps["tune-diagnosis"], exps["tune"]
    tune_cfg = race.config.tune
    every = [race.variants[0].spec] + [c["spec"] for c in tune_cfg["candidates"]]
    if "tune-screen" in exps:
        every = [v.spec for v in exps["tune-screen"].variants]
    runs: dict[tuple[int, int], int] = {}   # measured runs per cell (workload, variant)
    for r in race.runs:
        if not r.warmup:
            key = (r.workload_idx, r.variant_idx)
            runs[key] = runs.get(key, 0) + 1
    n = max(runs.values())
    starts = sorted(r.started for r in race.runs)
    per_run = seconds_between(starts[0], race.row.finished) / len(race.runs)
    # The fingerprint runs themselves, timed to the millisecond (the rows' times are whole seconds, and
    # a recipe's set-up, which the counterfactual's `run` does again on its own, is not counted twice).
    diag_s = diag.config.fingerprint_s or seconds_between(diag.row.created, diag.row.finished)
    cells = len(every) * len(race.workloads)
    warm = sum(1 for r in race.runs if r.warmup) // max(1, len(race.variants) * len(race.workloads))
    estimate = diag_s + (n + warm) * cells * per_run
    print(f"race: {len(race.variants) - 1} of {len(every) - 1} candidates, runs per cell (workload, variant) {dict(sorted(runs.items()))}; "
          f"{per_run:.1f} s a run")
    line = (f"tune (diagnosis + screen + race): {t_tune:.1f} s; every candidate to {n} runs, estimated: "
            f"{estimate:.0f} s (diagnosis {diag_s:.1f} s + {n + warm} blocks x {cells} cells x {per_run:.1f} s); "
            f"ratio {t_tune / estimate:.2f}")
    ratio = t_tune / estimate
    if args.measure:
        specs = [a for spec in every for a in ("-a", spec)]
        command = ["run", args.target[0]] if is_file else ["compare", *target]
        t_all = timed([*ALLOCLAB, command[0], "--db", str(tmp / "all.db"), *budget, *specs, *command[1:]])
        ratio = t_tune / (t_all + diag_s)
        line += (f"; measured, every candidate until decided: {t_all:.1f} s + diagnosis {diag_s:.1f} s, "
                 f"ratio {ratio:.3f}")
    print(line)
    return args, ratio


if __name__ == "__main__":
    main()
