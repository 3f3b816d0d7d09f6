"""Two experiments of the same workload side by side (another day, machine or allocator version),
with the statistics of a comparison: for each variant both have and each metric, B against A as
a ratio of medians with its bootstrap interval and a Mann-Whitney p (unpaired: two experiments share no
blocks), Bonferroni over the variants of a workload and metric (stats.decide.judge, the one engine).
The comparison is stats/diff.py's Diff; this module only renders it."""

from __future__ import annotations

import dataclasses
import json

from rich.console import Console
from rich.text import Text

from alloclab.report.jsonout import json_safe
from alloclab.stats.diff import Diff
from alloclab.stats.estimates import format_comparison
from alloclab.report.common import fmt_value, full_delta, verdict_word

VERDICT_STYLE = {"better": "green", "worse": "red", "equivalent": "cyan", "undecided": "yellow"}


def _title(d: Diff) -> str:
    return (f"experiment {d.b.id} ({d.b.row.created}, {d.b.machine.host}) against "
            f"experiment {d.a.id} ({d.a.row.created}, {d.a.machine.host})")


STATISTIC = ("unpaired: two experiments share no blocks, so B against A is the ratio of the medians with its "
             "bootstrap interval (simultaneous 95%, Bonferroni over the variants of a workload and metric) and a "
             "Mann-Whitney p, not the within-block estimate of one experiment")
# What a terminal line shows (format_comparison): the p values and every cell are in -f md and -f json.
LEGEND = ("better or worse: the interval excludes no change; ≈ equivalent: it lies within the margin; ? undecided "
          "(with the runs a verdict would need). Every cell, with its p value: -f md or -f json.")


def summary(d: Diff) -> str:
    """pyperf compare_to's last line: how many comparisons moved, and which way."""
    verdicts = [c.comparison.verdict for w in d.workloads for row in w.rows for c in row.cells]
    counts = {v: verdicts.count(v) for v in ("better", "worse", "equivalent", "undecided") if verdicts.count(v)}
    said = ", ".join(f"{n} {v}" for v, n in counts.items()) or "nothing in common"
    return f"{len(verdicts)} comparison{'s' if len(verdicts) != 1 else ''} of B against A: {said}"


def render_terminal(d: Diff, console: Console) -> None:
    """One line a decided change; the rest (equivalent, undecided) folded into one line a workload,
    as pyperf compare_to hides what is not significant; the statistic named, with why."""
    console.print(Text(f"B = {_title(d)} = A", style="bold"))
    for what, va, vb in d.changes:
        console.print(Text(f"  {what}: {va} -> {vb}", style="yellow"))
    if not d.changes:
        console.print(Text("  same host, kernel, glibc, allocator versions and settings", style="dim"))
    for w in d.workloads:
        console.print(Text.assemble((w.name_a, "bold"), f" / {w.name_b}" if w.name_b != w.name_a else ""))
        folded: dict[str, int] = {}
        for row in w.rows:
            metric = row.metric + (f" ({row.unit})" if row.unit else "")
            for c in row.cells:
                verdict = c.comparison.verdict
                if verdict not in ("better", "worse"):
                    folded[verdict] = folded.get(verdict, 0) + 1
                    continue
                console.print(Text.assemble(f"  {metric}, {c.label}: {fmt_value(c.a.median)} -> {fmt_value(c.b.median)}: ",
                                            (f"{format_comparison(c.comparison)} {verdict}",
                                             VERDICT_STYLE.get(verdict, ""))))
        if folded:
            n = sum(folded.values())
            console.print(Text(f"  {n} unchanged comparison{'s' if n != 1 else ''} not shown ("
                               + ", ".join(f"{k} {v}" for v, k in folded.items()) + ")", style="dim"))
    for note in d.notes:
        console.print(Text(note, style="yellow"))
    console.print(Text(summary(d) + f" ({STATISTIC}).", style="bold"))
    console.print(Text(LEGEND, style="dim"))


def render_markdown(d: Diff) -> str:
    from alloclab.report.md_table import table
    out = [f"## alloclab diff: B = {_title(d)} = A", ""]
    if d.changes:
        out += ["What changed:", ""] + [f"- {what}: {va} -> {vb}" for what, va, vb in d.changes] + [""]
    else:
        out += ["Same host, kernel, glibc, allocator versions and settings.", ""]
    for w in d.workloads:
        out += [f"### {w.name_a}" + (f" / {w.name_b}" if w.name_b != w.name_a else ""), ""]
        rows = []
        for row in w.rows:
            cells = {c.label: c for c in row.cells}
            line = [row.metric + (f" ({row.unit})" if row.unit else "")]
            for label in d.labels:
                c = cells.get(label)
                line.append("n/a" if c is None else
                            f"{fmt_value(c.a.median)} -> {fmt_value(c.b.median)} "
                            f"({full_delta(c.comparison)} {verdict_word(c.comparison)})")
            rows.append(line)
        out += table(["metric"] + [f"{label}: A -> B" for label in d.labels], rows) + [""]
    out += [f"- {n}" for n in d.notes]
    out += ["", "Each cell: median in A -> median in B, then B against A with its bootstrap interval (simultaneous 95%), the "
                "Bonferroni-adjusted Mann-Whitney p (unpaired) and the verdict (better, worse, equivalent within the margin, undecided)."]
    return "\n".join(out).rstrip() + "\n"


def render_json(d: Diff) -> str:
    return json.dumps(json_safe({
        "schema": 1, "a": d.a.id, "b": d.b.id, "labels": d.labels, "alpha": d.alpha,
        "changes": [{"what": w, "a": va, "b": vb} for w, va, vb in d.changes], "notes": d.notes,
        "workloads": [dataclasses.asdict(w) for w in d.workloads]}), indent=1)
