"""Rank statistics on small samples: Mann-Whitney, ranks, Spearman, Holm, robust z-scores.

In: numpy arrays (or lists) of finite values.  Out: p-values, ranks, Spearman's
rho and p, Holm-adjusted p-values, modified z-scores, and the smallest run count
at which an exact Mann-Whitney test can reach significance.  numpy and
scipy.special only: importing scipy.stats would cost every report a second.
Used by :mod:`alloclab.stats.estimates` (comparisons) and
:mod:`alloclab.stats.findings` (per-cell checks).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterable, Sequence

import numpy as np
from alloclab.stats import special as _special

__all__ = [
    "holm",
    "min_runs_for_significance",
    "modified_zscores",
]

# Exact permutation p-values are expensive; beyond this many arrangements the
# tie-corrected normal approximation is accurate enough (n >= 8 per group).
_EXACT_PERMUTATION_LIMIT = 4000


# --------------------------------------------------------------------------
# Rank tests
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
