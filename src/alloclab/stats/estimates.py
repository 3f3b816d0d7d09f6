"""Statistics for allocator comparisons: summaries, comparisons, and findings.

Everything here is pure computation on lists of numbers (no I/O, no global
state).  Randomness (bootstrap) is seeded from a hash of the *sorted* data, so
the same measurements always print the same intervals, whatever order they
were recorded in.

Conventions
-----------
* Non-finite values (nan, +-inf) are dropped before any computation; callers
  that know a run failed should count it in ``n_failed`` instead.
* Undefined quantities are ``nan``, never exceptions: n = 0, n = 1, zero
  medians and all-equal samples are all ordinary inputs.
* Warnings are data (:class:`Finding`), returned next to the numbers they
  qualify, so reports can print them beside the table they concern.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special as _special



__all__ = [
    "CellSummary",
    "Comparison",
    "Finding",
    "GeoMean",
    "adjust",
    "cell_findings",
    "compare",
    "format_comparison",
    "format_p",
    "geomean_ratio",
    "holm",
    "median_ci",
    "min_runs_for_significance",
    "modified_zscores",
    "precise_enough",
    "summarize",
    "verdict_for",
]

# Thresholds used by cell_findings; module constants so reports can quote them.
OUTLIER_MIN_N = 5
OUTLIER_Z = 3.5            # Iglewicz & Hoaglin's recommended modified z-score cut-off
DRIFT_P = 0.01
DRIFT_MIN_BLOCKS = 6
WARMUP_P = 0.01
SHORT_RUN_S = 0.010
CV_THRESHOLD = 0.10

# Exact permutation p-values are expensive; beyond this many arrangements the
# tie-corrected normal approximation is accurate enough (n >= 8 per group).
_EXACT_PERMUTATION_LIMIT = 4000


# --------------------------------------------------------------------------
# Data classes
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class Finding:
    """A warning carried as data next to the numbers it qualifies."""

    code: str      # stable id, e.g. "high-cv"; see cell_findings for the list
    message: str   # what was found, with numbers
    advice: str    # what to do about it


@dataclass(frozen=True)
class CellSummary:
    n: int
    median: float
    mean: float
    std: float
    cv: float
    min: float
    max: float
    ci_low: float   # confidence interval of the median (order statistics);
    ci_high: float  # nan when n is too small for the requested confidence
    n_failed: int = 0


@dataclass(frozen=True)
class Comparison:
    ratio: float            # median(candidate) / median(baseline)
    ci_low: float           # bootstrap CI of the ratio of medians
    ci_high: float
    p_value: float          # two-sided Mann-Whitney U
    p_adjusted: float       # Holm-adjusted by adjust(); equals p_value until then
    higher_is_better: bool
    verdict: str            # "better" | "worse" | "equivalent" | "undecided" (decide.VERDICTS)
    n_baseline: int
    n_candidate: int
    margin: float = 0.0     # the equivalence margin the verdict used (relative, 0.02 for +-2%)
    confidence: float = 0.95  # of the interval: simultaneous over looks and comparisons when paired
    method: str = "unpaired"  # "paired" (within-block trimmed mean) | "unpaired" (ratio of medians)
    more_runs: int | None = None  # undecided: runs per variant likely to decide it


@dataclass(frozen=True)
class GeoMean:
    ratio: float    # geometric mean of per-workload ratios, > 1 means better
    ci_low: float
    ci_high: float
    n: int          # workloads that contributed (those with a defined ratio)


# --------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------

def _finite(values: Iterable[float] | None) -> np.ndarray:
    if values is None:
        return np.empty(0)
    arr = np.asarray(values if isinstance(values, np.ndarray) else list(values), dtype=float).ravel()
    return arr[np.isfinite(arr)]


def _median_sorted(x: np.ndarray) -> float:
    """Median of sorted finite data, without overflow for huge values.

    Computed so that it cannot overflow or underflow, so min <= median <= max and
    ci_low <= median <= ci_high hold for any finite input.
    """
    n = x.size
    if n == 0:
        return math.nan
    mid = n // 2
    if n % 2:
        return float(x[mid])
    a, b = float(x[mid - 1]), float(x[mid])
    if a == b:
        return a  # also keeps subnormals, which halving would flush to zero
    if (a < 0) != (b < 0):
        return (a + b) / 2  # opposite signs cannot overflow
    return a + (b - a) / 2  # same sign: the difference cannot overflow


def _seed(*groups: np.ndarray, tag: str = "") -> int:
    """Seed derived from the sorted data, so order of recording does not matter."""
    h = hashlib.blake2b(digest_size=8)
    h.update(tag.encode())
    for g in groups:
        s = np.sort(np.asarray(g, dtype=float))
        h.update(len(s).to_bytes(8, "little"))
        h.update(s.tobytes())
    return int.from_bytes(h.digest(), "little")


def _bootstrap_medians(x_sorted: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Medians of ``n_boot`` resamples with replacement (vectorised)."""
    idx = rng.integers(0, x_sorted.size, size=(n_boot, x_sorted.size))
    with np.errstate(all="ignore"):  # huge values may overflow; replicates go non-finite
        return np.median(x_sorted[idx], axis=1)


def _percentile_ci(samples: np.ndarray, confidence: float) -> tuple[float, float]:
    """Percentile interval over the finite bootstrap replicates.

    Replicates can be non-finite when a resample has a zero median; if more
    than the tail mass is lost the interval would be meaningless, so give nan.
    """
    tail = (1 - confidence) / 2
    finite = samples[np.isfinite(samples)]
    if finite.size == 0 or finite.size < samples.size * (1 - tail):
        return math.nan, math.nan
    lo, hi = np.quantile(finite, [tail, 1 - tail])
    return float(lo), float(hi)


# --------------------------------------------------------------------------
# Summaries
# --------------------------------------------------------------------------

def median_ci(sorted_values: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free CI of the median from order statistics.

    The number of observations below the true median is Binomial(n, 1/2), so
    [x_(l), x_(n-l+1)] covers it with probability 1 - 2 P(B <= l-1).  We take
    the largest l with coverage >= ``confidence``; when even [min, max] falls
    short (n < 6 at 95%) the interval is (nan, nan).
    """
    x = np.asarray(sorted_values, dtype=float)
    n = x.size
    if n == 0:
        return math.nan, math.nan
    cdf = _special.bdtr(np.arange(n), n, 0.5)
    # Small tolerance: cdf values that equal the tail mass exactly in exact
    # arithmetic must not be lost to rounding.
    l = int(np.count_nonzero(cdf <= (1 - confidence) / 2 * (1 + 1e-12)))
    if l == 0:
        return math.nan, math.nan
    return float(x[l - 1]), float(x[n - l])


def summarize(values: Iterable[float], n_failed: int = 0, confidence: float = 0.95) -> CellSummary:
    """Summary of one cell's successful runs; non-finite values are dropped."""
    x = np.sort(_finite(values))
    n = int(x.size)
    if n == 0:
        nan = math.nan
        return CellSummary(0, nan, nan, nan, nan, nan, nan, nan, nan, n_failed)
    with np.errstate(all="ignore"):
        mean = float(np.mean(x))
        std = float(np.std(x, ddof=1)) if n > 1 else math.nan
        cv = std / abs(mean) if mean != 0 and math.isfinite(std) else math.nan
    lo, hi = median_ci(x, confidence)
    return CellSummary(
        n=n, median=_median_sorted(x), mean=mean, std=std, cv=float(cv),
        min=float(x[0]), max=float(x[-1]), ci_low=lo, ci_high=hi, n_failed=n_failed,
    )


def precise_enough(values: Iterable[float], target_halfwidth: float) -> bool:
    """Stopping rule for adaptive ``--until-precise`` runs.

    True when the half-width of the 95% CI of the median, relative to the
    median, is <= ``target_halfwidth`` (e.g. 0.02 for +-2%).  Deliberately
    never looks at p-values: stopping as soon as a difference "becomes
    significant" (optional stopping) inflates the false-positive rate far
    above alpha, while stopping on precision does not bias the comparison.
    """
    s = summarize(values)
    if not (math.isfinite(s.ci_low) and math.isfinite(s.ci_high)) or s.median == 0:
        return False
    return (s.ci_high - s.ci_low) / 2 / abs(s.median) <= target_halfwidth


# --------------------------------------------------------------------------
# Comparisons
# --------------------------------------------------------------------------

def _mannwhitney_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided Mann-Whitney U p-value: exact (every arrangement of the pooled midranks, ties or
    not) where there are at most 4000 arrangements, else the tie-corrected normal approximation
    with continuity correction, as scipy's asymptotic method. numpy only: importing scipy.stats
    would cost every report a second."""
    if a.size == 0 or b.size == 0:
        return math.nan
    pooled = np.concatenate([a, b])
    if np.all(pooled == pooled[0]):
        return 1.0
    enumerable = (min(a.size, b.size) >= 2
                  and math.comb(pooled.size, a.size) <= _EXACT_PERMUTATION_LIMIT)
    p = _exact_tied_p(a, b) if enumerable else _mw_normal_p(a, b, continuity=True)
    return min(float(p), 1.0) if math.isfinite(p) else math.nan


@functools.cache
def _arrangements(n: int, k: int) -> np.ndarray:
    """Every way to pick which k of n pooled positions are the first group (rows of indices)."""
    return np.array(list(itertools.combinations(range(n), k)), dtype=np.intp)


def _exact_tied_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided Mann-Whitney p by enumerating every arrangement of the pooled midranks.

    The same null distribution as scipy's mannwhitneyu with PermutationMethod(n_resamples=inf),
    which is slow (about 10 ms per call for 6 + 6 values, and a report makes thousands of calls);
    here the rank sums of all arrangements are one indexed sum."""
    pooled = np.concatenate([a, b])
    ranks = _ranks(pooled)
    sums = ranks[_arrangements(pooled.size, a.size)].sum(axis=1)
    observed = ranks[: a.size].sum()
    tol = 1e-9 * max(1.0, abs(observed))
    # Two-sided as scipy's permutation test does it: twice the smaller tail, at most 1.
    return float(min(1.0, 2 * min(np.mean(sums >= observed - tol), np.mean(sums <= observed + tol))))


def verdict_for(ratio: float, ci_low: float, ci_high: float, p: float,
                higher_is_better: bool, alpha: float = 0.05, min_effect: float = 0.0) -> str:
    """The unpaired path's verdict: better/worse needs p < alpha as well as an interval that
    excludes no change; equivalent and undecided as in decide.verdict_for."""
    from alloclab.stats.decide import verdict_for as _verdict
    significant = math.isfinite(p) and p < alpha
    return _verdict(ratio, ci_low, ci_high, higher_is_better, min_effect, significant=significant)


def _ratio_of_medians(baseline: np.ndarray, candidate: np.ndarray) -> float:
    mb, mc = _median_sorted(baseline), _median_sorted(candidate)
    if not (math.isfinite(mb) and math.isfinite(mc)) or mb == 0:
        return math.nan
    r = mc / mb
    return r if math.isfinite(r) else math.nan


def compare(baseline: Iterable[float], candidate: Iterable[float], higher_is_better: bool,
            alpha: float = 0.05, min_effect: float = 0.0, n_boot: int = 2000,
            confidence: float = 0.95) -> Comparison:
    """Compare a candidate variant against the baseline on one metric.

    ratio = median(candidate) / median(baseline); its CI is a percentile
    bootstrap resampling each group independently, seeded from the data.
    """
    b = np.sort(_finite(baseline))
    c = np.sort(_finite(candidate))
    ratio = _ratio_of_medians(b, c)
    lo = hi = math.nan
    # One value on a side has no spread to resample: a bootstrap would print the point as its interval.
    if math.isfinite(ratio) and min(b.size, c.size) >= 2:
        rng = np.random.default_rng(_seed(b, c, tag="compare"))
        mb = _bootstrap_medians(b, n_boot, rng)
        mc = _bootstrap_medians(c, n_boot, rng)
        with np.errstate(all="ignore"):
            lo, hi = _percentile_ci(mc / mb, confidence)
    p = _mannwhitney_p(c, b)
    return Comparison(
        ratio=ratio, ci_low=lo, ci_high=hi, p_value=p, p_adjusted=p,
        higher_is_better=higher_is_better,
        verdict=verdict_for(ratio, lo, hi, p, higher_is_better, alpha, min_effect),
        n_baseline=int(b.size), n_candidate=int(c.size), margin=min_effect, confidence=confidence,
        more_runs=_more_runs(int(min(b.size, c.size)), ratio, lo, hi, min_effect),
    )


def _more_runs(n: int, ratio: float, lo: float, hi: float, margin: float) -> int | None:
    from alloclab.stats.decide import more_runs
    return more_runs(n, ratio, lo, hi, margin)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input order.

    nan entries stay nan and do not count towards the number of tests.
    """
    p = np.asarray(pvalues, dtype=float).ravel()
    out = np.full(p.shape, math.nan)
    valid = np.flatnonzero(~np.isnan(p))
    m = valid.size
    if m == 0:
        return out.tolist()
    order = valid[np.argsort(p[valid], kind="stable")]
    scaled = (m - np.arange(m)) * p[order]
    # Monotone step-down: an adjusted p can never be below one ranked before it.
    out[order] = np.minimum(np.maximum.accumulate(scaled), 1.0)
    return out.tolist()


def adjust(comparisons: Sequence[Comparison], alpha: float = 0.05,
           min_effect: float = 0.0) -> list[Comparison]:
    """Copies with Holm-adjusted p-values over the family, verdicts recomputed."""
    adjusted = holm([c.p_value for c in comparisons])
    return [
        dataclasses.replace(
            c, p_adjusted=pa,
            verdict=verdict_for(c.ratio, c.ci_low, c.ci_high, pa, c.higher_is_better,
                                alpha, min_effect),
        )
        for c, pa in zip(comparisons, adjusted)
    ]


def format_p(p: float, allow_less_than: bool = True) -> str:
    """"p<0.001", "p=0.003", "p=0.41" (three decimals below 0.1 so p=0.049
    never reads as 0.05)."""
    if allow_less_than and p < 0.001:
        return "p<0.001"
    return f"p={p:.3f}" if p < 0.1 else f"p={p:.2f}"


def format_comparison(c: Comparison) -> str:
    """One cell's text; the interval is always printed, so "no difference beyond 2%" never reads
    like "could be anything from -20% to +30%":

        better/worse   "+4.0% [+2.1, +5.9]"
        equivalent     "≈ within ±2% [-0.8, +1.1]"
        undecided      "? +3.1% [-8.0, +15.2] ~40 more runs"

    The sign is the raw change of the metric, not its goodness; the verdict carries goodness."""
    with np.errstate(all="ignore"):
        delta, lo, hi = (float((np.float64(v) - 1) * 100) for v in (c.ratio, c.ci_low, c.ci_high))
    if not math.isfinite(delta):
        return "? (n/a)"
    interval = f"[{lo:+.1f}, {hi:+.1f}]" if math.isfinite(lo) and math.isfinite(hi) else "[n/a]"
    if c.verdict in ("better", "worse"):
        if c.ratio >= 3 and math.isfinite(c.ci_low) and math.isfinite(c.ci_high):
            # +21509% reads worse than x216: large factors are given as factors.
            return f"x{c.ratio:.3g} [x{c.ci_low:.3g}, x{c.ci_high:.3g}]"
        return f"{delta:+.1f}% {interval}"
    if c.verdict == "equivalent":
        return f"≈ within ±{c.margin * 100:g}% {interval}"
    more = f" ~{c.more_runs} more run{'s' if c.more_runs != 1 else ''}" if c.more_runs else ""
    return f"? {delta:+.1f}% {interval}{more}"


def min_runs_for_significance(alpha: float = 0.05, n_comparisons: int = 1) -> int:
    """Smallest equal group size n at which a two-sided exact Mann-Whitney
    test can reach p < alpha / n_comparisons at all.

    The most extreme outcome (complete separation) has p = 2 / C(2n, n);
    alpha / n_comparisons is Holm's threshold for the smallest p-value, the
    worst case.  Below this n, "same" is guaranteed whatever the data.
    """
    if not 0 < alpha <= 1 or n_comparisons < 1:
        raise ValueError("need 0 < alpha <= 1 and n_comparisons >= 1")
    threshold = alpha / n_comparisons
    n = 1
    while 2 / math.comb(2 * n, n) >= threshold:
        n += 1
    return n


def geomean_ratio(pairs: Sequence[tuple[Sequence[float], Sequence[float], bool]],
                  n_boot: int = 2000, confidence: float = 0.95) -> GeoMean:
    """Geometric mean over workloads of the per-workload ratio of medians.

    Each ratio is oriented so > 1 means the candidate is better ("speedup"):
    candidate/baseline for higher-is-better metrics, baseline/candidate
    otherwise.  Workloads whose ratio is undefined or not positive are left
    out (``n`` says how many counted).  The CI bootstraps every workload
    jointly: each replicate resamples all groups and recomputes the geomean.
    """
    groups: list[tuple[np.ndarray, np.ndarray, bool]] = []
    log_ratios: list[float] = []
    for baseline, candidate, higher_is_better in pairs:
        b, c = np.sort(_finite(baseline)), np.sort(_finite(candidate))
        r = _ratio_of_medians(b, c)
        oriented = r if higher_is_better else (1 / r if r != 0 else math.nan)
        if math.isfinite(oriented) and oriented > 0:
            groups.append((b, c, higher_is_better))
            log_ratios.append(math.log(oriented))
    if not groups:
        return GeoMean(math.nan, math.nan, math.nan, 0)
    rng = np.random.default_rng(_seed(*(g for b, c, _ in groups for g in (b, c)), tag="geomean"))
    total = np.zeros(n_boot)
    with np.errstate(all="ignore"):
        for b, c, higher_is_better in groups:
            mb = _bootstrap_medians(b, n_boot, rng)
            mc = _bootstrap_medians(c, n_boot, rng)
            total += np.log(mc / mb) if higher_is_better else np.log(mb / mc)
        lo, hi = _percentile_ci(np.exp(total / len(groups)), confidence)
    return GeoMean(math.exp(float(np.mean(log_ratios))), lo, hi, len(groups))


# --------------------------------------------------------------------------
# Findings
# --------------------------------------------------------------------------

def modified_zscores(values: Iterable[float], reference: Iterable[float] | None = None) -> np.ndarray:
    """Iglewicz-Hoaglin modified z-scores, 0.6745 (x - median) / MAD.

    Median and MAD come from ``reference`` (default: ``values`` themselves).
    When MAD is 0 (more than half the values tied) the mean absolute
    deviation from the median is used instead, scaled by 1.253314 so it also
    estimates sigma; if that is 0 too, every score is 0 (no spread, no
    outliers).
    """
    x = np.asarray(values, dtype=float).ravel()
    ref = x if reference is None else np.asarray(reference, dtype=float).ravel()
    if x.size == 0 or ref.size == 0:
        return np.zeros(x.size)
    with np.errstate(all="ignore"):
        med = _median(ref)
        ref_dev = np.abs(ref - med)
        mad = _median(ref_dev)
        if mad > 0:
            return 0.6745 * (x - med) / mad
        mean_ad = float(np.mean(ref_dev))
        if mean_ad > 0:
            return (x - med) / (1.253314 * mean_ad)
    return np.zeros(x.size)


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def _mw_normal_p(a: np.ndarray, b: np.ndarray, continuity: bool = False) -> float:
    """Two-sided Mann-Whitney p from the tie-corrected normal approximation (no continuity
    correction): enough for a warning's screen, and it keeps scipy.stats and thousands of exact
    enumerations out of every report."""
    n1, n2 = a.size, b.size
    if n1 == 0 or n2 == 0:
        return math.nan
    pooled = np.concatenate([a, b])
    r = _ranks(pooled)
    u = r[:n1].sum() - n1 * (n1 + 1) / 2
    n = n1 + n2
    _, counts = np.unique(pooled, return_counts=True)
    var = n1 * n2 / 12 * ((n + 1) - float(np.sum(counts ** 3 - counts)) / (n * (n - 1)))
    if var <= 0:
        return 1.0
    dev = abs(u - n1 * n2 / 2) - (0.5 if continuity else 0.0)
    z = max(0.0, dev) / math.sqrt(var)
    return float(min(1.0, 2 * _special.ndtr(-z)))


def _median(x) -> float:
    """np.median's value; a few dozen values are sorted in Python, where numpy's call costs
    more than the work (the demo's report takes some 6,000 medians of 6 values)."""
    if len(x) > 64:
        return float(np.median(x))
    v = sorted(x.tolist() if isinstance(x, np.ndarray) else x)
    n = len(v)
    if n == 0 or any(e != e for e in v):   # empty, or a nan (which sorting cannot place)
        return math.nan
    h = n // 2
    return float(v[h]) if n % 2 else (v[h - 1] + v[h]) / 2


def _ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks from 1 (ties share the mean of their ranks), as scipy's rankdata."""
    x = np.asarray(x, dtype=float)
    if x.size <= 64:   # the common case, a few runs: Python's sort beats numpy's call overhead
        v = x.tolist()
        order = sorted(range(len(v)), key=v.__getitem__)
        out = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                out[order[k]] = (i + j) / 2 + 1
            i = j + 1
        return np.array(out)
    order = np.argsort(x, kind="mergesort")
    sx = x[order]
    edges = np.flatnonzero(np.r_[True, sx[1:] != sx[:-1], True])
    avg = (edges[:-1] + edges[1:] + 1) / 2          # mean of 1-based ranks in each tie group
    ranks = np.empty(x.size)
    ranks[order] = np.repeat(avg, np.diff(edges))
    return ranks


def _spearman(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Spearman rho and its two-sided p (Student's t with n - 2 df, as scipy's spearmanr);
    (nan, nan) when undefined (constant input)."""
    if x.size < 3 or np.all(x == x[0]) or np.all(y == y[0]):
        return math.nan, math.nan
    rx, ry = _ranks(x), _ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    with np.errstate(all="ignore"):
        rho = float(rx @ ry / math.sqrt(float(rx @ rx) * float(ry @ ry)))
    if not math.isfinite(rho):
        return math.nan, math.nan
    if abs(rho) >= 1:
        return rho, 0.0
    df = x.size - 2
    t = rho * math.sqrt(df / ((1 - rho) * (1 + rho)))
    return rho, float(2 * _special.stdtr(df, -abs(t)))


MIN_PAIRED_RUNS = 2   # the paired interval needs two blocks; with two, only a count that never varies decides


def _too_few_runs(n: int, alpha: float, n_comparisons: int) -> Finding | None:
    """Fewer runs than any interval needs. (`alpha` and `n_comparisons` only mattered to the rank
    test of the unpaired comparison, which now serves sweeps and diffs; the paired rule can decide
    from two runs on, and the sequential looks say when it has.)"""
    if n >= MIN_PAIRED_RUNS:
        return None
    return Finding(
        "too-few-runs",
        f"{n} run(s): no interval can be computed below {MIN_PAIRED_RUNS} runs per variant",
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
        f"{flagged.size} outlier(s) (modified z > {OUTLIER_Z}): {shown}{more}; kept in all statistics",
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


def _high_load(load_avg: float | Sequence[float] | None, n_cores: int | None) -> Finding | None:
    if load_avg is None or not n_cores:
        return None
    loads = _finite(np.atleast_1d(np.asarray(load_avg, dtype=float)))
    if loads.size == 0 or loads.max() <= n_cores:
        return None
    return Finding(
        "high-load",
        f"load average reached {loads.max():.1f} on {n_cores} cores",
        "other work competed for the CPUs; close other programs and re-run",
    )


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


def cell_findings(values: Iterable[float], *, alpha: float = 0.05, n_comparisons: int = 1,
                  blocks: Sequence[int] | None = None,
                  durations_s: Sequence[float] | None = None,
                  load_avg: float | Sequence[float] | None = None,
                  n_cores: int | None = None, n_failed: int = 0,
                  other_cpu: Sequence[float] | None = None,
                  cv_threshold: float = CV_THRESHOLD, floor: float = 0.0) -> list[Finding]:
    """Quality checks on one cell (variant x workload x metric).

    ``values`` are in run order; ``blocks`` gives each value's block index
    (defaults to the run index, i.e. one run per block).  Non-finite values
    are dropped along with their block index.

    Codes: too-few-runs, high-cv, warmup-trend (see :func:`_warmup_trend`),
    outliers (modified z > 3.5, listed, never dropped), drift (Spearman of
    value vs block, p < 0.01, >= 6 blocks), high-load (other processes used
    more than half a core during a run, from ``other_cpu``; without it, max
    load average > n_cores), short-runs (median duration
    < 10 ms), failed-runs, all-failed.
    """
    # Only the CPU other processes used is evidence of competition: the load average counts the
    # workload's own threads too (qemu-img's io_uring workers reached 14 on 2 cores), so it is
    # kept for the record but never warned on.
    load = _competing_cpu(other_cpu, n_cores) if other_cpu is not None else None
    raw = np.asarray(list(values), dtype=float).ravel()
    keep = np.isfinite(raw)
    x = raw[keep]
    n = int(x.size)
    if blocks is not None and len(blocks) == raw.size:
        block_idx = np.asarray(blocks, dtype=float)[keep]
    else:
        block_idx = np.arange(n, dtype=float)

    if n == 0:
        first = (Finding("all-failed", f"all {n_failed} runs failed; no measurements",
                         "run the variant by hand to see why it fails (missing library, "
                         "crash, timeout)")
                 if n_failed > 0 else _too_few_runs(0, alpha, n_comparisons))
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
