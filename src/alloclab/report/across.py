"""The line across workloads in words: what the overall pick is decided on each workload, the rule
that chose it (docs/reports.md, "The recommendation"), and why each variant decided better on more
workloads is not the pick. stats/across.py holds all of it as counts; no mean is said, since one
workload's x200 would carry it.

In: the overall Choice of the Results' recommendation. Out: its sentence, as every format says it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from alloclab.stats.across import RULE, Rival, Tally, Why

if TYPE_CHECKING:
    from alloclab.stats.recommend import Choice

RULES = {RULE: "better somewhere, worse nowhere, then better on the most"}
WHY = {Why.WORSE: None,   # said with the workloads and metrics (_worse)
       Why.INEFFECTIVE: "not in effect everywhere (INEFFECTIVE)",
       Why.OVER_BUDGET: "over the memory budget",
       Why.KEEPS_MORE: "holds more memory after a phase"}


def _on(names: tuple[str, ...]) -> str:
    return f"on {len(names)}" if names else "on none"


def counts(t: Tally) -> str:
    """'better on 4, worse on none, equivalent on 1, undecided on 2'."""
    return ", ".join(f"{kind} {_on(names)}" for kind, names in (
        ("better", t.better), ("worse", t.worse), ("equivalent", t.equivalent), ("undecided", t.undecided)))


def _worse(t: Tally) -> str:
    where = ", ".join(f"{metric} in {w}" for w, metric in zip(t.worse, t.worse_metrics))
    return f"worse {_on(t.worse)}: {where}"


def _rival_groups(rivals: list[Rival], tallies: dict[int, Tally], labels: list[str]) -> list[str]:
    """One clause per reason: variants with the same wins and the same losses are said together."""
    groups: dict[tuple, list[str]] = {}
    for r in rivals:
        t = tallies[r.variant_idx]
        groups.setdefault((len(t.better), t.worse, t.worse_metrics, r.why), []).append(labels[r.variant_idx])
    out = []
    for (better, *_, why), names in groups.items():
        t = tallies[labels.index(names[0])]
        reasons = [_worse(t) if w is Why.WORSE else WHY[w] for w in why]
        out.append(f"{', '.join(names)} (better on {better}, {'; '.join(reasons)})")
    return out


def across_text(c: Choice) -> str:
    """What follows the overall sentence: the pick's counts and the rule (or the tied variants'),
    and a clause for the variants better on more workloads that are not the pick."""
    x = c.across
    if x is None:
        return ""
    labels = [p.label for p in c.points]
    out = []
    if c.pick is not None:
        t = x.tallies[c.pick]
        memory = f"; peak RSS lower on {len(t.rss_lower)}, higher {_on(t.rss_higher)}" if c.reason == "memory" else ""
        out.append(f"{labels[c.pick]} is {counts(t)}{memory} (the rule: {RULES[x.rule]}).")
    elif x.tied:
        out.append(f"Each is {counts(x.tallies[x.tied[0]])} (the rule: {RULES[x.rule]}).")
    if x.rivals:
        lead = "Better on more but not the pick" if c.pick is not None or x.tied else "Better somewhere but not picked"
        out.append(f"{lead}: " + "; ".join(_rival_groups(x.rivals, x.tallies, labels)) + ".")
    return " ".join(out)


def sentence(c: Choice) -> str:
    """A choice's sentence as every format says it: the overall's with its counts after it."""
    more = across_text(c)
    return f"{c.sentence} {more}" if more else c.sentence
