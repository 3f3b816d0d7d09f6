"""The few distribution functions of scipy.special the statistics use, imported on their first
call: importing scipy.special costs 0.17 s on a 2-core VM (its array-API layer touches every
numpy submodule), and a report rendered from cached Results (stats/results_cache.py) calls none."""

from __future__ import annotations

import functools


@functools.cache
def _special():
    from scipy import special
    return special


def stdtr(df, t):
    """Student's t CDF."""
    return _special().stdtr(df, t)


def stdtrit(df, p):
    """Student's t quantile."""
    return _special().stdtrit(df, p)


def ndtr(z):
    """The standard normal CDF."""
    return _special().ndtr(z)


def bdtr(k, n, p):
    """The binomial CDF."""
    return _special().bdtr(k, n, p)


def betaincinv(a, b, y):
    """The inverse of the regularized incomplete beta function (Clopper-Pearson limits)."""
    return _special().betaincinv(a, b, y)
