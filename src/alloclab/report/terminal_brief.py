"""The terminal's answer as a measuring command prints it: a screen, not a report. One line per
comparison (the workload's table): the variant, its verdict, the effect with its interval, its peak
RSS, and the mechanism (the decided counts that explain it); then what stopped a variant, and the
recommendation in a line a workload. `--details`, `alloclab report` and every file format give the
full tables (report/terminal.py)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from alloclab.report.common import findings_for, mechanism, metric_title, primary_comparisons, wrapper_answers
from alloclab.report.bounds import bound_answers
from alloclab.report import fingerprint
from alloclab.stats.estimates import format_comparison
from alloclab.workloads.metrics import PEAK_RSS

VERDICT_STYLE = {"better": "green", "worse": "red", "equivalent": "cyan", "undecided": "yellow"}


def _short(text: str) -> str:
    from alloclab.report.terminal import short_effect
    return short_effect(text, cap=26)


def answer_lines(a, console: Console) -> None:
    t = Table.grid(padding=(0, 2, 0, 0))
    # The verdict and the effect are the answer: their columns are never cut; the names are.
    for name, kw in (("workload", {"max_width": 32}), ("metric", {"max_width": 16}), ("variant", {"max_width": 30}),
                     ("verdict", {"min_width": 10}), ("effect [interval]", {"min_width": 26}),
                     ("peak RSS", {"min_width": 22, "max_width": 26}), ("mechanism (decided)", {})):
        t.add_column(name, overflow="ellipsis", no_wrap=True, **kw)
    t.add_row(*(Text(h, style="bold") for h in ("workload", "metric", "variant", "verdict", "effect [interval]",
                                                 "peak RSS", "mechanism (decided)")))
    many = len(a.workloads) > 1
    for w, row, vi, c in primary_comparisons(a):
        style = VERDICT_STYLE.get(c.verdict, "")
        peak = w.comparison(PEAK_RSS, vi)
        why = [m for m in mechanism(w, vi) if not m.startswith("peak RSS")]
        why += fingerprint.mechanism(a.experiment, w.idx, vi, a.baseline_idx, a.labels)
        t.add_row(Text(w.name if many else w.name[:28]), Text(metric_title(row)[0]), Text(a.labels[vi]),
                  Text(c.verdict, style=style), Text(_short(format_comparison(c)), style=style),
                  Text(_short(format_comparison(peak)) if peak else "n/a"), Text(", ".join(why)))
    console.print(t)


def problems(a, w) -> list[Text]:
    """What the reader must not miss: an allocator not in effect, runs that failed, other work that
    took CPU during the runs (it widens every interval, and can bias one variant)."""
    out = []
    # One line a workload, not a variant: a busy host is busy for all of them.
    loaded = [(vi, f) for vi, _, f in findings_for(w, set()) if f.code == "high-load"]
    if loaded:
        vi, f = loaded[0]
        more = f" (and in {len(loaded) - 1} other variants' runs)" if len(loaded) > 1 else ""
        out.append(Text(f"{w.name}: {a.labels[vi]}: {f.message}{more}", style="yellow"))
    for vi, v in w.verification.items():
        for reason in v.reasons:
            out.append(Text(f"{w.name}: {a.labels[vi]}: allocator INEFFECTIVE: {reason}", style="bold red"))
    for vi, failed in w.runs_failed.items():
        if failed:
            out.append(Text(f"{w.name}: {a.labels[vi]}: {len(failed)} of {w.runs_total[vi]} runs failed "
                            f"({failed[-1].error or failed[-1].status})", style="red"))
    return out


def render(r, console: Console) -> None:
    from alloclab.report.terminal import heading
    a = r.analysis
    e = a.experiment
    heading(r, console, brief=True)
    console.print(Text.assemble(("Answer", "bold"), f" (each comparison against {a.labels[a.baseline_idx]}; "
                                                    f"full tables: --details, or alloclab report {e.id})"))
    answer_lines(a, console)
    for line in wrapper_answers(a) + bound_answers(a):
        console.print(Text(line, style="yellow"))
    for w in a.workloads:
        for line in problems(a, w) + [Text(x) for x in fingerprint.split_lines(
                fingerprint.for_workload(e, w.idx), a.labels)]:
            console.print(line)
    console.print()
    console.print(Text("Recommendation", style="bold underline"))
    rec = r.recommendation
    several = len(rec.workloads) > 1
    for c in rec.workloads if several else []:
        console.print(Text(f"  {c.sentence}", style="green" if c.pick is not None else ""), overflow="ellipsis",
                      no_wrap=True, crop=True)
    last = rec.overall if several else rec.workloads[0]
    console.print(Text(last.sentence, style="bold green" if last.pick is not None else "bold"))
    if last.apply:
        console.print(Text(f"  run:     {last.apply.env_line}"))
        if last.apply.build:
            console.print(Text(f"  build:   {last.apply.build}"))
