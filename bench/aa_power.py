#!/usr/bin/env python3
"""Does alloclab decide correctly?  A/A false-positive rate and power, on real runs.

Runs a built-in workload (default: `simple`, quick size) through the core (runner.Experiment,
a temporary store, analysis.analyze) under these variants of ONE allocator, all in the same
randomized interleaved blocks:

    glibc@a                     the baseline
    glibc@b                     the same allocator under another label (the A/A pair)
    glibc:<VAR>=N@ewN           the same allocator, but the program does N extra units of
                                allocation-free CPU work per operation (--extra-work=N)

The slowdown is made a *variant* with a fixed `sh -c 'exec "$@" --extra-work="${VAR:-0}"'`
wrapper: the variant sets VAR in the environment of its runs (variants pass unknown settings
through as environment variables) and the wrapper turns it into the workload's flag.  So the
baseline and the slowed program are scheduled exactly as two allocators in one `alloclab
compare` would be, and nothing but the injected work differs between them.

Each pair is judged as a two-variant `compare` judges it (stats.compare on the primary metric;
Holm over a family of one comparison changes nothing), at the default --runs 10:
  * real experiments: every repeated experiment gives one A/A verdict and one verdict per
    injected slowdown;
  * resampled experiments: blocks (one run of every variant, measured side by side) are pooled
    over all real experiments, and many experiments of n blocks are drawn from the pool with
    replacement (a block bootstrap: each resampled experiment is an iid sample from the
    measured distribution; drawing without replacement from a finite pool would understate
    the spread and flatter the power).  Whole blocks are drawn, so the a/b/ewN runs of a
    resampled experiment were measured next to each other, as in a real one.

The extra-work values are calibrated first (slowdown per unit, from one large step) to aim at
the --targets; the table reports the slowdown actually realized, measured on the whole pool.
Default runtime: 3-5 minutes on 2 cores.  Results and method: docs/statistics.md.
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
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from alloclab import analysis, machine, stats
from alloclab.errors import AlloclabError
from alloclab.metrics import MetricDef
from alloclab.runner import Experiment, Progress, Settings
from alloclab.store import Store
from alloclab.variants import parse_variants
from alloclab.workload import Workload
from alloclab.workloads import builtin

ENV_VAR = "ALLOCLAB_BENCH_EXTRA_WORK"
# A fixed script: the program and its arguments arrive as "$@", the amount of extra work from
# the variant's environment; no user text is ever part of it.
WRAPPER = f'exec "$@" --extra-work="${{{ENV_VAR}:-0}}"'
CALIBRATION_STEP = 32
DEFAULT_RUNS = 10  # alloclab compare's default --runs


# --- set-up ------------------------------------------------------------------------------------

def wrapped_workload(name: str, params: dict[str, str]) -> tuple[Workload, MetricDef]:
    inner = builtin.workload(name, params, quick=True)
    w = Workload(name=inner.name + " (extra work from the variant)",
                 argv=["/bin/sh", "-c", WRAPPER, "sh", *inner.argv],
                 metrics=inner.metrics, params=inner.params, info=inner.info)
    return w, builtin.get(name).primary()


def variant_specs(extra_work: list[int]) -> list[str]:
    return ["glibc@a", "glibc@b"] + [f"glibc:{ENV_VAR}={e}@ew{e}" for e in extra_work]


def quiet_progress(tag: str) -> Progress:
    """No progress bar; notes on stderr, less the expected one about our pass-through variable."""
    def note(text: str) -> None:
        if ENV_VAR not in text:
            print(f"  [{tag}] {text}", file=sys.stderr)
    return Progress(note=note)


def run_core(store: Store, workload: Workload, specs: list[str], runs: int, warmup: int,
             seed: int, verify: bool, tag: str) -> int:
    settings = Settings(runs=runs, warmup=warmup, seed=seed, verify=verify, kind="compare",
                        title=f"aa_power {tag}")
    return Experiment(store, [workload], parse_variants(specs), settings, quiet_progress(tag)).run()


def primary_cells(store: Store, exp_id: int, metric: str) -> tuple[dict[str, list[float]], dict]:
    """Per label, the primary metric's measured values, in block order; and block -> label -> value."""
    a = analysis.analyze(store.load(exp_id))
    row = a.workloads[0].row(metric)
    cells = {a.labels[c.variant_idx]: list(c.values) for c in row.cells}
    blocks: dict[int, dict[str, float]] = {}
    for c in row.cells:
        for b, v in zip(c.blocks, c.values):
            blocks.setdefault(b, {})[a.labels[c.variant_idx]] = v
    return cells, blocks


def slowdown(ratio: float, higher_is_better: bool) -> float:
    """Fractional slowdown from a candidate/baseline ratio of the metric (+0.05 = 5% slower)."""
    return (1 / ratio - 1) if higher_is_better else (ratio - 1)


# --- calibration -------------------------------------------------------------------------------

def calibrate(store: Store, workload: Workload, metric: MetricDef, targets: list[float], runs: int,
              seed: int) -> tuple[list[int], dict]:
    """Extra-work values aimed at each target slowdown.

    The slowdown per unit comes from one large step (CALIBRATION_STEP units, roughly doubling
    the simple workload's time), whose effect dwarfs the run-to-run noise, so a few runs
    measure it well; a ladder of small steps drowns in noise on a busy machine.  Small
    amounts of extra work may partly overlap with the allocator's own work in the CPU
    pipeline and cost less than the slope says: that is why the table reports the slowdown
    each value actually realized, not the target.  The values strictly increase, so the scan
    always covers distinct effects."""
    specs = ["glibc@ew0", f"glibc:{ENV_VAR}={CALIBRATION_STEP}@ew{CALIBRATION_STEP}"]
    exp_id = run_core(store, workload, specs, runs, 1, seed, False, "calibration")
    cells, _ = primary_cells(store, exp_id, metric.name)
    ratio = float(np.median(cells[f"ew{CALIBRATION_STEP}"])) / float(np.median(cells["ew0"]))
    per_unit = slowdown(ratio, metric.higher_is_better) / CALIBRATION_STEP
    chosen: list[int] = []
    for t in sorted(targets):
        e = max(1, round(t / per_unit)) if per_unit > 0 else 1
        chosen.append(max(e, chosen[-1] + 1) if chosen else e)
    return chosen, {"step": CALIBRATION_STEP, "runs": runs, "slowdown_per_unit": per_unit}


# --- resampling --------------------------------------------------------------------------------

def _resample_chunk(args) -> dict[str, list[str]]:
    matrix, labels, n, draws, seed, higher_is_better = args
    rng = np.random.default_rng(seed)
    out: dict[str, list[str]] = {lab: [] for lab in labels[1:]}
    for _ in range(draws):
        rows = matrix[rng.integers(0, matrix.shape[0], size=n)]
        for j, lab in enumerate(labels[1:], start=1):
            out[lab].append(stats.compare(rows[:, 0], rows[:, j], higher_is_better).verdict)
    return out


def resample(matrix: np.ndarray, labels: list[str], n: int, draws: int, seed: int,
             higher_is_better: bool, workers: int) -> dict[str, list[str]]:
    chunks = max(1, workers * 4)
    sizes = [draws // chunks + (i < draws % chunks) for i in range(chunks)]
    jobs = [(matrix, labels, n, s, seed * 1000 + i, higher_is_better) for i, s in enumerate(sizes) if s]
    verdicts: dict[str, list[str]] = {lab: [] for lab in labels[1:]}
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for part in pool.map(_resample_chunk, jobs):
            for lab, v in part.items():
                verdicts[lab] += v
    return verdicts


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
    p.add_argument("--experiments", type=int, default=6, help="real repeated experiments (default 6)")
    p.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="runs per variant per real experiment")
    p.add_argument("--n", type=int, action="append", default=None,
                   help="runs per variant in resampled experiments (repeatable; default: 10 and 20)")
    p.add_argument("--resamples", type=int, default=1000, help="resampled experiments per row and n")
    p.add_argument("--targets", default="1,2,3,5,10,20,50,70,100", help="slowdowns to aim at, in percent")
    p.add_argument("--extra-work", default=None, help="comma-separated extra-work values (skips calibration)")
    p.add_argument("--calibration-runs", type=int, default=8, help="runs of each calibration variant")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes for the resampling")
    p.add_argument("--json", type=Path, help="write every number here as JSON")
    p.add_argument("--db", type=Path, help="keep the runs in this store (default: a temporary one)")
    return p.parse_args(argv)


def run_real(store: Store, workload: Workload, metric: MetricDef, extra: list[int],
             args) -> tuple[list[dict], np.ndarray, int]:
    """The repeated real experiments, each exactly as `alloclab compare --runs 10` runs it.

    Returns one record per experiment, the pool of complete blocks (one column per label), and
    the number of runs made."""
    specs = variant_specs(extra)
    labels = ["a", "b"] + [f"ew{e}" for e in extra]
    real: list[dict] = []
    pool_rows: list[list[float]] = []
    n_runs = 0
    for i in range(args.experiments):
        exp_id = run_core(store, workload, specs, args.runs, 1, args.seed + 100 + i, True, f"experiment {i + 1}")
        exp = store.load(exp_id)
        n_runs += len(exp.runs)
        cells, blocks = primary_cells(store, exp_id, metric.name)
        verdicts = {lab: stats.compare(cells["a"], cells[lab], metric.higher_is_better) for lab in labels[1:]}
        real.append({"id": exp_id, "load": [r["extra"].get("load") for r in exp.runs],
                     "median": {lab: float(np.median(cells[lab])) for lab in labels},
                     "verdicts": {lab: c.verdict for lab, c in verdicts.items()},
                     "p": {lab: c.p_value for lab, c in verdicts.items()},
                     "ratio": {lab: c.ratio for lab, c in verdicts.items()}})
        pool_rows += [[b[lab] for lab in labels] for b in blocks.values() if all(lab in b for lab in labels)]
        print(f"experiment {i + 1}/{args.experiments}: " + ", ".join(
            f"{lab} {c.verdict} ({slowdown(c.ratio, metric.higher_is_better):+.1%}, p={c.p_value:.3f})"
            for lab, c in verdicts.items()), file=sys.stderr)
    return real, np.asarray(pool_rows, dtype=float), n_runs


def table_rows(pool: np.ndarray, labels: list[str], extra: list[int], real: list[dict],
               resampled: dict[int, dict[str, list[str]]], higher_is_better: bool) -> list[dict]:
    rows = []
    for j, lab in enumerate(labels):
        col = pool[:, j]
        row = {"label": lab, "extra_work": 0 if j < 2 else extra[j - 2], "n_pool": int(col.size),
               "median": float(np.median(col)), "min": float(col.min()), "max": float(col.max()),
               "cv": float(np.std(col, ddof=1) / np.mean(col)) if col.size > 1 else math.nan}
        if j:
            # The realized effect: the whole pool of this variant against the whole baseline pool.
            whole = stats.compare(pool[:, 0], col, higher_is_better)
            real_v = [e["verdicts"][lab] for e in real]
            row |= {"slowdown": slowdown(whole.ratio, higher_is_better),
                    "slowdown_ci": sorted(slowdown(x, higher_is_better) for x in (whole.ci_low, whole.ci_high)),
                    "real": {v: real_v.count(v) for v in ("same", "worse", "better")} | {"n": len(real_v)},
                    "resampled": {n: {v: r[lab].count(v) for v in ("same", "worse", "better")} | {"n": len(r[lab])}
                                  for n, r in resampled.items()}}
        rows.append(row)
    return rows


def benchmark(args, store: Store) -> dict:
    ns = args.n or [DEFAULT_RUNS, 2 * DEFAULT_RUNS]
    t0 = time.monotonic()
    load_start = os.getloadavg()
    try:
        params = dict(kv.split("=", 1) for kv in args.param)
    except ValueError:
        raise AlloclabError(f"--param takes KEY=VALUE (e.g. --param iters=50000), got {args.param}.") from None
    workload, metric = wrapped_workload(args.workload, params)
    report: dict = {"machine": {k: v for k, v in machine.snapshot().items()
                                if k in ("cpu_model", "cores", "usable_cores", "kernel", "os", "glibc", "governor", "thp")},
                    "workload": workload.argv[4:], "metric": metric.name,
                    "higher_is_better": metric.higher_is_better, "load_start": list(load_start)}
    if args.extra_work:
        extra = sorted({int(e) for e in args.extra_work.split(",")})
        report["calibration"] = None
    else:
        targets = [float(t) / 100 for t in args.targets.split(",")]
        extra, cal = calibrate(store, workload, metric, targets, args.calibration_runs, args.seed)
        report["calibration"] = cal
        print(f"calibration: {cal['slowdown_per_unit']:+.2%} per unit of extra work (median of {cal['runs']} "
              f"runs with {cal['step']} units against {cal['runs']} without)", file=sys.stderr)
    labels = ["a", "b"] + [f"ew{e}" for e in extra]
    t_cal = time.monotonic()
    real, pool, n_runs = run_real(store, workload, metric, extra, args)
    t_real = time.monotonic()
    resampled = {n: resample(pool, labels, n, args.resamples, args.seed + n, metric.higher_is_better, args.workers)
                 for n in ns}
    t_res = time.monotonic()
    return report | {
        "extra_work": extra, "experiments": args.experiments, "runs_per_variant": args.runs,
        "runs_total": n_runs, "pool_blocks": int(pool.shape[0]), "resamples": args.resamples, "ns": ns,
        "rows": table_rows(pool, labels, extra, real, resampled, metric.higher_is_better),
        "pool": {"labels": labels, "blocks": pool.tolist()}, "real": real, "load_end": list(os.getloadavg()),
        "seconds": {"calibration": t_cal - t0, "real": t_real - t_cal, "resampling": t_res - t_real,
                    "total": time.monotonic() - t0}}


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


def _pct(x: float) -> str:
    return f"{x:+.1%}" if math.isfinite(x) else "n/a"


def print_report(r: dict) -> None:
    m = r["machine"]
    n_variants = len(r["rows"])
    print(f"machine: {m['cpu_model']}, {m['usable_cores']} usable cores, kernel {m['kernel']}, glibc {m['glibc']}, "
          f"governor {m['governor']}")
    print(f"load average (1/5/15 min): start {'/'.join(f'{x:.2f}' for x in r['load_start'])}, "
          f"end {'/'.join(f'{x:.2f}' for x in r['load_end'])}")
    print(f"workload: {' '.join(Path(r['workload'][0]).name.split('-')[:1] + r['workload'][1:])} "
          f"(metric {r['metric']}, {'higher' if r['higher_is_better'] else 'lower'} is better)")
    print(f"real runs: {r['runs_total']} ({r['experiments']} experiments x {n_variants} variants x "
          f"({r['runs_per_variant']} measured + 1 warm-up/verification) blocks"
          + (", plus the calibration runs" if r["calibration"] else "") + ")")
    print(f"resampled: {r['resamples']} experiments per row and n, n blocks drawn with replacement from "
          f"{r['pool_blocks']} measured blocks")
    print(f"time: {r['seconds']['total']:.0f} s (calibration {r['seconds']['calibration']:.0f}, real runs "
          f"{r['seconds']['real']:.0f}, resampling {r['seconds']['resampling']:.0f})")
    print()
    ns = [n for n in r["ns"] if n in next(iter(x for x in r["rows"] if "resampled" in x))["resampled"]]
    head = (f"{'variant':8} {'extra':>5} {'median':>8} {'min..max':>15} {'CV':>5} {'slowdown [95% CI]':>24} "
            f"{'real: flagged':>13} " + " ".join(f"{f'resampled n={n}':>22}" for n in ns))
    print(head)
    print("-" * len(head))
    for row in r["rows"]:
        line = (f"{row['label']:8} {row['extra_work']:>5} {row['median']:>8.3g} "
                f"{row['min']:>7.3g}..{row['max']:<7.3g} {row['cv']:>5.1%} ")
        if "slowdown" not in row:
            print(line + f"{'(baseline)':>24}")
            continue
        lo, hi = row["slowdown_ci"]
        line += f"{_pct(row['slowdown']):>7} [{_pct(lo)}, {_pct(hi)}]".rjust(24) + " "
        real = row["real"]
        flagged = real["n"] - real["same"]
        line += f"{flagged}/{real['n']}".rjust(13) + " "
        for n in ns:
            res = row["resampled"][n]
            k = res["n"] - res["same"]
            lo, hi = wilson(k, res["n"])
            cell = f"{k / res['n']:.1%} [{lo:.1%},{hi:.1%}]" + ("!" if res["better"] and row["label"] != "b" else "")
            line += f"{cell:>22} "
        print(line)
    print()
    print("flagged = verdict other than 'no significant difference'. Row b is the A/A pair: flagged there are "
          "false positives (target <= 5%).\nRows ewN: flagged is power (target >= 90%); a '!' marks wrong-sign "
          "('better') verdicts, counted in the JSON.\n[..] after a resampled rate: Wilson 95% interval over the "
          "resampled experiments; the pool of real blocks limits it further.")
    for n in ns:
        reliable = [row for row in r["rows"][2:] if "slowdown" in row and
                    (row["resampled"][n]["worse"] / row["resampled"][n]["n"]) >= 0.9]
        ok = [row for row in reliable if all(
            (x["resampled"][n]["worse"] / x["resampled"][n]["n"]) >= 0.9
            for x in r["rows"][2:] if x["slowdown"] >= row["slowdown"])]
        smallest = min(ok, key=lambda x: x["slowdown"]) if ok else None
        print(f"n={n}: smallest injected slowdown detected in >= 90% of resampled experiments: "
              + (f"{smallest['slowdown']:+.1%} (extra-work {smallest['extra_work']})" if smallest else "none of those tried"))
    if r["pool_blocks"] < 3 * max(r["ns"]):
        print(f"WARNING: only {r['pool_blocks']} measured blocks for resampled experiments of up to {max(r['ns'])}: "
              f"the resampled rates mostly repeat the same few runs; use more --experiments.")
    if max(r["load_start"][0], r["load_end"][0]) > (m["usable_cores"] or 1):
        print(f"WARNING: load average above {m['usable_cores']} during the benchmark: other work competed "
              f"for the CPUs; re-run on a quiet machine for numbers worth quoting.")


if __name__ == "__main__":
    sys.exit(main())
