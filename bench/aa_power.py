#!/usr/bin/env python3
"""Does alloclab decide correctly?  A/A false-positive rate and power of the default sequential
rule (--until-decided), on real runs.

Runs a built-in workload (default: `simple`, quick size) through the core (runner.Runner
with until_decided, exactly as `alloclab compare` runs by default, a temporary store) under three
variants of ONE allocator, in the same randomized interleaved blocks:

    glibc@a                     the baseline
    glibc@b                     the same allocator under another label (the A/A pair)
    glibc:<VAR>=N@ewN           the same allocator, but the program does N extra units of
                                allocation-free CPU work per operation (--extra-work=N), N
                                calibrated to a +5% slowdown

The slowdown is made a *variant* with a fixed `sh -c 'exec "$@" --extra-work="${VAR:-0}"'`
wrapper: the variant sets VAR in the environment of its runs and the wrapper turns it into the
workload's flag, so the baseline and the slowed program are scheduled exactly as two allocators.

Two estimates:
  * real experiments: each repeated sequential experiment gives one A/A verdict and one verdict
    on the +5% slowdown, with the runs and the time it took (the A/A comparison can only end as
    "equivalent within +-2%" or at the budget, so every experiment runs its budget out);
  * resampled experiments: the measured blocks of all real experiments, in the order they ran,
    are cut into segments of 25 consecutive blocks, and many sequential experiments are rebuilt
    from randomly drawn segments (a moving-block bootstrap: the drift within a segment is kept),
    then judged by the same rule (decide.py) at the same looks.
Default runtime: about 10-15 minutes on 2 cores.  Results and method: docs/statistics.md.
Usage:  .venv/bin/python bench/aa_power.py [--help]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from alloclab.stats import analysis
from alloclab.stats import decide
from alloclab.measure import machine
from alloclab.errors import AlloclabError
from alloclab.workloads.metrics import MetricDef
from alloclab.measure.runner import Runner, Progress, Settings
from alloclab.stats.looks import Judge
from alloclab.store.db import Store
from alloclab.catalog.variants import parse_variants
from alloclab.workloads.command import Workload
from alloclab.workloads import builtin

ENV_VAR = "ALLOCLAB_BENCH_EXTRA_WORK"
# A fixed script: the program and its arguments arrive as "$@", the amount of extra work from
# the variant's environment; no user text is ever part of it.
WRAPPER = f'exec "$@" --extra-work="${{{ENV_VAR}:-0}}"'
CALIBRATION_STEP = 32
MARGIN = 0.02          # alloclab's default --min-effect
SEGMENT = 25


# --- set-up ------------------------------------------------------------------------------------

def wrapped_workload(name: str, params: dict[str, str]) -> tuple[Workload, MetricDef]:
    inner = builtin.workload(name, params, quick=True)
    w = Workload(name=inner.name + " (extra work from the variant)",
                 argv=["/bin/sh", "-c", WRAPPER, "sh", *inner.argv],
                 metrics=inner.metrics, params=inner.params, info=inner.info)
    return w, builtin.get(name).primary()


def quiet_progress(tag: str) -> Progress:
    """No progress bar; notes on stderr, less the expected one about our pass-through variable."""
    def note(text: str) -> None:
        if ENV_VAR not in text:
            print(f"  [{tag}] {text}", file=sys.stderr)
    return Progress(note=note)


def run_core(store: Store, workload: Workload, specs: list[str], seed: int, tag: str, *, runs: int = 10,
             until_decided: bool = False, max_runs: int = 300, budget_s: float = 600) -> int:
    settings = Settings(runs=runs, warmup=1, seed=seed, verify=True, kind="compare", title=f"aa_power {tag}",
                        until_decided=until_decided, first_look=10, max_runs=max_runs, max_seconds=budget_s,
                        margin=MARGIN)
    return Runner(store, [workload], parse_variants(specs), settings, quiet_progress(tag), judge=Judge()).run()


def primary_blocks(store: Store, exp_id: int, metric: str) -> dict[int, dict[str, float]]:
    """block -> label -> value of the primary metric."""
    a = analysis.analyze(store.load(exp_id))
    row = a.workloads[0].row(metric)
    blocks: dict[int, dict[str, float]] = {}
    for c in row.cells:
        for (_, b), v in zip(c.blocks, c.values):
            blocks.setdefault(b, {})[a.labels[c.variant_idx]] = v
    return dict(sorted(blocks.items()))


def slowdown(ratio: float, higher_is_better: bool) -> float:
    """Fractional slowdown from a candidate/baseline ratio of the metric (+0.05 = 5% slower)."""
    return (1 / ratio - 1) if higher_is_better else (ratio - 1)


# --- calibration -------------------------------------------------------------------------------

def calibrate(store: Store, workload: Workload, metric: MetricDef, target: float, runs: int, seed: int) -> tuple[int, dict]:
    """Extra work that realizes the target slowdown. A first guess comes from one large step
    (CALIBRATION_STEP units, roughly doubling the time); small amounts cost less than that slope
    says (they overlap with the allocator's own work in the pipeline), so a ladder of multiples of
    the guess is then measured side by side and the smallest that realizes the target is taken.
    The report gives the slowdown realized over every block of the experiments."""
    def measured(values: list[int], tag: str) -> dict[int, float]:
        specs = ["glibc@ew0"] + [f"glibc:{ENV_VAR}={v}@ew{v}" for v in values]
        blocks = primary_blocks(store, run_core(store, workload, specs, seed, tag, runs=runs), metric.name)
        return {v: slowdown(float(np.median([b[f"ew{v}"] / b["ew0"] for b in blocks.values() if len(b) == len(specs)])),
                            metric.higher_is_better) for v in values}
    per_unit = measured([CALIBRATION_STEP], "calibration step")[CALIBRATION_STEP] / CALIBRATION_STEP
    guess = max(1, round(target / per_unit)) if per_unit > 0 else 1
    ladder = sorted({guess * k for k in (1, 2, 3, 4, 6)})
    realized = measured(ladder, "calibration ladder")
    chosen = next((v for v in ladder if realized[v] >= target), ladder[-1])
    return chosen, {"step": CALIBRATION_STEP, "runs": runs, "slowdown_per_unit": per_unit,
                    "ladder": {str(v): realized[v] for v in ladder}}


# --- the rule on resampled sequences ------------------------------------------------------------

def sequential_verdict(pairs: list[tuple[float, float]], design: decide.Design, family: int,
                       higher_is_better: bool) -> tuple[str, int]:
    """The verdict and the runs used of the sequential rule on (baseline, candidate) pairs in order."""
    for n in design.looks:
        if n > len(pairs):
            break
        conf = 1 - design.alpha_at(n) / family
        e = decide.paired_effect({i: b for i, (b, _) in enumerate(pairs[:n])},
                                 {i: c for i, (_, c) in enumerate(pairs[:n])}, conf, design.df_drop,
                                 design.trim_from)
        v = decide.verdict_for(e.ratio, e.ci_low, e.ci_high, higher_is_better, MARGIN)
        if v in decide.DECIDED:
            return v, n
    return "undecided", min(len(pairs), design.looks[-1])


def resampled(sequences: list[list[tuple[float, float]]], draws: int, design: decide.Design, seed: int,
              higher_is_better: bool, family: int = 2, swap: bool = False) -> dict:
    """Sequential experiments rebuilt from segments of the real blocks. `swap`: each block's two labels
    are swapped at random (an A/A pair's exact null: without it, the small difference the real
    experiments happened to show becomes a true effect that every resample inherits, and the
    false verdicts lean one way)."""
    segments = [seq[i:i + SEGMENT] for seq in sequences for i in range(0, len(seq) - SEGMENT + 1, SEGMENT)]
    if not segments:
        return {"draws": 0}
    rng = np.random.default_rng(seed)
    counts = {v: 0 for v in decide.VERDICTS}
    used = []
    for _ in range(draws):
        pairs: list[tuple[float, float]] = []
        while len(pairs) < design.looks[-1]:
            seg = segments[int(rng.integers(len(segments)))]
            if swap:
                flip = rng.integers(2, size=len(seg))
                seg = [(c, b) if f else (b, c) for (b, c), f in zip(seg, flip)]
            pairs += seg
        v, n = sequential_verdict(pairs, design, family, higher_is_better)
        counts[v] += 1
        used.append(n)
    return {"draws": draws, "segments": len(segments), "verdicts": counts, "median_runs": float(np.median(used))}


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    if n == 0:
        return math.nan, math.nan
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


# --- main --------------------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", default="simple", choices=["simple", "larson"])
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="workload parameter (default: the quick size)")
    p.add_argument("--experiments", type=int, default=8, help="real sequential experiments (default 8)")
    p.add_argument("--aa-labels", type=int, default=1,
                   help="A/A labels beside the baseline (default 1); 6 makes a family of seven A/A comparisons "
                   "(plus the slowdown), the demo's shape")
    p.add_argument("--max-runs", type=int, default=300, help="runs per variant at most (compare's default: 300)")
    p.add_argument("--budget", type=float, default=600, help="seconds per experiment (compare's default: 600)")
    p.add_argument("--resamples", type=int, default=2000, help="resampled sequential experiments")
    p.add_argument("--target", type=float, default=5.0, help="injected slowdown to aim at, in percent")
    p.add_argument("--extra-work", type=int, default=None, help="extra-work units (skips calibration)")
    p.add_argument("--calibration-runs", type=int, default=20)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", type=Path, help="write every number here as JSON")
    p.add_argument("--db", type=Path, help="keep the runs in this store (default: a temporary one)")
    return p.parse_args(argv)


def benchmark(args, store: Store) -> dict:
    t0 = time.monotonic()
    load_start = os.getloadavg()
    try:
        params = dict(kv.split("=", 1) for kv in args.param)
    except ValueError:
        raise AlloclabError(f"--param takes KEY=VALUE (e.g. --param iters=50000), got {args.param}.") from None
    workload, metric = wrapped_workload(args.workload, params)
    hib = metric.higher_is_better
    report: dict = {"machine": {k: v for k, v in machine.snapshot().items()
                                if k in ("cpu_model", "cores", "usable_cores", "kernel", "os", "glibc", "governor", "thp")},
                    "workload": workload.argv[4:], "metric": metric.name, "higher_is_better": hib,
                    "load_start": list(load_start), "max_runs": args.max_runs, "budget_s": args.budget}
    if args.extra_work:
        extra, report["calibration"] = args.extra_work, None
    else:
        extra, report["calibration"] = calibrate(store, workload, metric, args.target / 100, args.calibration_runs,
                                                 args.seed)
        print(f"calibration: {report['calibration']['slowdown_per_unit']:+.2%} per unit; {extra} units", file=sys.stderr)
    ew = f"ew{extra}"
    aa_labels = [chr(ord("b") + i) for i in range(args.aa_labels)]
    specs = ["glibc@a", *(f"glibc@{lab}" for lab in aa_labels), f"glibc:{ENV_VAR}={extra}@{ew}"]
    family = len(specs) - 1
    real, slow_seqs = [], []
    aa_seqs: dict[str, list] = {lab: [] for lab in aa_labels}
    for i in range(args.experiments):
        t = time.monotonic()
        exp_id = run_core(store, workload, specs, args.seed + 100 + i, f"experiment {i + 1}", until_decided=True,
                          max_runs=args.max_runs, budget_s=args.budget)
        a = analysis.analyze(store.load(exp_id))
        row = a.workloads[0].primary()
        cmp = {a.labels[c.variant_idx]: c.comparison for c in row.cells if c.comparison}
        blocks = primary_blocks(store, exp_id, metric.name)
        for lab in aa_labels:
            aa_seqs[lab].append([(b["a"], b[lab]) for b in blocks.values() if "a" in b and lab in b])
        slow_seqs.append([(b["a"], b[ew]) for b in blocks.values() if "a" in b and ew in b])
        rec = {"id": exp_id, "seconds": time.monotonic() - t, "stopped": a.experiment.config.stopped,
               "runs": {lab: c.n_candidate for lab, c in cmp.items()},
               "verdicts": {lab: c.verdict for lab, c in cmp.items()},
               "effect": {lab: slowdown(c.ratio, hib) for lab, c in cmp.items()},
               "interval": {lab: sorted(slowdown(x, hib) for x in (c.ci_low, c.ci_high)) for lab, c in cmp.items()},
               "load_max": max(r["extra"].get("load") or 0 for r in a.experiment.runs)}
        real.append(rec)
        print(f"experiment {i + 1}/{args.experiments} ({rec['seconds']:.0f} s, load max {rec['load_max']:.1f}): " + ", ".join(
            f"{lab} {c.verdict} after {c.n_candidate} runs ({slowdown(c.ratio, hib):+.1%})" for lab, c in cmp.items()),
            file=sys.stderr)
    design = decide.Design.sequential(10, args.max_runs)
    realized = [b / a for seq in slow_seqs for a, b in seq]
    return report | {
        "extra_work": extra, "experiments": args.experiments, "design": design.to_config(), "real": real,
        "aa_labels": aa_labels, "family": family,
        "realized_slowdown": slowdown(float(np.exp(np.mean(np.log(realized)))), hib) if realized else math.nan,
        # Every A/A label's blocks pooled: each is the same null, with labels swapped at random.
        "resampled": {"aa": resampled([q for seqs in aa_seqs.values() for q in seqs], args.resamples, design,
                                      args.seed, hib, family, swap=True),
                      "slow": resampled(slow_seqs, args.resamples, design, args.seed + 1, hib, family)},
        "load_end": list(os.getloadavg()), "seconds": time.monotonic() - t0}


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        with tempfile.TemporaryDirectory(prefix="aa_power-") as tmp:
            store = Store(args.db or Path(tmp) / "aa_power.db")
            try:
                report = benchmark(args, store)
            finally:
                store.close()
    except AlloclabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))
    return 0


def print_report(r: dict) -> None:
    m = r["machine"]
    print(f"machine: {m['cpu_model']}, {m['usable_cores']} usable cores, kernel {m['kernel']}, glibc {m['glibc']}")
    print(f"load average (1/5/15 min): start {'/'.join(f'{x:.2f}' for x in r['load_start'])}, "
          f"end {'/'.join(f'{x:.2f}' for x in r['load_end'])}")
    print(f"workload: {' '.join(r['workload'][1:])} (metric {r['metric']}); sequential rule: looks at "
          f"{r['design']['looks']}, margin ±{MARGIN:.0%}, budget {r['budget_s']:g} s per experiment; "
          f"injected: {r['extra_work']} units of extra work, realized {r['realized_slowdown']:+.2%} (geomean of "
          f"the within-block ratios)")
    print(f"time: {r['seconds']:.0f} s")
    print()
    labs = list(r["real"][0]["verdicts"]) if r["real"] else []
    for lab in labs:
        vs = [e["verdicts"][lab] for e in r["real"]]
        runs = [e["runs"][lab] for e in r["real"]]
        print(f"real, {lab}: " + ", ".join(f"{v} {vs.count(v)}" for v in decide.VERDICTS if vs.count(v))
              + f" of {len(vs)}; runs per variant median {np.median(runs):.0f} (range {min(runs)}-{max(runs)})")
    aa = r.get("aa_labels", ["b"])
    if len(aa) > 1 and r["real"]:
        false = sum(any(e["verdicts"][lab] in ("better", "worse") for lab in aa) for e in r["real"])
        print(f"real, the family of {len(aa)} A/A comparisons: an experiment with any false verdict "
              f"{false} of {len(r['real'])}")
    injected = f"injected {r['realized_slowdown']:+.1%}"
    for key, what, bad in (("aa", "A/A (b vs a)", ("better", "worse")), ("slow", injected, ("worse",))):
        x = r["resampled"][key]
        if not x.get("draws"):
            continue
        k = sum(x["verdicts"][v] for v in bad)
        lo, hi = wilson(k, x["draws"])
        name = "false-positive rate" if key == "aa" else "decided worse"
        if key == "aa" and len(aa) > 1:
            name += f" per comparison (x{len(aa)} bounds the family's: {min(1, len(aa) * k / x['draws']):.1%})"
        print(f"resampled {what}: {name} {k}/{x['draws']} = {k / x['draws']:.1%} [95% {lo:.1%}, {hi:.1%}]; "
              + ", ".join(f"{v} {n}" for v, n in x["verdicts"].items() if n)
              + f"; median runs to a verdict {x['median_runs']:.0f} (from {x['segments']} segments of {SEGMENT} blocks)")


if __name__ == "__main__":
    sys.exit(main())
