"""The figures a service or command-mode run adds to what the runner measures: ratio metrics
derived from the client's output and the run's own measures, and the JSON line of our own that
records them in the run's stored output."""

from __future__ import annotations

import json

from alloclab.measure.run import RunResult
from alloclab.workloads.experiment_file import MetricSpec
from alloclab.workloads.metrics import MetricDef, extract


def derived_values(specs: tuple[MetricSpec, ...], text: str, run: RunResult | None = None,
                   more: dict[str, float] | None = None) -> dict[str, float]:
    """Ratio metrics; a numerator `@cpu_s` (etc.) is that measure of `run`, the process under the variant."""
    measured = {} if run is None else {"cpu_s": run.user_s + run.sys_s, "user_s": run.user_s,
                                       "sys_s": run.sys_s, "wall_s": run.wall_s}
    measured |= more or {}
    out: dict[str, float] = {}
    for m in specs:
        if not m.derived:
            continue
        if m.ratio[0].startswith("@"):
            num = measured.get(m.ratio[0][1:])
        else:
            num = extract(MetricDef("n", "", True, "regex", m.ratio[0]), text)
        den = extract(MetricDef("d", "", True, "regex", m.ratio[1]), text)
        if num is not None and den:
            out[m.name] = num / den * m.scale
    return out


def summary_line(values: dict) -> str:
    """A JSON line of our own at the end of stdout: the run's figures in its stored record (the runner
    itself takes them from RunResult.values, not from this text)."""
    return json.dumps({"alloclab": values})
