"""An executor's own figures reach the runner as values, not as text to parse again."""

from __future__ import annotations

import json

from alloclab.measure.service.values import summary_line
from alloclab.workloads.metrics import MetricDef, extract

PSS = MetricDef("peak_pss_mb", "MiB", False, "json", "alloclab.peak_pss_mb")


def test_values_are_taken_as_they_are_and_the_record_line_keeps_every_digit():
    value = 123.456789012345
    line = summary_line({"peak_pss_mb": value})
    assert json.loads(line)["alloclab"]["peak_pss_mb"] == value           # no rounding in the record
    assert extract(PSS, "no json here", {"peak_pss_mb": value}) == value  # no text round trip
    assert extract(PSS, "out\n" + line) == value                          # a stored run, re-read


def test_a_metric_missing_from_the_values_falls_back_on_the_output():
    assert extract(PSS, '{"alloclab": {"peak_pss_mb": 7}}', {"final_pss_mb": 1.0}) == 7.0
    assert extract(PSS, "nothing", {"peak_pss_mb": float("nan")}) is None
    assert extract(PSS, "nothing", {}) is None
