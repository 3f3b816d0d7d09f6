"""The JSON's answer (schema 3) as numbers: each primary comparison, each pick's effect with its
interval, the CPU bounds, every metric under the results' own key ("ns_per_pair", its unit apart)
and every variant by its label. The sentences stay where other formats print them (`sentence`);
what a program reads is here as numbers."""

from __future__ import annotations

import dataclasses

from alloclab.report import fingerprint
from alloclab.report.across import sentence as choice_sentence
from alloclab.report.common import mechanism_comparisons, primary_comparisons
from alloclab.stats import estimates as stats
from alloclab.stats.analysis import Analysis
from alloclab.workloads.metrics import PEAK_RSS


def effect(c: stats.Comparison | None) -> dict:
    """A comparison as numbers: the change as a fraction of the baseline (-0.38 for -38%), its
    interval on the same scale, the p the verdict used (adjusted); null where not measured."""
    if c is None:
        return {"verdict": None, "effect": None, "low": None, "high": None, "p": None}
    return {"verdict": c.verdict, "effect": c.ratio - 1, "low": c.ci_low - 1, "high": c.ci_high - 1,
            "p": c.p_adjusted}


def answers(a: Analysis) -> list[dict]:
    """One per primary comparison, in report order: what every format's answer table says."""
    out = []
    for w, row, vi, c in primary_comparisons(a):
        out.append({"workload": w.name, "metric": row.name, "unit": row.unit, "higher_is_better": row.higher_is_better,
                    "variant": a.labels[vi], **effect(c), "stopped": c.stopped,
                    "more_runs": c.more_runs if c.verdict == "undecided" else None,
                    "mechanism": [{"metric": r.name, **effect(x)} for r, x in mechanism_comparisons(w, vi)],
                    "fingerprint": fingerprint.mechanism(a.experiment, w.idx, vi, a.baseline_idx, a.labels)})
    return out


def _choice(a: Analysis, choice, w) -> dict:
    """One workload's choice (w None: the overall): the pick and the front by label, each point's
    speed and peak-RSS changes as numbers, the pick's own effects."""
    out = dataclasses.asdict(choice)
    out["sentence"] = choice_sentence(choice)
    out["pick"] = a.labels[choice.pick] if choice.pick is not None else None
    out["front"] = [a.labels[vi] for vi in choice.front]
    primary = w.primary() if w is not None else None
    rss = w.row(PEAK_RSS) if w is not None else None
    for p in out["points"]:
        vi = p["variant_idx"]
        del p["speed_text"], p["rss_text"]
        if w is not None:   # the overall's points are geomeans, without an interval
            p["speed_change"] = effect(primary.comparison(vi) if primary else None)
            p["rss_change"] = effect(rss.comparison(vi) if rss else None)
    if w is None:
        out["metric"] = None   # a geomean over workloads: no metric of the results
        out["combined"] = choice.metric
    pick = next((p for p in out["points"] if p["variant_idx"] == choice.pick), None)
    if pick is None:
        out["effect"] = out["memory"] = None
    elif w is not None:
        out["effect"] = {"metric": choice.metric} | pick["speed_change"]
        out["memory"] = {"metric": PEAK_RSS} | pick["rss_change"]
    else:
        out["effect"] = {"metric": None, "verdict": pick["speed_verdict"], "geomean_speedup": pick["speed_ratio"]}
        out["memory"] = {"metric": PEAK_RSS, "verdict": pick["rss_verdict"], "geomean_ratio": pick["rss_ratio"]}
    x = out.pop("across")
    if x is not None:
        out["across"] = {"rule": x["rule"],
                         "tallies": [{"variant": a.labels[vi]} | t for vi, t in x["tallies"].items()],
                         "tied": [a.labels[vi] for vi in x["tied"]],
                         "rivals": [{"variant": a.labels[v["variant_idx"]], "why": [str(y.value) for y in v["why"]]}
                                    for v in x["rivals"]]}
    return out


def recommendation(a: Analysis, rec) -> dict:
    """As stored, with the sentence as every format says it; each workload's choice beside its
    workload (recommend() makes one per workload, in order)."""
    return {"budget": rec.budget, "baseline": rec.baseline,
            "workloads": [_choice(a, c, w) for c, w in zip(rec.workloads, a.workloads)],
            "overall": _choice(a, rec.overall, None)}
