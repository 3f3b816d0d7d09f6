"""Two experiments of the same workload side by side (another day, machine or allocator version),
with the statistics of a comparison: for each variant both have and each metric, B against A as
a ratio of medians with its bootstrap interval and a Mann-Whitney p (unpaired: two experiments share no
blocks), Bonferroni over the variants of a workload and metric (stats.decide.judge, the one engine)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table
from rich.text import Text

from alloclab.stats import decide
from alloclab.stats import estimates as stats
from alloclab.report.jsonout import json_safe
from alloclab.stats.analysis import DEFAULT_STANDARD
from alloclab.errors import AlloclabError
from alloclab.store.db import Experiment
from alloclab.report.common import fmt_value, full_delta, verdict_word

VERDICT_STYLE = {"better": "green", "worse": "red", "equivalent": "cyan", "undecided": "yellow"}
# What may differ between two experiments and explain a change.
CONTEXT_KEYS = ("host", "cpu_model", "usable_cores", "kernel", "os", "glibc", "thp", "thp_defrag", "governor",
                "alloclab")


@dataclass
class DiffCell:
    label: str
    a: stats.CellSummary
    b: stats.CellSummary
    comparison: stats.Comparison


@dataclass
class DiffRow:
    metric: str
    unit: str
    higher_is_better: bool
    cells: list[DiffCell]


@dataclass
class DiffWorkload:
    name_a: str
    name_b: str
    rows: list[DiffRow]


@dataclass
class Diff:
    a: Experiment
    b: Experiment
    labels: list[str]
    workloads: list[DiffWorkload]
    changes: list[tuple[str, str, str]] = field(default_factory=list)   # (what, in A, in B)
    notes: list[str] = field(default_factory=list)
    alpha: float = 0.05


def _values(e: Experiment, wi: int, vi: int, metric: str) -> list[float]:
    return [r["metrics"][metric] for r in e.cell_runs(wi, vi) if r["status"] == "ok" and metric in r["metrics"]]


def _program_key(w: dict) -> tuple:
    # The same program under another path (another machine, another build directory).
    argv = w["argv"]
    return (argv[0].rsplit("/", 1)[-1], *argv[1:]) if argv else ()


def _match_workloads(a: Experiment, b: Experiment, notes: list[str]) -> list[tuple[dict, dict]]:
    pairs = []
    for wa in a.workloads:
        wb = next((w for w in b.workloads if w["name"] == wa["name"]), None) or \
            next((w for w in b.workloads if w["argv"] == wa["argv"]), None) or \
            next((w for w in b.workloads if _program_key(w) == _program_key(wa)), None)
        if wb:
            pairs.append((wa, wb))
            if wb["argv"] != wa["argv"]:
                notes.append(f"'{wa['name']}' and '{wb['name']}' run the same program from different paths; "
                             f"compared as the same workload.")
    if not pairs:
        raise AlloclabError(
            f"Experiments {a.id} and {b.id} share no workload: {a.id} ran {', '.join(w['name'] for w in a.workloads)}; "
            f"{b.id} ran {', '.join(w['name'] for w in b.workloads)}. `alloclab diff` compares two experiments of "
            f"the same workload (same command and arguments); pick them from `alloclab experiments`.")
    unmatched = [w["name"] for w in a.workloads if all(w is not p[0] for p in pairs)]
    if unmatched:
        notes.append(f"Workloads only in experiment {a.id}, left out: {', '.join(unmatched)}.")
    return pairs


def _changes(a: Experiment, b: Experiment, labels: list[str]) -> list[tuple[str, str, str]]:
    out = []
    for key in CONTEXT_KEYS:
        va, vb = a.machine.get(key), b.machine.get(key)
        if va != vb:
            out.append((key, str(va), str(vb)))
    versions_a = {v["label"]: v.get("version") for v in a.variants}
    versions_b = {v["label"]: v.get("version") for v in b.variants}
    env_a = {v["label"]: v["env"] for v in a.variants}
    env_b = {v["label"]: v["env"] for v in b.variants}
    for label in labels:
        if versions_a[label] != versions_b[label]:
            out.append((f"{label} version", str(versions_a[label]), str(versions_b[label])))
        if env_a[label] != env_b[label]:
            out.append((f"{label} environment", json.dumps(env_a[label]), json.dumps(env_b[label])))
    for key in ("runs", "warmup", "seed"):
        if a.config.get(key) != b.config.get(key):
            out.append((key, str(a.config.get(key)), str(b.config.get(key))))
    return out


def diff_experiments(a: Experiment, b: Experiment, alpha: float = 0.05, min_effect: float = 0.0,
                     details: bool = False) -> Diff:
    labels_a = [v["label"] for v in a.variants]
    labels_b = [v["label"] for v in b.variants]
    labels = [label for label in labels_a if label in labels_b]
    if not labels:
        raise AlloclabError(
            f"Experiments {a.id} and {b.id} have no variant label in common ({', '.join(labels_a)} against "
            f"{', '.join(labels_b)}). Give the variants the same @LABEL in both runs to compare them.")
    notes: list[str] = []
    workloads = []
    for wa, wb in _match_workloads(a, b, notes):
        defs_b = {d["name"]: d for d in b.defs_for(wb["idx"])}
        rows = []
        for d in a.defs_for(wa["idx"]):
            if d["name"] not in defs_b:
                continue
            if not details and d["source"] == "run" and d["name"] not in DEFAULT_STANDARD:
                continue
            hib = bool(d["higher_is_better"])
            cells = []
            for label in labels:
                va = _values(a, wa["idx"], labels_a.index(label), d["name"])
                vb = _values(b, wb["idx"], labels_b.index(label), d["name"])
                if not va and not vb:
                    continue
                cells.append(DiffCell(label, stats.summarize(va), stats.summarize(vb), (va, vb)))
            if cells:
                # The one engine, unpaired (two experiments share no blocks), Bonferroni over the same
                # family as a comparison: the variants on one workload and metric.
                for c in cells:
                    va, vb = c.comparison
                    c.comparison = decide.judge(va, vb, hib, margin=min_effect, design=decide.Design.fixed(1, alpha),
                                                blocks=1, family=len(cells))
                rows.append(DiffRow(d["name"], d["unit"], hib, cells))
        workloads.append(DiffWorkload(wa["name"], wb["name"], rows))
    missing = [x for x in labels_a + labels_b if x not in labels]
    if missing:
        notes.append(f"Only in one experiment, left out: {', '.join(dict.fromkeys(missing))}.")
    return Diff(a, b, labels, workloads, _changes(a, b, labels), notes, alpha)


# --- rendering ----------------------------------------------------------------------------------

def _title(d: Diff) -> str:
    return (f"experiment {d.b.id} ({d.b.row['created']}, {d.b.machine.get('host')}) against "
            f"experiment {d.a.id} ({d.a.row['created']}, {d.a.machine.get('host')})")


def render_terminal(d: Diff, console: Console) -> None:
    console.print(Text(f"B = {_title(d)} = A", style="bold"))
    for what, va, vb in d.changes:
        console.print(Text(f"  {what}: {va} -> {vb}", style="yellow"))
    if not d.changes:
        console.print(Text("  same host, kernel, glibc, allocator versions and settings", style="dim"))
    for w in d.workloads:
        t = Table(title=f"[bold]{w.name_a}[/]" + (f" / {w.name_b}" if w.name_b != w.name_a else ""),
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
                text.append("\n" + stats.format_comparison(c.comparison),
                            style=VERDICT_STYLE.get(c.comparison.verdict, ""))
                out.append(text)
            t.add_row(*out)
        console.print(t)
    for note in d.notes:
        console.print(Text(note, style="yellow"))
    console.print(Text("Each cell: median in A -> median in B; under it B against A with its bootstrap interval (simultaneous 95%) and "
                       "the Mann-Whitney p, Bonferroni-adjusted, or ~ when not significant (adjusted p >= 0.05, or the interval includes no change); unpaired: two experiments share no blocks.", style="dim"))


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
