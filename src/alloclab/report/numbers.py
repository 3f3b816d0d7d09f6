"""How every report writes a number: thousands grouped, three significant digits below 10."""

from __future__ import annotations

import math


def fmt_value(v: float) -> str:
    if v is None or not math.isfinite(v):
        return "n/a"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.3g}" if a < 10 else f"{v:.2f}"
    if a == 0:
        return "0"
    return f"{v:.3g}"


def count(n: int, word: str, plural: str | None = None) -> str:
    """"1 warm-up block", "2 warm-up blocks": a count with its noun in the right number, never "block(s)"."""
    return f"{n} {word if n == 1 else plural or word + 's'}"
