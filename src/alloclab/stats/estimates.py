"""Statistics for allocator comparisons: summaries and comparisons.

In: lists of measurements per cell (one variant x workload x metric).  Out:
:class:`CellSummary` (median and its interval), :class:`Comparison` (ratio of
medians with its bootstrap interval, a p-value and a verdict), :class:`GeoMean`,
and their text.  Rank tests live in :mod:`alloclab.stats.ranktests`, the
per-cell quality checks in :mod:`alloclab.stats.findings`.

Everything here is pure computation on lists of numbers (no I/O, no global
state).  Randomness (bootstrap) is seeded from a hash of the *sorted* data, so
the same measurements always print the same intervals, whatever order they
were recorded in.

Longer than 400 lines because a comparison's words (format_comparison: when its interval is printed,
when it is said in words) belong with the Comparison they read, and every report, tune's answer and
the sweep's lines share them.

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
import hashlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from alloclab.stats import special as _special

from alloclab.stats.ranktests import _mannwhitney_p
from alloclab.stats.verdicts import more_runs, verdict_for


__all__ = [
    "CellSummary",
    "Comparison",
    "Finding",
    "GeoMean",
    "compare",
    "format_comparison",
    "format_p",
    "geomean_ratio",
    "median_ci",
    "proportion_upper",
    "precise_enough",
    "summarize",
]


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
    p_adjusted: float       # scaled so that p_adjusted < alpha means the level the verdict used was met
    higher_is_better: bool
    verdict: str            # "better" | "worse" | "equivalent" | "undecided" (verdicts.VERDICTS)
    n_baseline: int
    n_candidate: int
    margin: float = 0.0     # the equivalence margin the verdict used (relative, 0.02 for +-2%)
    confidence: float = 0.95  # of the interval: simultaneous over looks and comparisons when paired
    method: str = "unpaired"  # "paired" (within-block trimmed mean) | "unpaired" (ratio of medians)
    more_runs: int | None = None  # undecided: runs per variant likely to decide it
    futile: bool = False    # undecided, and more_runs is beyond what --max-runs or the budget leave:
                            # closed by the futility rule, reported as the bound its interval is
    stopped: str | None = None  # undecided and still open when the experiment stopped, not futile:
                                # "budget" | "max-runs", said as stopped by it, with more_runs;
                                # "leader": dropped by tune's race below a leader (tune/race.py)

    @property
    def gain(self) -> float:
        """The ratio as a gain: above 1 when better, whatever the metric's direction."""
        return self.ratio if self.higher_is_better else 1 / self.ratio

    @property
    def gain_bounds(self) -> tuple[float, float]:
        """(least, most) gain the interval allows."""
        lo, hi = self.ci_low, self.ci_high
        if not self.higher_is_better:
            lo, hi = (1 / hi if hi > 0 else 0.0), (1 / lo if lo > 0 else math.inf)
        return lo, hi


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
    """Medians of ``n_boot`` resamples with replacement (vectorised), the same values as
    np.median(x_sorted[idx], axis=1) at half its time: x is sorted, so a resample's middle order
    statistics are x at the middle of its sorted indices, found from each index's count (a
    partition per resample costs more than the counting at the few dozen runs of a cell)."""
    n = x_sorted.size
    idx = rng.integers(0, n, size=(n_boot, n))
    counts = np.bincount((idx + np.arange(0, n_boot * n, n)[:, None]).ravel(), minlength=n_boot * n)
    below = counts.reshape(n_boot, n).cumsum(axis=1)
    lo = np.count_nonzero(below <= (n - 1) // 2, axis=1)
    if n % 2:
        return x_sorted[lo]
    hi = np.count_nonzero(below <= n // 2, axis=1)
    with np.errstate(all="ignore"):  # huge values may overflow; replicates go non-finite
        return (x_sorted[lo] + x_sorted[hi]) / 2


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


def proportion_upper(k: int, n: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper limit of a proportion seen k times in n (a profile's
    samples in some functions): exact, so 0 hits in 185 samples still allow 1.6%."""
    if n <= 0:
        return 1.0
    if k >= n:
        return 1.0
    return float(_special.betaincinv(k + 1, n - k, confidence))


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
        verdict=verdict_for(ratio, lo, hi, higher_is_better, min_effect, significant=math.isfinite(p) and p < alpha),
        n_baseline=int(b.size), n_candidate=int(c.size), margin=min_effect, confidence=confidence,
        more_runs=more_runs(int(min(b.size, c.size)), ratio, lo, hi, min_effect),
    )


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
        bounded        "? +2.1%, no difference beyond [-8.6, +13.4]; equivalence within ±2% would need
                        ~440 more runs" (futile: closed by the futility rule, its interval a bound)
        cut short      "? +8.2% [-1.5, +18.9], stopped by the budget; a verdict would need ~25 more
                        runs" (still open when the budget or --max-runs stopped the experiment)
        too wide       "? -14.0% on 6 runs each, too few or too noisy for an interval (wider than x10),
                        stopped by the budget; a verdict would need ~200 more runs" (an open comparison
                        whose interval spans more than a factor of 10: it would bound nothing)

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
    if not _narrow(c):
        # "[-98.4, +4529.6]" bounds nothing a reader can use and reads like a finding: say how little
        # the estimate rests on, why it is open, and what would close it (the JSON keeps the numbers).
        why = f", stopped {STOPPED_BY.get(c.stopped, 'by ' + c.stopped)}" if c.stopped else ""
        need = f"; {_nearer_decision(c)} would need {_runs(c.more_runs)}" if c.more_runs else ""
        if c.more_runs and min(c.n_candidate, c.n_baseline) < PROJECT_FROM:
            # A spread read from two or three runs projects nothing ("~208516 more runs" from two).
            need = f"; {_rests_on(c)} cannot tell how many a verdict needs"
        return f"? {delta:+.1f}% on {_rests_on(c)}, too few or too noisy for an interval (wider than x{WIDE:g}){why}{need}"
    if c.futile and c.more_runs:
        need = f"{_nearer_decision(c)} would need {_runs(c.more_runs)}"
        return f"? {delta:+.1f}%, no difference beyond {interval}; {need}"
    if c.stopped:
        # Not a bound: the budget (or --max-runs) ended it while more runs could still decide it.
        need = f"; {_nearer_decision(c)} would need {_runs(c.more_runs)}" if c.more_runs else ""
        return f"? {delta:+.1f}% {interval}, stopped {STOPPED_BY.get(c.stopped, 'by ' + c.stopped)}{need}"
    more = f" {_runs(c.more_runs)}" if c.more_runs else ""
    return f"? {delta:+.1f}% {interval}{more}"


WIDE = 10.0   # an open comparison's interval spanning more than this factor is not printed
PROJECT_FROM = 4   # fewer runs than this give no spread to project the runs a verdict needs from


def _narrow(c: Comparison) -> bool:
    """Whether the interval is worth printing: finite, positive and spanning at most WIDE."""
    return (math.isfinite(c.ci_low) and math.isfinite(c.ci_high) and c.ci_low > 0
            and c.ci_high / c.ci_low <= WIDE)


def _rests_on(c: Comparison) -> str:
    n, m = c.n_candidate, c.n_baseline
    if n == m:
        return f"{n} run{'s' if n != 1 else ''} each"
    return f"{n} runs against {m}"


def _runs(n: int) -> str:
    return f"~{n} more run{'s' if n != 1 else ''}"


STOPPED_BY = {"budget": "by the budget", "max-runs": "at --max-runs",
              "leader": "below the leader"}


def _nearer_decision(c: Comparison) -> str:
    """What more runs would most likely decide (verdicts.more_runs projects the nearer of the two):
    equivalence where the effect is closer to zero than to the margin, else a verdict."""
    est = abs(math.log(c.ratio)) if c.ratio > 0 else math.inf
    return (f"equivalence within ±{c.margin * 100:g}%" if c.margin > 0 and math.log1p(c.margin) - est > est
            else "a verdict")


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
