"""Quality checks on one cell's runs: findings carried as data next to the numbers.

In: one cell's values in run order, with optional blocks, durations, load and
other processes' CPU use, and the number of failed runs.  Out: a list of
:class:`Finding` (the class lives in alloclab.stats.estimates), one per problem
found: too-few-runs, high-cv, warmup-trend, outliers, drift, high-load,
short-runs, failed-runs, all-failed.  The thresholds are module constants.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from alloclab.stats.estimates import Finding, _finite, format_p, summarize
from alloclab.stats.ranktests import _median, _mw_normal_p, _spearman, modified_zscores

__all__ = [
    "cell_findings",
]

# Thresholds used by cell_findings; module constants so reports can quote them.
OUTLIER_MIN_N = 5
OUTLIER_Z = 3.5            # Iglewicz & Hoaglin's recommended modified z-score cut-off
DRIFT_P = 0.01
DRIFT_MIN_BLOCKS = 6
WARMUP_P = 0.01
SHORT_RUN_S = 0.010
CV_THRESHOLD = 0.10



def _fmt(v: float) -> str:
    return f"{v:.4g}"

MIN_PAIRED_RUNS = 2   # the paired interval needs two blocks; with two, only a count that never varies decides


def _too_few_runs(n: int, alpha: float, n_comparisons: int) -> Finding | None:
    """Fewer runs than any interval needs. (`alpha` and `n_comparisons` only mattered to the rank
    test of the unpaired comparison, which now serves sweeps and diffs; the paired rule can decide
    from two runs on, and the sequential looks say when it has.)"""
    if n >= MIN_PAIRED_RUNS:
        return None
    return Finding(
        "too-few-runs",
        f"{n} run{'s' if n != 1 else ''}: no interval can be computed below {MIN_PAIRED_RUNS} runs per variant",
        "leave --runs out so that alloclab measures until decided, or give --runs 10 or more",
    )


def _high_cv(x: np.ndarray, threshold: float) -> Finding | None:
    cv = summarize(x).cv
    if not (math.isfinite(cv) and cv > threshold):
        return None
    return Finding(
        "high-cv",
        f"CV {cv * 100:.1f}% above {threshold * 100:.0f}%",
        "close other programs; without --runs, alloclab adds paired runs until the comparison is decided",
    )


def _rel(a: float, b: float) -> float:
    """|a/b - 1|, the size of a difference relative to b (inf where b is 0 and a is not)."""
    if b == 0:
        return 0.0 if a == 0 else math.inf
    return abs(a / b - 1)


def _warmup_trend(x: np.ndarray, floor: float = 0.0) -> Finding | None:
    """Early runs that differ from the settled rest.

    Rule: with n >= 6, flag when either
      * the first third of runs (in run order) differs from the rest
        (two-sided Mann-Whitney p < 0.01; needs about n >= 12 to be possible), or
      * the very first run is an outlier relative to all later runs
        (modified z-score > 3.5, the classic cold-start run);
    and the later two thirds show no monotone trend themselves (Spearman
    p >= 0.05).  A trend that continues through the whole series is drift, not
    warm-up, and is reported as such.
    """
    n = x.size
    if n < 6:
        return None
    head_len = max(1, n // 3)
    head, rest = x[:head_len], x[head_len:]
    p_head = _mw_normal_p(head, rest)
    # The first run is scored against the later runs only, so a slow first run
    # cannot inflate the spread it is judged by.
    later = x[1:]
    first_z = float(modified_zscores(x[:1], reference=later)[0])
    med_head, med_rest, med_later = _median(head), _median(rest), _median(later)
    head_size = _rel(med_head, med_rest)
    first_size = _rel(float(x[0]), med_later)
    if math.isfinite(p_head) and p_head < WARMUP_P and head_size >= floor:
        msg = (f"first {head_len} runs (median {_fmt(med_head)}) differ from "
               f"the rest (median {_fmt(med_rest)}), Mann-Whitney {format_p(p_head)}")
    elif abs(first_z) > OUTLIER_Z and first_size >= floor:
        msg = (f"first run {_fmt(float(x[0]))} is far from the later runs "
               f"(median {_fmt(med_later)}, modified z {first_z:+.1f})")
    else:
        return None
    # Checked last, as it is the dearest: a trend through the later runs is drift, not warm-up.
    _, p_rest = _spearman(np.arange(rest.size, dtype=float), rest)
    if math.isfinite(p_rest) and p_rest < 0.05:
        return None
    return Finding(
        "warmup-trend", msg,
        "add discarded warm-up runs (--warmup 1 or more) so caches, page cache and "
        "CPU frequency settle before measuring",
    )


def _outliers(x: np.ndarray, floor: float = 0.0) -> Finding | None:
    if x.size < OUTLIER_MIN_N:
        return None  # with a handful of runs every spread looks like an outlier
    z = modified_zscores(x)
    med = _median(x)
    # A run 0.04% from the median is no outlier worth a line, whatever its z-score.
    big = np.array([_rel(float(v), med) >= floor for v in x], dtype=bool)
    flagged = x[(np.abs(z) > OUTLIER_Z) & big]
    if flagged.size == 0:
        return None
    shown = ", ".join(_fmt(float(v)) for v in flagged[:10])
    more = f" (+{flagged.size - 10} more)" if flagged.size > 10 else ""
    return Finding(
        "outliers",
        f"{flagged.size} outlier{'s' if flagged.size != 1 else ''} (modified z > {OUTLIER_Z}): {shown}{more}; kept in all statistics",
        "look for interference during those runs (other programs, thermal throttling, "
        "swapping); the median and its CI are robust to a few outliers",
    )


def _drift(x: np.ndarray, blocks: np.ndarray, floor: float = 0.0) -> Finding | None:
    n_blocks = np.unique(blocks).size
    if n_blocks < DRIFT_MIN_BLOCKS:
        return None
    rho, p = _spearman(blocks, x)
    if not (math.isfinite(p) and p < DRIFT_P):
        return None
    ordered = x[np.argsort(blocks, kind="stable")]
    third = max(1, ordered.size // 3)
    if _rel(_median(ordered[-third:]), _median(ordered[:third])) < floor:
        return None
    direction = "upward" if rho > 0 else "downward"
    return Finding(
        "drift",
        f"values trend {direction} over {n_blocks} blocks (Spearman rho {rho:+.2f}, {format_p(p)})",
        "the machine changed during the experiment (thermal state, background load, "
        "memory fragmentation); keep it idle and cool, then re-run",
    )


COMPETING_CORES = 0.5   # other work averaging more than half a core over a run is worth a warning


def _competing_cpu(other_cpu: Sequence[float] | None, n_cores: int | None) -> Finding | None:
    """Other work's CPU use during the runs, in cores (the machine's busy time less the runs' own)."""
    other = _finite(other_cpu)
    if other.size == 0 or other.max() <= COMPETING_CORES:
        return None
    of = f" of {n_cores}" if n_cores else ""
    return Finding(
        "high-load",
        f"other processes used up to {other.max():.2f} cores{of} during the runs (median {np.median(other):.2f})",
        "other work competed for the CPUs; close other programs and re-run",
    )


def _short_runs(durations_s: Iterable[float] | None) -> Finding | None:
    d = _finite(durations_s)
    if d.size == 0:
        return None
    med = _median(d)
    if med >= SHORT_RUN_S:
        return None
    return Finding(
        "short-runs",
        f"median run lasts {med * 1000:.1f} ms (< {SHORT_RUN_S * 1000:.0f} ms): "
        "timer resolution and process start-up dominate",
        "make the workload bigger (more iterations or a larger input) so a run lasts well over 10 ms",
    )


def _failed_runs(n: int, n_failed: int) -> Finding | None:
    if n_failed <= 0:
        return None
    return Finding(
        "failed-runs",
        f"{n_failed} of {n + n_failed} runs failed and are excluded",
        "check the failed runs' exit status and stderr; failures that depend on the "
        "allocator can bias the comparison",
    )


# Findings that concern a variant's runs as a whole, not one metric (the same in every row).
PER_VARIANT_FINDINGS = ("failed-runs", "all-failed", "high-load", "short-runs")


def _all_failed(n_failed: int) -> Finding:
    return Finding("all-failed", f"all {n_failed} runs failed; no measurements",
                   "run the variant by hand to see why it fails (missing library, crash, timeout)")


def cell_findings(values: Iterable[float], *, alpha: float = 0.05, n_comparisons: int = 1,
                  blocks: Sequence[int] | None = None,
                  durations_s: Sequence[float] | None = None,
                  load_avg: float | Sequence[float] | None = None,
                  n_cores: int | None = None, n_failed: int = 0,
                  other_cpu: Sequence[float] | None = None,
                  cv_threshold: float = CV_THRESHOLD, floor: float = 0.0,
                  per_variant_only: bool = False) -> list[Finding]:
    """Quality checks on one cell (variant x workload x metric).

    ``values`` are in run order; ``blocks`` gives each value's block index
    (defaults to the run index, i.e. one run per block).  Non-finite values
    are dropped along with their block index.

    Codes: too-few-runs, high-cv, warmup-trend (see :func:`_warmup_trend`),
    outliers (modified z > 3.5, listed, never dropped), drift (Spearman of
    value vs block, p < 0.01, >= 6 blocks), high-load (other processes used
    more than half a core during a run, from ``other_cpu``; the load average
    is never warned on, see below), short-runs (median duration < 10 ms),
    failed-runs, all-failed.
    """
    # Only the CPU other processes used is evidence of competition: the load average counts the
    # workload's own threads too (qemu-img's io_uring workers reached 14 on 2 cores), so it is
    # kept for the record but never warned on.
    load = _competing_cpu(other_cpu, n_cores) if other_cpu is not None else None
    if per_variant_only:   # the same list as below, filtered to PER_VARIANT_FINDINGS, in its order
        n = sum(1 for v in values if math.isfinite(v))
        if n == 0:
            found = [_all_failed(n_failed) if n_failed > 0 else None, load]
        else:
            found = [_failed_runs(n, n_failed), load, _short_runs(durations_s)]
        return [f for f in found if f is not None]
    raw = np.asarray(list(values), dtype=float).ravel()
    keep = np.isfinite(raw)
    x = raw[keep]
    n = int(x.size)
    if blocks is not None and len(blocks) == raw.size:
        block_idx = np.asarray(blocks, dtype=float)[keep]
    else:
        block_idx = np.arange(n, dtype=float)

    if n == 0:
        first = _all_failed(n_failed) if n_failed > 0 else _too_few_runs(0, alpha, n_comparisons)
        return [f for f in (first, load) if f is not None]

    # Extreme magnitudes (near float max) may overflow intermediate sums; the
    # checks then simply do not fire, which is the right answer for junk input.
    with np.errstate(all="ignore"):
        checks = (
            _failed_runs(n, n_failed),
            _too_few_runs(n, alpha, n_comparisons),
            _high_cv(x, cv_threshold),
            _warmup_trend(x, floor),
            _outliers(x, floor),
            _drift(x, block_idx, floor),
            load,
            _short_runs(durations_s),
        )
    return [f for f in checks if f is not None]
