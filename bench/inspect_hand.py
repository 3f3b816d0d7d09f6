#!/usr/bin/env python3
"""`alloclab inspect`'s advice tried by hand: each program of tests/programs/keptheap.c paused with
freed memory glibc keeps, inspected once (what it holds, the rule that fired, the settings it
names), then restarted with and without each named setting, ROUNDS times in rotated order (round k
starts at the k-th of them, so no setting always runs first or after the same one), each run's
smaps_rollup Anonymous read at the same paused point. Prints a Markdown table: per setting the
Anonymous of each run, the median, and the share of what the rule said it returns that the setting
returned (the plain run's median less the setting's, over the rule's figure); the settings of
the other rules that fired beside it are run too, against the same figure.

Usage: python bench/inspect_hand.py [--rounds 5] [--only tops|sized]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

# (mode, its arguments, the rule that should fire, the reading of what it returns)
CASES = [("tops", ["12", "4"], "glibc-arena-top-raised", "thread tops"),
         ("sized", ["640"], "glibc-free-sized", "free inside")]


def build(tmp: Path) -> Path:
    exe = tmp / "keptheap"
    subprocess.run(["cc", "-O2", "-pthread", "-o", str(exe), str(ROOT / "tests" / "programs" / "keptheap.c")],
                   check=True)
    return exe


def paused(argv: list[str], env: dict[str, str]):
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env={**os.environ, **env})
    if p.stderr.readline() != b"paused\n":
        p.kill()
        raise SystemExit(f"{argv} did not pause")
    return p


def anonymous(argv: list[str], env: dict[str, str]) -> int:
    p = paused(argv, env)
    try:
        text = Path(f"/proc/{p.pid}/smaps_rollup").read_text()
        return int(re.search(r"^Anonymous:\s+(\d+) kB", text, re.M)[1]) * 1024
    finally:
        p.communicate(b"go\n", timeout=60)


def inspect(argv: list[str], db: Path) -> dict:
    p = paused(argv, {})
    try:
        r = subprocess.run([sys.executable, "-m", "alloclab.cli", "inspect", str(p.pid), "-f", "json", "--db", str(db)],
                           capture_output=True, text=True, check=True)
    finally:
        p.communicate(b"go\n", timeout=60)
    return json.loads(r.stdout)["inspections"][0]


def held_figure(ins: dict, what: str) -> int:
    snap = ins["snapshot"]
    if what == "thread tops":
        return sum(a["top_resident"] for a in snap["arenas"] if not a["main"])
    return snap["split"]["parts"]["free_inside"]


def mib(n: float) -> str:
    return f"{n / (1 << 20):.1f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only")
    args = ap.parse_args()
    from alloclab.catalog.variants import parse_variant
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(Path(tmp))
        print("| program | rule | held (as inspected) | setting | Anonymous per run (MiB) | median | returned |")
        print("|---|---|---:|---|---|---:|---:|")
        for mode, extra, rule, what in CASES:
            if args.only and args.only != mode:
                continue
            argv = [str(exe), mode, *extra]
            ins = inspect(argv, Path(tmp) / "i.db")
            fired = {f["rule"]: f for f in ins["answer"]["fired"]}
            if rule not in fired:
                print(f"| {mode} | **{rule} did not fire**: {sorted(fired)} | | | | | |")
                continue
            held = held_figure(ins, what)
            # The rule's own settings first, then those of every other rule that fired.
            specs = [(rule, s["spec"]) for s in fired[rule]["settings"]] + \
                [(r, s["spec"]) for r, f in fired.items() if r != rule for s in f["settings"]]
            by = dict((s, r) for r, s in specs)
            arms = [("(none)", {})] + [(s, dict(parse_variant(s).env)) for _, s in specs]
            runs: dict[str, list[int]] = {name: [] for name, _ in arms}
            for k in range(args.rounds):
                for name, env in arms[k % len(arms):] + arms[:k % len(arms)]:
                    runs[name].append(anonymous(argv, env))
            plain = statistics.median(runs["(none)"])
            for name, _ in arms:
                med = statistics.median(runs[name])
                back = "" if name == "(none)" else f"{(plain - med) / held:.0%}"
                print(f"| {mode} {' '.join(extra)} | {by.get(name, rule)} | {mib(held)} MiB {what} | {name} | "
                      f"{', '.join(mib(x) for x in runs[name])} | {mib(med)} | {back} |")


if __name__ == "__main__":
    main()
