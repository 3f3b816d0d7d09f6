"""What the HTML page and its charts share without drawing anything: the variants' colours and
which runs the RSS chart shows. Kept apart from report/charts.py, which imports matplotlib
(0.4 s): a page whose charts come from the cache (report/html.py) never imports it."""

from __future__ import annotations

RSS_LINES_PER_VARIANT = 12      # runs drawn in the RSS-over-time chart, spread over the experiment
PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c",
           "#ccb974", "#64b5cd")


def colour(vi: int) -> str:
    return PALETTE[vi % len(PALETTE)]


def pick_runs(runs: list, k: int) -> list:
    if len(runs) <= k:
        return runs
    step = (len(runs) - 1) / (k - 1)
    return [runs[round(i * step)] for i in range(k)]
