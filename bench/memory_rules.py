#!/usr/bin/env python3
"""tune's memory rules on the programs built for each mechanism (tests/programs), at two sizes 4x
apart, and on each one's control: the rules that fired, the memory proposals, the verdict of each
on the metric where it shows (anonymous RSS at the program's end), and how long tune took.

Usage: python bench/memory_rules.py [--only NAME] [--budget 2m]
Prints a Markdown table (docs/results/ keeps the dated figures).
"""

from __future__ import annotations

import argparse
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


def tune(exe: Path, args: list[str], budget: str, db: Path) -> tuple[float, str]:
    t = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "alloclab.cli", "tune", "--db", str(db), "--budget", budget, "--",
                        str(exe), *args], capture_output=True, text=True)
    return time.monotonic() - t, p.stdout + p.stderr


def summary(out: str) -> tuple[list[str], list[str]]:
    text = " ".join(out.split())
    fired = (text.split("rules fired:")[1].split(";")[0] if "rules fired:" in text else "").strip()
    memory = [r for r in MEMORY_RULES if r in fired]
    effects = re.findall(r"((?:glibc|jemalloc|tcmalloc|mimalloc)[^:;()]*?)(?: \([^)]*\))?: [^;]*?"
                         r"anonymous RSS at its end ([-+][\d.]+% \[[^\]]+\])", text)
    return memory, [f"{who.strip()} {eff}" for who, eff in effects]


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
