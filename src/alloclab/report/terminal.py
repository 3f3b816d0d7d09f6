"""The terminal report: one table per workload, in the shape engineers paste into patch mails."""

from __future__ import annotations

import io

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from alloclab.stats.analysis import DEFAULT_STANDARD, Analysis
from alloclab.stats.recommend import Recommendation, recommend
from alloclab.report import fingerprint
from alloclab.report.common import (answers, baseline_ran, baseline_warning, runs_line, delta_text, failed_run_lines,
    fmt_value, metric_title, process_lines, statistics_line, warning_groups, wrapper_answers)
from alloclab.report.bounds import bound_answers

STATUS_STYLE = {"verified": "green", "ineffective": "bold red", "unknown": "yellow"}
VERDICT_STYLE = {"better": "green", "worse": "red", "equivalent": "cyan", "undecided": "yellow"}


def workload_table(a: Analysis, w, details: bool = False) -> Table:
    order = [a.baseline_idx] + [i for i in range(len(a.labels)) if i != a.baseline_idx]
    t = Table(title=f"[bold]{w.name}[/]", title_justify="left", show_lines=False)
    t.add_column("metric", no_wrap=True)
    for vi in order:
        t.add_column(a.labels[vi] + (" (baseline)" if vi == a.baseline_idx else ""), justify="right")
    status = [Text("allocator")]
    for vi in order:
        s = w.verification[vi]["status"]
        status.append(Text(s, style=STATUS_STYLE.get(s, "")))
    t.add_row(*status)
    runs = [Text("runs ok/total")]
    for vi in order:
        failed = len(w.runs_failed[vi])
        total = w.runs_total[vi]
        runs.append(Text(f"{total - failed}/{total}", style="red" if failed else ""))
    t.add_row(*runs, end_section=True)
    for row in w.rows:
        if row.source == "run" and not details and row.name not in DEFAULT_STANDARD:
            continue
        name, arrow = metric_title(row)
        cells = [Text(name + ("  *" if row.primary else ""), style="bold" if row.source != "run" else "")]
        for vi in order:
            c = row.cells[vi]
            text = Text(fmt_value(c.summary.median))
            if vi != a.baseline_idx and c.comparison:
                text.append("\n" + delta_text(row, vi), style=VERDICT_STYLE.get(c.comparison.verdict, ""))
            cells.append(text)
        t.add_row(*cells)
    return t


def notes(a: Analysis, w, details: bool = False) -> list[Text]:
    out = []
    plain = []  # verified, and nothing to say beyond where malloc was bound
    for vi, v in w.verification.items():
        extra = [n for n in v["notes"] if not n.startswith("malloc and free bound to")]
        if v["status"] == "verified" and not extra and not details:
            plain.append(a.labels[vi])
            continue
        for reason in v["reasons"]:
            out.append(Text(f"{a.labels[vi]}: allocator INEFFECTIVE: {reason}", style="bold red"))
        for note in (v["notes"] if details else extra):
            out.append(Text(f"{a.labels[vi]}: {note}", style="dim"))
    if plain:
        out.insert(0, Text(f"verified (malloc and free bound to the variant's allocator in every process): "
                           f"{', '.join(plain)}", style="dim"))
    for line in process_lines(a, w):
        out.append(Text(line, style="dim"))
    for line in failed_run_lines(a, w):
        out.append(Text(line, style="red"))
    # One line per kind of warning, so that fifty cells with too few runs read as one problem.
    # Without --details, only the primary metric's (and per-variant) warnings: the rest is noise
    # about rows the reader did not ask to see.
    primary = w.primary()
    only = None if details or primary is None else {primary.name}
    for g in warning_groups(a, w, details, limit=None if details else 4, only=only):
        for where, message in g.lines:
            out.append(Text(f"{where}: {message}.", style="bold yellow" if g.serious else "yellow"))
        out.append(Text(f"  -> {g.advice}", style="dim"))
    return out


def recommendation(rec: Recommendation) -> list[Text]:
    out = []
    choices = rec.workloads + ([rec.overall] if len(rec.workloads) > 1 else [])
    for c in choices:
        front = ", ".join(p.label for p in c.points if p.variant_idx in c.front)
        out.append(Text(c.sentence, style="bold green" if c.pick is not None else "bold"))
        out.append(Text(f"  Pareto front of {c.metric} vs peak RSS: {front or 'n/a'}", style="dim"))
        for caveat in c.caveats:
            out.append(Text(f"  caveat: {caveat}", style="yellow"))
        if c.apply:
            out.append(Text(f"  run:     {c.apply.env_line}"))
            out.append(Text("  systemd: " + c.apply.systemd.replace("\n", "\n           ")))
            if c.apply.build:
                out.append(Text(f"  build:   {c.apply.build}"))
    return out


def answer_table(a: Analysis, console: Console) -> None:
    """The answer first: one line per primary comparison (workload, metric, variant, verdict, effect,
    interval), with the deterministic counts that explain it."""
    t = Table(title="[bold]Answer[/] (primary metrics against " + baseline_ran(a) + ")",
              title_justify="left", show_edge=False, box=None, pad_edge=False)
    rows = answers(a)
    # The verdict and its interval are the answer: never cut them; the names fold, the mechanism wraps.
    widest = lambda f: max((len(f(x)) for x in rows), default=0)  # noqa: E731
    t.add_column("workload", overflow="fold", min_width=min(24, widest(lambda x: x.workload)))
    t.add_column("metric", overflow="fold", min_width=min(16, widest(lambda x: x.metric)))
    t.add_column("variant", overflow="fold", min_width=min(20, widest(lambda x: x.variant)))
    t.add_column("verdict", no_wrap=True, min_width=widest(lambda x: x.verdict))
    t.add_column("effect [interval]", no_wrap=True, min_width=widest(lambda x: x.text))
    t.add_column("mechanism (decided)")
    for x in rows:
        t.add_row(x.workload, x.metric, x.variant, Text(x.verdict, style=VERDICT_STYLE.get(x.verdict, "")),
                  x.text, ", ".join(x.mechanism))
    if rows:
        console.print(t)
    # The named program is not what ran: said with the answer, since it changes what the answer means.
    for line in wrapper_answers(a):
        console.print(Text(line, style="bold yellow"))
    for line in bound_answers(a):
        console.print(Text(line))
    if rows:
        console.print()


def fingerprint_table(a: Analysis, w, console: Console) -> None:
    """The workload's allocation fingerprint (alloclab ... --fingerprint), when it was measured."""
    fp_of = fingerprint.for_workload(a.experiment, w.idx)
    if not fp_of:
        return
    order = [a.baseline_idx] + [i for i in range(len(a.labels)) if i != a.baseline_idx]
    t = Table(title=f"Allocation fingerprint: {w.name}", title_justify="left")
    t.add_column("figure", no_wrap=True)
    for vi in order:
        t.add_column(a.labels[vi], justify="right")
    for r in fingerprint.rows(fp_of, order):
        t.add_row(*r)
    console.print(t)
    for line in fingerprint.summary_lines(fp_of, a.labels):
        console.print(Text(line))
    console.print(Text(fingerprint.explanation(fp_of), style="dim"))
    for line in fingerprint.errors(fp_of, a.labels):
        console.print(Text("fingerprint failed: " + line, style="yellow"))
    console.print()


def render(a: Analysis, console: Console, details: bool = False, max_rss_increase: float | None = None) -> None:
    e = a.experiment
    m = e.machine
    warning = baseline_warning(a)
    if warning:
        console.print(Text(warning, style="bold red"))
    console.print(Text(f"experiment {e.id} ({e.row['status']}): {e.row['title']}", style="bold"))
    console.print(Text(f"host {m.get('host')}: {m.get('cpu_model')}, {m.get('usable_cores')} cores, "
                       f"kernel {m.get('kernel')}, glibc {m.get('glibc')}, THP {m.get('thp')}, "
                       f"governor {m.get('governor') or 'n/a'}; {len(a.labels)} variants; {runs_line(a)}",
                       style="dim"))
    answer_table(a, console)
    for w in a.workloads:
        console.print(Group(workload_table(a, w, details), *notes(a, w, details)))
        console.print()
        fingerprint_table(a, w, console)
    console.print(Text("Each cell: median; under it the change against the baseline and its interval: better/worse "
                       "(the interval excludes no change), ≈ equivalent (the whole interval within the margin), "
                       "? undecided (with the runs per variant likely to decide it). * marks the primary metric. "
                       "Statistics: " + statistics_line(a) + ".", style="dim"))
    console.print()
    console.print(Text("Recommendation", style="bold underline"))
    for line in recommendation(recommend(a, max_rss_increase)):
        console.print(line)


def export(a: Analysis, options) -> str:
    """The same report as plain text, for a file."""
    buf = io.StringIO()
    render(a, Console(file=buf, width=160, color_system=None, force_terminal=False), details=options.details,
           max_rss_increase=options.max_rss_increase)
    return buf.getvalue()
