#!/usr/bin/env python3
"""tune's memory rules on the programs built for each mechanism (tests/programs), at two sizes 4x
apart, and on each one's control: the rules that fired, the memory proposals, the verdict of each
on the metric where it shows (anonymous RSS at the program's end), and how long tune took.

Usage: python bench/memory_rules.py [--only NAME] [--budget 2m]
Prints a Markdown table (docs/results/ keeps the dated figures).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# (program, size args, control args): the two sizes are 4x apart.
CASES = [
    ("trimhold", [["12"], ["48"]], ["12", "3", "1"]),
    ("mmapheap", [["4"], ["16"]], ["4", "24", "1"]),
    ("arenahold", [["12"], ["48"]], ["12", "3", "1"]),
    ("pinned", [["12"], ["48"]], ["12", "1"]),
]
MEMORY_RULES = ("glibc-trim-raised", "glibc-mmap-raised", "glibc-arena-free", "glibc-free-pinned",
                "jemalloc-dirty-rest", "tcmalloc-page-heap-rest", "mimalloc-held-rest")


def build(tmp: Path, name: str) -> Path:
    exe = tmp / name
    subprocess.run(["cc", "-O2", "-o", str(exe), str(ROOT / "tests" / "programs" / f"{name}.c"), "-lpthread"],
                   check=True)
    return exe


def tune(exe: Path, args: list[str], budget: str, db: Path) -> tuple[float, dict]:
    """tune's wall time, and its race as `alloclab report -f json` gives it (an empty dict where
    tune stopped after the diagnosis)."""
    t = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "alloclab.cli", "tune", "--db", str(db), "--budget", budget, "--",
                        str(exe), *args], capture_output=True, text=True)
    took = time.monotonic() - t
    if p.returncode != 0:
        raise SystemExit(f"tune failed on {exe.name} {' '.join(args)}:\n{p.stdout}{p.stderr}")
    r = subprocess.run([sys.executable, "-m", "alloclab.cli", "report", "--db", str(db), "-f", "json"],
                       capture_output=True, text=True)
    return took, json.loads(r.stdout) if r.returncode == 0 else {}


def summary(race: dict) -> tuple[list[str], list[str]]:
    """The memory rules that fired, and each decided memory effect at the program's end: the
    picks, then the others decided better."""
    t = race.get("tune") or {}
    fired = ((race.get("config") or {}).get("tune") or {}).get("fired", [])
    memory = [r for r in MEMORY_RULES if r in fired]
    effects = [f"**{p['label']}** {m.group(1)} (pick: {p['goal']})" for p in t.get("picks", [])
               if (m := re.search(r"anonymous RSS at its end ([-+][\d.]+% \[[^\]]+\])", p["effect"]))]
    for line in t.get("also_better", []):
        if m := re.search(r"anonymous RSS at its end ([-+][\d.]+% \[[^\]]+\])", line):
            effects.append(f"{line.split(' (')[0]} {m.group(1)}")
    speed = [f"{p['label']} {p['effect']}" for p in t.get("picks", []) if p["goal"] == "speed"]
    return memory, effects + [f"speed pick: {s}" for s in speed]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only")
    ap.add_argument("--budget", default="2m")
    a = ap.parse_args()
    print("| program | args | tune took | memory rules fired | decided at the end (anonymous RSS) |")
    print("|---|---|---:|---|---|")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for name, sizes, control in CASES:
            if a.only and a.only != name:
                continue
            exe = build(tmp, name)
            for args in [*sizes, control]:
                took, out = tune(exe, args, a.budget, tmp / f"{name}-{'-'.join(args)}.db")
                memory, effects = summary(out)
                print(f"| {name} | {' '.join(args)}{' (control)' if args == control else ''} | {took:.0f} s | "
                      f"{', '.join(memory) or 'none'} | {'; '.join(effects) or 'none'} |", flush=True)


if __name__ == "__main__":
    main()
