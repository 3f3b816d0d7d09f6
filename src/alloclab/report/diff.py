"""Two experiments of the same workload side by side (another day, machine or allocator version),
with the statistics of a comparison: for each variant both have and each metric, B against A as
a ratio of medians with its bootstrap interval and a Mann-Whitney p (unpaired: two experiments share no
blocks), Bonferroni over the variants of a workload and metric (stats.decide.judge, the one engine).
The comparison is stats/diff.py's Diff; this module only renders it."""

from __future__ import annotations

import dataclasses
import json

from rich.console import Console
from rich.table import Table
from rich.text import Text

from alloclab.report.jsonout import json_safe
from alloclab.stats.diff import Diff
from alloclab.stats.estimates import format_comparison
from alloclab.report.common import fmt_value, full_delta, verdict_word

VERDICT_STYLE = {"better": "green", "worse": "red", "equivalent": "cyan", "undecided": "yellow"}


def _title(d: Diff) -> str:
    return (f"experiment {d.b.id} ({d.b.row.created}, {d.b.machine.host}) against "
            f"experiment {d.a.id} ({d.a.row.created}, {d.a.machine.host})")


# What a terminal cell shows (format_comparison): the p values are in -f md and -f json only.
LEGEND = ("Each cell: median in A -> median in B; under it B against A, the change and its bootstrap interval "
          "(simultaneous 95%, Bonferroni over the variants of a workload and metric): better or worse where the "
          "interval excludes no change, ≈ equivalent where it lies within the margin, ? undecided (with the runs a "
          "verdict would need); unpaired: two experiments share no blocks. The Mann-Whitney p values: -f md or -f json.")


def render_terminal(d: Diff, console: Console) -> None:
    console.print(Text(f"B = {_title(d)} = A", style="bold"))
    for what, va, vb in d.changes:
        console.print(Text(f"  {what}: {va} -> {vb}", style="yellow"))
    if not d.changes:
        console.print(Text("  same host, kernel, glibc, allocator versions and settings", style="dim"))
    for w in d.workloads:
        t = Table(title=Text.assemble((w.name_a, "bold"), f" / {w.name_b}" if w.name_b != w.name_a else ""),
                  title_justify="left")
        t.add_column("metric", no_wrap=True)
        for label in d.labels:
            t.add_column(f"{label}\nA -> B", justify="right")
        for row in w.rows:
            cells = {c.label: c for c in row.cells}
            out = [Text(row.metric + (f" ({row.unit})" if row.unit else ""))]
            for label in d.labels:
                c = cells.get(label)
                if c is None:
                    out.append(Text("n/a"))
                    continue
                text = Text(f"{fmt_value(c.a.median)} -> {fmt_value(c.b.median)}")
                text.append("\n" + format_comparison(c.comparison),
                            style=VERDICT_STYLE.get(c.comparison.verdict, ""))
                out.append(text)
            t.add_row(*out)
        console.print(t)
    for note in d.notes:
        console.print(Text(note, style="yellow"))
    console.print(Text(LEGEND, style="dim"))


def render_markdown(d: Diff) -> str:
    from alloclab.report.markdown import table
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
