#!/usr/bin/env python3
"""tune on programs not written for alloclab, beside a hand measurement in the same sitting.

For each case: `alloclab tune --budget B -- PROGRAM` (its answer read from `report -f json`), then by
hand, interleaved, REPS runs of the program plain and with each setting the answer picked or decided
better (its environment as the answer's env line gives it): wall time from wait4, and the peak
RSS (VmHWM) and anonymous RSS as the program exits (gdb stops it at exit_group and reads /proc, as
alloclab's launcher reads end_anon_mb). Prints tune's effect and interval beside the hand ratio of
medians (and the hand ratios' range), one line per setting and metric.

Cases (tests/programs): datawork (CPython with numpy, freeing arrays of 1-12 MiB), cacheidle (linked
to jemalloc: a 200 MiB cache filled, freed, idle), msgchurn (two threads churning 64 KiB messages),
jobrunner (a Ruby job runner, 16 threads), npthreads (CPython threads with numpy: zeroed result arrays of
1-12 MiB, a sixteenth of each filled), npsparse (the same, a sixty-fourth of each filled: there glibc's
mmap threshold is faster and smaller by hand).

Usage: python bench/tune_real.py [--case NAME ...] [--reps N] [--budget 3m] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "tests" / "programs"
ALLOCLAB = [sys.executable, "-m", "alloclab.cli"]
METRICS = {"wall_s": "wall_s", "peak_rss_mb": "peak_kb", "end_anon_mb": "end_anon_kb"}


def build(out: Path) -> dict[str, list[str]]:
    jemalloc = next(p for p in ("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "/lib/x86_64-linux-gnu/libjemalloc.so.2")
                    if Path(p).exists())
    subprocess.run(["cc", "-O2", "-o", str(out / "cacheidle"), str(PROGRAMS / "cacheidle.c"), jemalloc], check=True)
    subprocess.run(["cc", "-O2", "-pthread", "-o", str(out / "msgchurn"), str(PROGRAMS / "msgchurn.c")], check=True)
    return {
        "datawork": [sys.executable, str(PROGRAMS / "datawork.py"), "30"],
        "cacheidle": [str(out / "cacheidle"), "200", "500"],
        "msgchurn": [str(out / "msgchurn"), "2", "20000"],
        "jobrunner": [shutil.which("ruby") or "ruby", str(PROGRAMS / "jobrunner.rb"), "16", "160"],
        "npthreads": [sys.executable, str(PROGRAMS / "npthreads.py"), "4", "400"],
        "npsparse": [sys.executable, str(PROGRAMS / "npthreads.py"), "4", "400", "64"],
    }


def tune(argv: list[str], budget: str, db: Path) -> tuple[dict, float, str]:
    t = time.monotonic()
    proc = subprocess.run(ALLOCLAB + ["tune", "--db", str(db), "--budget", budget, "--", *argv],
                          capture_output=True, text=True)
    spent = time.monotonic() - t
    if proc.returncode != 0:
        raise SystemExit(f"tune failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    report = subprocess.run(ALLOCLAB + ["report", "--db", str(db), "-f", "json"], capture_output=True, text=True,
                            check=True)
    return json.loads(report.stdout)["tune"], spent, proc.stdout


def settings_of(answer: dict) -> dict[str, dict[str, str]]:
    """label -> the environment its env line sets, for the picks and those decided better too."""
    from alloclab.catalog.variants import parse_variant
    out = {}
    for r in answer["picks"]:   # as the answer tells the user to apply it
        line = r.get("env_line") or ""
        out[r["label"]] = dict(kv.split("=", 1) for kv in line.split() if re.match(r"^[A-Z_][A-Z0-9_]*=", kv))
    linked = (answer.get("baseline") or {}).get("how", "system") != "system"
    for r in answer["others"]:
        if r["outcome"] != "also better" or r["label"] in out:
            continue
        v = parse_variant(r["spec"])   # the variant as the race ran it: its preload and its settings
        if linked and v.is_system:
            continue   # glibc over a program linked to another allocator needs alloclab's forwarder
        out[r["label"]] = {k: str(x) for k, x in v.env.items()}
    return out


def one_run(argv: list[str], env: dict) -> dict:
    t = time.monotonic()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t
    gdb = shutil.which("gdb")
    anon, peak = None, ru.ru_maxrss
    if gdb:
        out = subprocess.run([gdb, "-q", "-batch", "-ex", "catch syscall exit_group", "-ex", "run", "-ex",
                              "info proc status", "--args", *argv], env=env, capture_output=True, text=True).stdout
        m = re.search(r"RssAnon:\s+(\d+) kB", out)
        anon = int(m.group(1)) if m else None
        # The peak from the program's own high-water mark: wait4's ru_maxrss starts from this
        # Python's RSS (the child is forked from it), 27 MiB that hide a small program's peak.
        hwm = re.search(r"VmHWM:\s+(\d+) kB", out)
        peak = int(hwm.group(1)) if hwm else peak
    return {"wall_s": wall, "peak_kb": peak, "end_anon_kb": anon, "status": status}


def hand(argv: list[str], settings: dict[str, dict[str, str]], reps: int) -> dict[str, list[dict]]:
    base = {k: v for k, v in os.environ.items() if not re.match(r"^(LD_PRELOAD|MALLOC_|TCMALLOC_|MIMALLOC_)", k)}
    runs: dict[str, list[dict]] = {"plain": []} | {label: [] for label in settings}
    for _ in range(reps):   # interleaved: one of each in turn
        for label in runs:
            runs[label].append(one_run(argv, base | settings.get(label, {})))
    return runs


def first_line(text: str) -> str:
    """The answer's first line: the one after its heading (the diagnosis comes before it)."""
    lines = text.splitlines()
    at = next((i for i, line in enumerate(lines) if line.startswith("Tune answer")), None)
    return lines[at + 1] if at is not None and at + 1 < len(lines) else (lines[0] if lines else "")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", action="append")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--budget", default="3m")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="alloclab-tune-real-"))
    out.mkdir(parents=True, exist_ok=True)
    cases = build(out)
    for name in args.case or list(cases):
        argv = cases[name]
        answer, spent, text = tune(argv, args.budget, out / f"{name}.db")
        (out / f"{name}.answer.txt").write_text(text)
        print(f"\n## {name}: {' '.join(argv)}\ntune --budget {args.budget}: {spent:.0f} s; first line: "
              f"{first_line(text)}")
        settings = settings_of(answer)
        runs = hand(argv, settings, args.reps)
        plain = runs["plain"]
        for label, rs in runs.items():
            if label == "plain":
                continue
            row = next(r for r in answer["picks"] + answer["others"] if r["label"] == label)
            for e in row["effects"]:
                key = METRICS.get(e["metric"])
                if key is None or any(r[key] is None for r in rs + plain):
                    continue
                ratios = [a[key] / b[key] for a in rs for b in plain]
                med = statistics.median(r[key] for r in rs) / statistics.median(r[key] for r in plain)
                inside = e["low"] <= med <= e["high"]
                print(f"  {label}: {e['metric']}: tune {e['verdict']} {(e['ratio'] - 1) * 100:+.1f}% "
                      f"[{(e['low'] - 1) * 100:+.1f}, {(e['high'] - 1) * 100:+.1f}]; by hand "
                      f"{(med - 1) * 100:+.1f}% (ratios {(min(ratios) - 1) * 100:+.1f} to {(max(ratios) - 1) * 100:+.1f}, "
                      f"{args.reps} runs each){'' if inside else '  <- outside'}")
        for label, rs in runs.items():
            print(f"  {label}: wall median {statistics.median(r['wall_s'] for r in rs):.3f} s "
                  f"({min(r['wall_s'] for r in rs):.3f}-{max(r['wall_s'] for r in rs):.3f}), peak RSS median "
                  f"{statistics.median(r['peak_kb'] for r in rs) / 1024:.1f} MiB"
                  + (f", anon at exit median {statistics.median(r['end_anon_kb'] for r in rs) / 1024:.1f} MiB"
                     if all(r['end_anon_kb'] is not None for r in rs) else ""))
    print(f"\nstores and answers in {out}")


if __name__ == "__main__":
    main()
