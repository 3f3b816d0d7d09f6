"""The terminal format: the short answer every command prints by default, `alloclab report`
included. One line per comparison, grouped by workload (the variant, its verdict, the effect with
its interval, its peak RSS and, where the console has room, the mechanism: the decided counts that
explain it); what stopped a variant; one line for the verification's outcome; and the
recommendation, a line a workload, then the line across workloads. With `details`, the full
tables instead (report/terminal.py).

Nothing of the answer is cut at any width: a reader at 80 columns must see what one at 160 sees.
The verdict and the effect keep their columns whole; a name wraps between its words inside its
column; the peak RSS's interval, then its column, then the mechanism's column move to a line under
their row where the console has no room for them.
"""

from __future__ import annotations

import io
import re
from collections import Counter

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from alloclab.report.common import (baseline_ran, baseline_warning, count, findings_for, mechanism, metric_title, primary_comparisons, verification_summary,
                                    wrapper_answers)
from alloclab.report.across import sentence as choice_sentence
from alloclab.report.bounds import bound_answers
from alloclab.measure.forward import FORWARDED
from alloclab.report import fingerprint, terminal
from alloclab.stats.estimates import format_comparison
from alloclab.workloads.metrics import PEAK_RSS

VERDICT_STYLE = terminal.VERDICT_STYLE
LEVEL_STYLE = {"ok": "green", "warn": "bold yellow", "bad": "bold red"}
HEADERS = ("variant", "verdict", "effect [interval]", "peak RSS", "mechanism (decided)")
# The notation of the rows, said under them: a first reader cannot guess "?" or "x5.15". Only the
# signs the rows use are explained (a report without a factor has no "x5.15" to explain).
LEGEND_PARTS = (   # (where the rows use the sign, what it means); None: always said
    (r"\?", "? open: no verdict yet"),
    (r"≈", "≈ equivalent: within the margin shown"),
    (None, "+12.3% [lo, hi]: the change against the baseline, its 95% interval"),
    (r"(^|[\s\[])x\d", "x5.15: 5.15 times the baseline's value"),
    (r"\bwaits\b", "waits: voluntary context switches (blocked on a lock or I/O)"),
    (r"\bpreemptions\b", "preemptions: involuntary ones"),
    (r"\bfaults\b", "faults: page faults"),
)
LEGEND = "; ".join(text for _, text in LEGEND_PARTS)


def legend(cells: list[str]) -> str:
    """The legend for rows made of `cells` (effects, peaks and mechanisms as printed)."""
    seen = " ".join(cells)
    return "; ".join(text for used, text in LEGEND_PARTS if used is None or re.search(used, seen))


INDENT, GAP = 2, 2
NAME_FLOOR = 18        # the narrowest the variant column gets before the peak RSS drops its interval
MECHANISM_FLOOR = 16   # the narrowest mechanism column worth showing


def _change(text: str) -> str:
    """The change alone, without its interval: '+162.9% [+141.1, +186.7]' -> '+162.9%'."""
    return text.split(" [", 1)[0]


def _widths(names: list[str], verdicts: list[str], effects: list[str], peaks: list[str], width: int):
    """(variant, verdict, effect[, peak]) widths, whether the peak keeps its interval in its column, and
    the mechanism's width (0: no room for it). The variant's column is never narrower than its longest
    word, so a name wraps between words and every word stays whole; what has no room goes under its row."""
    fixed = max(map(cell_len, verdicts)), max(map(cell_len, effects))
    room = width - INDENT - sum(fixed) - 2 * GAP     # the name, and the columns after it with their gaps
    natural = max(map(cell_len, names))
    word = min(natural, max(cell_len(w) for n in names for w in n.split() or [""]))
    full = max(map(cell_len, peaks))
    short = max(cell_len(_change(p)) for p in peaks)
    if room - GAP - full >= max(word, min(natural, NAME_FLOOR)):
        peak, whole = full, True
    elif room - GAP - short >= word:
        peak, whole = short, False
    else:
        peak, whole = 0, False
    after = GAP + peak if peak else 0
    name = max(word, min(natural, room - after))
    mech = room - name - after - GAP
    return (name, *fixed) + ((peak,) if peak else ()), whole, (mech if mech >= MECHANISM_FLOOR else 0)


def _row(cells: list[Text], widths: tuple[int, ...], console: Console) -> list[Text]:
    """One row as lines: each cell padded to its column, a cell longer than its column wrapped inside
    it (between words), never cut; the last cell not padded."""
    wrapped = [cell.wrap(console, w, overflow="fold") for cell, w in zip(cells, widths)]
    out = []
    for k in range(max(len(lines) for lines in wrapped)):
        line = Text(" " * INDENT)
        for i, (lines, w) in enumerate(zip(wrapped, widths)):
            last = i == len(widths) - 1
            piece = lines[k].copy() if k < len(lines) else Text("")
            piece.rstrip()
            if not last:
                piece.pad_right(w - cell_len(piece.plain))
            line.append_text(piece)
            if not last:
                line.append(" " * GAP)
        line.rstrip()
        out.append(line)
    return out


def _indented(console: Console, text: Text, indent: int) -> None:
    """`text` wrapped between words under an indent, each line of it indented."""
    for line in text.wrap(console, max(1, console.width - indent), overflow="fold"):
        line.rstrip()
        console.print(Text(" " * indent) + line, no_wrap=True, crop=False)


def answer_lines(a, console: Console) -> str:
    """The rows of the answer; returns their legend ("" where there are none)."""
    rows = []
    for w, row, vi, c in primary_comparisons(a):
        peak = w.comparison(PEAK_RSS, vi)
        why = [m for m in mechanism(w, vi) if not m.startswith("peak RSS")]
        why += fingerprint.mechanism(a.experiment, w.idx, vi, a.baseline_idx, a.labels)
        rows.append((w, row, a.labels[vi], c.verdict, terminal.short_effect(format_comparison(c)),
                     terminal.short_effect(format_comparison(peak)) if peak else "n/a", ", ".join(why)))
    if not rows:
        return ""
    widths, whole, mech = _widths([HEADERS[0], *(r[2] for r in rows)], [HEADERS[1], *(r[3] for r in rows)],
                                  [HEADERS[2], *(r[4] for r in rows)], [HEADERS[3], *(r[5] for r in rows)],
                                  console.width)
    peaked = len(widths) == 4
    widths += (mech,) if mech else ()
    heads = list(HEADERS[:3]) + ([HEADERS[3]] if peaked else []) + ([HEADERS[4]] if mech else [])
    for line in _row([Text(h, style="bold") for h in heads], widths, console):
        console.print(line, no_wrap=True, crop=False)
    shown = None
    for w, row, label, verdict, effect, peak, why in rows:
        if (w.idx, row.name) != shown:
            shown = (w.idx, row.name)
            console.print(Text(f"{w.name}: {metric_title(row)[0]}", style="bold"))
        style = VERDICT_STYLE.get(verdict, "")
        cells = [Text(label), Text(verdict, style=style), Text(effect, style=style)]
        cells += [Text(peak if whole else _change(peak))] if peaked else []
        cells += [Text(why)] if mech else []
        for line in _row(cells, widths, console):
            console.print(line, no_wrap=True, crop=False)
        # What the columns had no room for, under its row: a narrow terminal drops no word.
        under = ([f"peak RSS {peak}"] if not whole and peak != _change(peak) or not peaked else []) + \
            ([f"mechanism (decided): {why}"] if why and not mech else [])
        if under:
            _indented(console, Text("; ".join(under), style="dim"), INDENT + 2)
    return legend([x for r in rows for x in r[4:]])


def problems(a) -> list[Text]:
    """What the reader must not miss: an allocator not in effect, runs that failed, a fingerprint run
    that failed (the program's failure, or alloclab's where its timed runs did not fail), a program
    that links an allocator of its own, other work that took CPU during the runs (it widens every
    interval, and can bias one variant). Said once for the experiment where it holds for several
    workloads: a variant not in effect, a busy host."""
    out = []
    for w in a.workloads:
        linked = next((n for v in w.verification.values() for n in v.notes if FORWARDED in n), None)
        if linked is not None:
            program_links = linked.split(": ", 1)[0]
            out.append(Text(f"{w.name}: {program_links}: each glibc variant ran with glibc's malloc forced in (alloclab's "
                            f"forwarding preload), so the comparison is against glibc, not the allocator the program "
                            f"links; its own: the variant glibc-linked", style="yellow"))
        for vi, fp in sorted(fingerprint.for_workload(a.experiment, w.idx).items()):
            if not fp.failed:
                continue
            timed_ok = not w.runs_failed.get(vi) and w.runs_total.get(vi, 0) > 0
            whose = (f"its {w.runs_total[vi]} timed runs did not: a failure of alloclab's interposer, not of the program "
                     f"(the timings stand; the memory books are missing)") if timed_ok else "its timed runs failed too"
            out.append(Text(f"{w.name}: {a.labels[vi]}: the fingerprint run failed ({fp.error}); {whose}",
                            style="yellow" if timed_ok else "red"))
        for vi, failed in w.runs_failed.items():
            if failed:
                out.append(Text(f"{w.name}: {a.labels[vi]}: {len(failed)} of {w.runs_total[vi]} runs failed "
                                f"({failed[-1].error or failed[-1].status})", style="red"))
    return _not_in_effect(a) + out + _loaded(a)


def _where(a, names: list[str]) -> str:
    return "" if len(names) == len(a.workloads) else f" ({', '.join(names)})"


def _not_in_effect(a) -> list[Text]:
    """A line a variant not in effect, its reasons once each (the process a reason names differs
    between workloads; the reason does not), less the one the baseline's warning already gave."""
    said = baseline_warning(a) or ""
    reasons: dict[int, dict[str, None]] = {}
    where: dict[int, list[str]] = {}
    for w in a.workloads:
        for vi, v in w.verification.items():
            if v.reasons:
                where.setdefault(vi, []).append(w.name)
            for reason in v.reasons:
                if reason not in said:
                    reasons.setdefault(vi, {})[re.sub(r"^in process \d+, ", "", reason)] = None
    return [Text(f"{a.labels[vi]}: allocator INEFFECTIVE{_where(a, where[vi])}: {'; '.join(rs)}", style="bold red")
            for vi, rs in reasons.items() if rs]


def _loaded(a) -> list[Text]:
    """One line for a busy host: the busiest variant's reading, and where else it was seen."""
    seen = [(w.name, vi, f) for w in a.workloads for vi, _, f in findings_for(w, set()) if f.code == "high-load"]
    if not seen:
        return []
    name, vi, f = seen[0]
    others = [f"{n} ({count(c, 'variant')})" for n, c in Counter(n for n, _, _ in seen).items()]
    said = f.message.replace(" during the runs (median ", " beside the runs (median ").rstrip(")")
    return [Text(f"{said[0].upper()}{said[1:]}, in {name}'s {a.labels[vi]} runs; in all: "
                 f"{', '.join(others)})", style="yellow")]


def render(r, console: Console, details: bool = False) -> None:
    if details:
        terminal.render(r, console, details=True)
        return
    a = r.analysis
    e = a.experiment
    terminal.heading(r, console, brief=True)
    console.print(Text.assemble(("Answer", "bold"), f" (each comparison against {baseline_ran(a)}; "
                                                    f"full tables: alloclab report {e.id} --details)"))
    said = answer_lines(a, console)
    if said:
        _indented(console, Text(said, style="dim"), INDENT)
    for line in wrapper_answers(a) + bound_answers(a):
        console.print(Text(line, style="yellow"))
    for line in problems(a) + [Text(x) for w in a.workloads for x in fingerprint.split_lines(
            fingerprint.for_workload(e, w.idx), a.labels)]:
        console.print(line)
    level, verified = verification_summary(a)
    console.print(Text(verified, style=LEVEL_STYLE[level]))
    if r.tune is not None:
        return   # a tune race: tune's answer, above, is the answer (its goals and its memory limit)
    rec = r.recommendation
    several = len(rec.workloads) > 1
    # The answer first, then how to apply it, then each workload's own (where no workload has a
    # pick, the line across them says what all of theirs do, once).
    last = rec.overall if several else rec.workloads[0]
    console.print(Text.assemble(("Recommendation:", "bold underline"), " ",
                                (choice_sentence(last), "bold green" if last.pick is not None else "bold")))
    if last.apply:
        console.print(Text(f"  run:     {last.apply.env_line}"), soft_wrap=True)   # pasted: never broken
        if last.apply.build:
            console.print(Text(f"  build:   {last.apply.build}"))
    for c in rec.workloads if several and any(c.pick is not None for c in rec.workloads) else []:
        _indented(console, Text(c.sentence, style="green" if c.pick is not None else ""), INDENT)


def export(r, options) -> str:
    """The same as plain text, for a file (`-o answer.txt`), at unlimited width: nothing cut."""
    from alloclab.report import file_console
    buf = io.StringIO()
    render(r, file_console(buf), details=options.details)
    return buf.getvalue()
