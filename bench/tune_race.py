#!/usr/bin/env python3
"""tune's race against measuring every candidate to the end, same candidates, one sitting.

1. `alloclab tune` on the program (its diagnosis and its race, timed as a whole);
2. `alloclab compare --runs N` with the race's own variants, N = the most runs any variant got in
   the race: what the same verdicts would cost if no candidate left the race early.
Prints both wall times and their ratio (the issue's target: the race at most half).

Usage: python bench/tune_race.py [--budget 10m] -- CMD [ARGS]...
       python bench/tune_race.py recipe:NAME
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ALLOCLAB = [sys.executable, "-m", "alloclab.cli"]


def timed(argv: list[str]) -> float:
    t = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return time.monotonic() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", default=None)
    ap.add_argument("target", nargs="+")
    args = ap.parse_args()
    from alloclab.store.db import Store

    tmp = Path(tempfile.mkdtemp(prefix="tune-race-"))
    is_file = len(args.target) == 1 and (args.target[0].startswith("recipe:") or args.target[0].endswith(".toml"))
    budget = ["--budget", args.budget] if args.budget else []
    target = args.target if is_file else ["--", *args.target]
    t_tune = timed([*ALLOCLAB, "tune", "--db", str(tmp / "tune.db"), *budget, *target])
    store = Store(tmp / "tune.db")
    race = store.load(2)
    runs: dict[int, int] = {}
    for r in race.runs:
        if not r["warmup"]:
            runs[r["variant_idx"]] = runs.get(r["variant_idx"], 0) + 1
    n = max(runs.values())
    specs = [a for v in race.variants for a in ("-a", v["spec"])]
    command = ["run", args.target[0]] if is_file else ["compare", *target]
    t_all = timed([*ALLOCLAB, command[0], "--db", str(tmp / "all.db"), "--runs", str(n), *specs, *command[1:]])
    print(f"race: {len(race.variants) - 1} candidates, runs per variant {dict(sorted(runs.items()))}")
    print(f"tune (diagnosis + race): {t_tune:.0f} s; every candidate to {n} runs: {t_all:.0f} s; "
          f"ratio {t_tune / t_all:.2f}")


if __name__ == "__main__":
    main()
