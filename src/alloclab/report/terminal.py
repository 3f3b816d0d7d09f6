"""The full tables (`--details`): one table per workload, in the shape engineers paste into patch mails.
The terminal format itself is report/terminal_brief.py, which renders these under --details."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from rich import box
from rich.cells import cell_len
from rich.console import Console, Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from alloclab.stats.analysis import DEFAULT_STANDARD, Analysis
from alloclab.stats.estimates import format_comparison
from alloclab.stats.recommend import Recommendation
from alloclab.report import fingerprint
from alloclab.report.common import (answers, baseline_ran, baseline_warning, runs_line, delta_text, failed_run_lines,
    fmt_value, metric_title, process_lines, statistics_line, stored_note, warning_groups, wrapper_answers)
from alloclab.report.across import sentence as choice_sentence
from alloclab.report.bounds import bound_answers

if TYPE_CHECKING:
    from alloclab.stats.results import Results

STATUS_STYLE = {"verified": "green", "ineffective": "bold red", "unknown": "yellow"}
VERDICT_STYLE = {"better": "green", "worse": "red", "equivalent": "cyan", "undecided": "yellow"}


def workload_table(a: Analysis, w, details: bool = False) -> Table:
    order = [a.baseline_idx] + [i for i in range(len(a.labels)) if i != a.baseline_idx]
    t = Table(title=Text(w.name, style="bold"), title_justify="left", show_lines=False)
    t.add_column("metric", no_wrap=True)
    for vi in order:
        t.add_column(a.labels[vi] + (" (baseline)" if vi == a.baseline_idx else ""), justify="right")
    status = [Text("allocator")]
    for vi in order:
        s = w.verification[vi].status
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
        extra = [n for n in v.notes if not n.startswith("malloc and free bound to")]
        if v.status == "verified" and not extra and not details:
            plain.append(a.labels[vi])
            continue
        for reason in v.reasons:
            out.append(Text(f"{a.labels[vi]}: allocator INEFFECTIVE: {reason}", style="bold red"))
        for note in (v.notes if details else extra):
            out.append(Text(f"{a.labels[vi]}: {stored_note(note)}", style="dim"))
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
        out.append(Text(choice_sentence(c), style="bold green" if c.pick is not None else "bold"))
        out.append(Text(f"  Pareto front of {c.metric} vs peak RSS: {front or 'n/a'}", style="dim"))
        for caveat in c.caveats:
            out.append(Text(f"  caveat: {caveat}", style="yellow"))
        if c.apply:
            out.append(Text(f"  run:     {c.apply.env_line}"))
            out.append(Text("  systemd: " + c.apply.systemd.replace("\n", "\n           ")))
            if c.apply.build:
                out.append(Text(f"  build:   {c.apply.build}"))
    return out


# The answer's layout: one line per comparison with its names, verdict and the effect's short form
# (change and interval); under it, indented and wrapped to the console, what does not fit a column
# at 80 columns: the effect's full sentence where it is longer, and the mechanism.
EFFECT_CAP = 26        # the longest effect kept whole in its column ("≈ within ±2% [-0.8, +1.1]")
NAME_FLOOR = 8         # the narrowest a name column folds to
NAME_WORD = 20         # the longest word a name column widens for, to wrap between words
DETAIL_INDENT = 4
ANSWER_HEADERS = ("workload", "metric", "variant", "verdict", "effect [interval]")


def short_effect(text: str, cap: int = EFFECT_CAP) -> str:
    """The effect as its column shows it: the whole text when short, else the change and its
    interval ("? -2.8%, no difference beyond [-10.8, +5.9]; a verdict would need ~639 more runs"
    gives "? -2.8% [-10.8, +5.9]"); the whole text is then shown under the row."""
    if len(text) <= cap:
        return text
    interval = re.search(r"\[[^\]]*\]", text)
    cut, depth = len(text), 0
    for i, ch in enumerate(text):
        depth += (ch == "[") - (ch == "]")
        if depth == 0 and (text.startswith(", ", i) or text.startswith("; ", i)):
            cut = i
            break
    if interval:
        cut = min(cut, interval.end())
    head = text[:cut].rstrip(" ,;")
    if interval and "[" not in head:
        head += " " + interval.group()
    return head


def _fill(want: list[int], room: int, start: list[int], fair: bool) -> list[int]:
    """Share `room` among columns that need `want` each, on top of `start`, the smallest needs
    first: met whole while the room lasts, or (`fair`) to equal shares of what is left."""
    widths = list(start)
    left = sorted(range(len(want)), key=lambda j: want[j] - start[j])
    room -= sum(start)
    while left:
        i = left.pop(0)
        share = -(-room // (len(left) + 1)) if fair else room
        extra = max(0, min(want[i] - start[i], share))
        widths[i] += extra
        room -= extra
    return widths


def _name_widths(names: list[list[str]], room: int) -> list[int]:
    """Widths of the name columns sharing `room`: each whole where it fits, else wide enough for
    its longest word (to NAME_WORD at most) so that it wraps between words, else folded to equal
    shares (never under NAME_FLOOR)."""
    natural = [max(cell_len(v) for v in col) for col in names]
    words = [min(n, max(NAME_FLOOR, min(NAME_WORD, max(cell_len(w) for v in col for w in v.split() or [""]))))
             for n, col in zip(natural, names)]
    if sum(words) <= room:
        return _fill(natural, room, words, fair=False)
    floor = [min(n, NAME_FLOOR) for n in natural]
    return _fill(words, max(room, sum(floor)), floor, fair=True)


def _answer_row(cells: list[Text], widths: list[int]) -> Table:
    g = Table.grid(padding=(0, 2, 0, 0))
    for w in widths:
        g.add_column(width=w, overflow="fold")
    g.add_row(*cells)
    return g


def answer_table(a: Analysis, console: Console) -> None:
    """The answer first: one line per primary comparison (workload, metric, variant, verdict, effect
    and interval), under it the effect's full sentence where it is long and the mechanism (the
    decided counts that explain it), so every row reads whole at 80 columns as at 160."""
    rows = answers(a)
    if rows:
        effects = [short_effect(x.text) for x in rows]
        columns = [[x.workload for x in rows], [x.metric for x in rows], [x.variant for x in rows],
                   [x.verdict for x in rows], effects]
        columns = [[h, *col] for h, col in zip(ANSWER_HEADERS, columns)]
        # The verdict and its interval are the answer: never cut them; the names wrap.
        fixed = [max(cell_len(v) for v in col) for col in columns[3:]]
        room = console.width - sum(fixed) - 2 * (len(columns) - 1)
        widths = _name_widths(columns[:3], room) + fixed
        parts = [Text.assemble(("Answer", "bold"), f" (primary metrics against {baseline_ran(a)})"),
                 _answer_row([Text(h, style="bold") for h in ANSWER_HEADERS], widths)]
        for x, effect in zip(rows, effects):
            style = VERDICT_STYLE.get(x.verdict, "")
            parts.append(_answer_row([Text(x.workload), Text(x.metric), Text(x.variant),
                                      Text(x.verdict, style=style), Text(effect, style=style)], widths))
            details = []
            if effect != x.text:
                details.append(Text.assemble(("effect: ", "dim"), (x.text, style)))
            if x.mechanism:
                details.append(Text.assemble(("mechanism (decided): ", "dim"), ", ".join(x.mechanism)))
            parts += [Padding(d, (0, 0, 0, DETAIL_INDENT), expand=False) for d in details]
        console.print(Group(*parts))
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


def heading(r: Results, console: Console, brief: bool = False) -> None:
    """What comes before the answer, in the full report and the brief one alike: tune's answer of a
    race, the baseline's warning, the experiment and its host (brief: without THP and governor)."""
    a = r.analysis
    e = a.experiment
    m = e.machine
    if r.tune is not None:
        from alloclab.report import tune   # a tune race's: the other reports never load it
        tune.render(r.tune, console, title=tune.title(e))
        console.print()
    warning = baseline_warning(a)
    if warning:
        console.print(Text(warning, style="bold red"))
    console.print(Text(f"experiment {e.id} ({e.row.status}): {e.row.title}", style="bold"))
    memory = "" if brief else f", THP {m.thp}, governor {m.governor or 'n/a'}"
    console.print(Text(f"host {m.host}: {m.cpu_model}, {m.usable_cores} cores, kernel {m.kernel}, glibc {m.glibc}"
                       f"{memory}; {len(a.labels)} variants; {runs_line(a, brief)}", style="dim"))


def render(r: Results, console: Console, details: bool = False) -> None:
    a = r.analysis
    heading(r, console)
    answer_table(a, console)
    for w in a.workloads:
        console.print(Group(workload_table(a, w, details), *notes(a, w, details)))
        console.print()
        fingerprint_table(a, w, console)
    console.print(Text("Each cell: median; under it the change against the baseline and its interval: better/worse "
                       "(the interval excludes no change), ≈ equivalent (the whole interval within the margin), "
                       "? undecided (with the runs per variant likely to decide it). * marks the primary metric. "
                       "Statistics: " + statistics_line(a) + ".", style="dim"))
    if r.tune is not None:
        return   # a tune race: tune's answer, above, is the answer
    console.print()
    console.print(Text("Recommendation", style="bold underline"))
    for line in recommendation(r.recommendation):
        console.print(line)


# --- suite's summary across workloads ---------------------------------------------------------

def _ratio_text(g) -> str:
    if g is None or not math.isfinite(g.ratio):
        return "n/a"
    return f"{g.ratio:.3f}x [{g.ci_low:.3f}, {g.ci_high:.3f}]"


def summary(r: Results, console: Console) -> None:
    """suite --details: per variant across the workloads (r.summary), where one workload carries a
    geomean, then each workload's winner (r.winners)."""
    a = r.analysis
    t = Table(title=Text.assemble(("Summary across workloads", "bold"), f" (baseline: {a.labels[a.baseline_idx]})"),
              title_justify="left", box=box.HEAVY_HEAD)
    for col in ("variant", "speed vs baseline (geomean, >1 faster)", "peak RSS vs baseline (geomean)",
                "significantly better on", "significantly worse on", "allocator"):
        t.add_column(col)
    for s in r.summary:
        status = "verified" if s.statuses == {"verified"} else ", ".join(sorted(s.statuses))
        t.add_row(s.label, _ratio_text(s.speed), _ratio_text(s.memory), ", ".join(s.better) or "-",
                  ", ".join(s.worse) or "-", status)
    console.print(t)
    for line in (r.carried or {}).values():
        console.print(Text(f"  {line}: no pick rests on it", style="yellow"))
    for name, label, row in r.winners:
        if row is None:
            continue
        if label is None:
            console.print(Text(f"{name}: no variant is significantly better than the baseline on {row.name}."))
            continue
        vi = a.labels.index(label)
        console.print(Text.assemble(f"{name}: ", (label, "bold"), f" wins on {row.name} ({row.unit}): "
                                    f"{format_comparison(row.comparison(vi))}"))
