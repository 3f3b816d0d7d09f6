"""Markdown's default: the short answer for a patch mail, as the terminal's is for a screen. The
host in a paragraph, the verification's outcome, what stopped or warned, the recommendation (the
answer across workloads and how to apply it), then one compact table per workload: a row a variant
with its verdict, effect and interval, peak RSS and the counts that explain it, its pick marked.
`--details` gives the full tables (report/markdown.py).

Prose is wrapped between words at WIDTH (a Markdown paragraph reads the same wrapped); a table row
holds short cells only (the effect as the terminal's column shows it), so that no line is long."""

from __future__ import annotations

import textwrap

from alloclab.report import terminal
from alloclab.report.across import sentence as choice_sentence
from alloclab.report.bounds import bound_answers
from alloclab.report.common import (baseline_ran, baseline_warning, mechanism, metric_title, primary_comparisons,
                                    runs_line, verification_summary, wrapper_answers)
from alloclab.report.md_table import table
from alloclab.report.terminal_brief import LEGEND, problems
from alloclab.stats.estimates import format_comparison
from alloclab.workloads.metrics import PEAK_RSS

WIDTH = 160   # prose lines; a plain-text mail client shows them whole


def wrap(text: str, prefix: str = "") -> list[str]:
    """`text` as lines of at most WIDTH, broken between words only (a path or a flag stays whole)."""
    return textwrap.wrap(text, WIDTH, initial_indent=prefix, subsequent_indent=" " * len(prefix),
                         break_long_words=False, break_on_hyphens=False) or [prefix.rstrip()]


def _effect(c) -> str:
    return terminal.short_effect(format_comparison(c)) if c is not None else "n/a"


def workload_tables(a, picks: dict[int, int]) -> list[str]:
    """One table a workload (a service's clients: one a primary metric), its name and metric heading
    the first column, a row a variant compared; the workload's pick, from `picks`, marked "(use)"."""
    out, rows, head = [], [], None
    for w, row, vi, c in list(primary_comparisons(a)) + [(None, None, None, None)]:
        key = (w.idx, row.name) if w is not None else None
        if head is not None and key != head[0]:
            out += table([head[1], "verdict", "effect [interval]", "peak RSS", "mechanism (decided)"], rows) + [""]
            rows = []
        if w is None:
            break
        if head is None or key != head[0]:
            arrow = "higher is better" if row.higher_is_better else "lower is better"
            head = (key, f"{w.name}: {metric_title(row)[0]}, {arrow}")
        why = [m for m in mechanism(w, vi) if not m.startswith("peak RSS")]
        label = f"**{a.labels[vi]}** (use)" if picks.get(w.idx) == vi else a.labels[vi]
        label += " (**INEFFECTIVE**)" if w.verification[vi].status == "ineffective" else ""
        verdict = f"**{c.verdict}**" if c.verdict in ("better", "worse") else c.verdict
        rows.append([label, verdict, _effect(c), _effect(w.comparison(PEAK_RSS, vi)), ", ".join(why)])
    return out


def _apply(how) -> list[str]:
    """The line to paste, fenced: never wrapped, and nothing in it read as markup."""
    return ["```sh", how.env_line, "```"] + (wrap(f"At build time: {how.build}.") if how.build else [])


def _answer(r) -> list[str]:
    """The workloads without a pick in their own words (a pick is marked in its table, its sentence
    with its reasons and costs is --details'), then the answer across workloads and how to apply it."""
    rec = r.recommendation
    several = len(rec.workloads) > 1
    out = [x for c in (rec.workloads if several else []) if c.pick is None for x in wrap(choice_sentence(c), "- ")]
    out += [""] if out else []   # a paragraph right under a list would read as its last item's
    last = rec.overall if several else rec.workloads[0]
    sentence = choice_sentence(last)
    out += wrap(f"**{sentence}**" if last.pick is not None else sentence)
    out += [""] + [x for caveat in last.caveats for x in wrap(f"caveat: {caveat}", "- ")]
    out += ([""] if last.caveats else []) + (_apply(last.apply) + [""] if last.apply else [])
    return out


def export(r, options) -> str:
    a = r.analysis
    e, m = a.experiment, a.experiment.machine
    out = []
    warning = baseline_warning(a)
    if warning:
        out += wrap(f"**{warning}**") + [""]
    versions = ", ".join(dict.fromkeys(f"{v.allocator} {v.version}" for v in e.variants if v.allocator and v.version))
    out += [f"## alloclab: {e.row.title}", ""]
    out += wrap(f"Experiment {e.id} ({e.row.status}) on {m.host}: {m.cpu_model}, {m.usable_cores} cores, kernel "
                f"{m.kernel}; {versions}; {len(a.labels)} variants; {runs_line(a)}.") + [""]
    level, sentence = verification_summary(a)
    out += wrap(f"**{sentence}**" if level != "ok" else sentence)
    out += [x for line in problems(a) for x in wrap(line.plain, "- ")]
    out += [x for line in wrapper_answers(a) + bound_answers(a) for x in wrap(f"{line}.", "- ")]
    out.append("")
    if r.tune is not None:
        from alloclab.report import tune   # a tune race's answer is the answer
        out += [tune.markdown(r.tune, tune.title(e)).rstrip("\n"), ""]
        picks = {}
    else:
        out += ["### Recommendation", ""] + _answer(r)
        picks = {w.idx: c.pick for c, w in zip(r.recommendation.workloads, a.workloads) if c.pick is not None}
    tables = workload_tables(a, picks)
    if tables:
        out += [f"### Answer (each comparison against {baseline_ran(a)})", ""] + tables
        out += wrap(LEGEND + ".") + [""]
    out += wrap(f"Every measure, the warnings, the verification's notes and how to apply each pick: "
                f"`alloclab report {e.id} -f md --details`.")
    return "\n".join(out).rstrip() + "\n"
