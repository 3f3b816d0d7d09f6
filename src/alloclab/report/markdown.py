"""Markdown for a patch mail or a pull request, with `--details` (the default is the short answer,
markdown_brief.py): the host and version lines first, then one table per workload with every
standard measure, its warnings and verification, and the recommendation with how to apply it.

Columns are padded so the raw text reads as well in a plain-text mail as rendered."""

from __future__ import annotations

from typing import TYPE_CHECKING

from alloclab.stats.analysis import Analysis
from alloclab.report import fingerprint
from alloclab.stats.recommend import Choice
from alloclab.report.common import (allocator_lines, answers, baseline_ran, baseline_warning, failed_run_lines,
    fmt_value, full_delta, metadata, process_lines, shown_rows, stored_note, variant_order, verdict_word, verification_rows,
    verification_summary, warning_groups, wrapper_answers)
from alloclab.report.across import sentence as choice_sentence
from alloclab.report.bounds import bound_answers
from alloclab.report.md_table import table

if TYPE_CHECKING:
    from alloclab.stats.results import Results

SUFFIX = ".md"


def header(a: Analysis) -> list[str]:
    items = []
    for key, value in metadata(a):
        items.append((key, value))
        if key == "glibc":  # the allocators read best right under the C library they replace
            items += [("allocators" if i == 0 else "", line) for i, line in enumerate(allocator_lines(a))]
    width = max(len(k) for k, _ in items) + 1
    lines = [f"{(k + ':' if k else '').ljust(width)} {v}" for k, v in items]
    return ["```text", *lines, "```"]


def workload_section(a: Analysis, w, details: bool) -> list[str]:
    order = variant_order(a)
    out = [f"### {w.name}", "", "Command: `" + " ".join(w.argv).replace("`", "'") + "`", ""]
    head = ["metric"] + [a.labels[vi] + (" (baseline)" if vi == a.baseline_idx else "") for vi in order]
    rows = [["allocator"] + [w.verification[vi].status.replace("ineffective", "**INEFFECTIVE**")
                             for vi in order],
            ["runs ok/total"] + [f"{w.runs_total[vi] - len(w.runs_failed[vi])}/{w.runs_total[vi]}" for vi in order]]
    for row in shown_rows(w, details):
        arrow = "higher is better" if row.higher_is_better else "lower is better"
        name = f"{row.name}{' (' + row.unit + ')' if row.unit else ''}{' *' if row.primary else ''}, {arrow}"
        cells = [name]
        for vi in order:
            c = row.cells[vi]
            text = fmt_value(c.summary.median)
            if vi != a.baseline_idx and c.comparison:
                verdict = verdict_word(c.comparison)
                text += f" ({full_delta(c.comparison)} {'**' + verdict + '**' if verdict in ('better', 'worse') else verdict})"
            cells.append(text)
        rows.append(cells)
    out += table(head, rows)
    out.append("")
    out.append("Verification:")
    out.append("")
    for v in verification_rows(a, w):
        status = "**INEFFECTIVE**" if v.status == "ineffective" else v.status
        detail = "; ".join(v.reasons + [stored_note(n) for n in v.notes])
        out.append(f"- {v.label}: {status}" + (f". {detail}" if detail else ""))
    out += [f"- {line}" for line in process_lines(a, w)]
    out += fingerprint_section(a, w, order)
    failed = failed_run_lines(a, w)
    groups = warning_groups(a, w, details, limit=8)
    if failed or groups:
        out += ["", "Warnings:", ""]
        for line in failed:
            first, *rest = line.split("\n")
            out.append(f"- **failed run** {first}")
            out += [f"  `{r.strip()}`" for r in rest]
        for g in groups:
            out.append(f"- **{g.code}**: {g.advice}.")
            out += [f"  - {where + ': ' if where else ''}{message}" for where, message in g.lines]
    out.append("")
    return out


def fingerprint_section(a: Analysis, w, order: list[int]) -> list[str]:
    fp_of = fingerprint.for_workload(a.experiment, w.idx)
    if not fp_of:
        return []
    out = ["", "Allocation fingerprint:", ""]
    out += table(["figure"] + [a.labels[vi] for vi in order], fingerprint.rows(fp_of, order))
    out += [""] + [f"{line}.\n" for line in fingerprint.summary_lines(fp_of, a.labels)]
    if split := fingerprint.split_rows(fp_of, order, a.labels):
        out += ["", "Where the memory goes (resident MiB, by the allocator's own books; "
                "docs/fingerprint.md says what each part is):", ""]
        out += table(fingerprint.SPLIT_HEADER, split)
    out += [fingerprint.explanation(fp_of)]
    out += [f"- fingerprint failed: {line}" for line in fingerprint.errors(fp_of, a.labels)]
    return out


def recommendation_section(choices: list[Choice], budget: float | None) -> list[str]:
    out = ["## Recommendation", ""]
    if budget is not None:
        out += [f"Memory budget: peak RSS at most {budget * 100:+g}% against the baseline.", ""]
    for c in choices:
        front = ", ".join(p.label for p in c.points if p.variant_idx in c.front) or "n/a"
        out.append(f"**{choice_sentence(c)}**" if c.pick is not None else choice_sentence(c))
        out += ["", f"Pareto front of {c.metric} versus peak RSS ({c.scope}): {front}.", ""]
        for caveat in c.caveats:
            out.append(f"- caveat: {caveat}")
        if c.apply:
            out += ["How to apply:", "", "```sh", c.apply.env_line, "```", "", "```ini", c.apply.systemd, "```", ""]
            if c.apply.build:
                out += [f"At build time: {c.apply.build}.", ""]
    return out


def export(r: Results, options) -> str:
    if not options.details:   # the short answer for a mail (markdown_brief.py); the full tables on request
        from alloclab.report import markdown_brief
        return markdown_brief.export(r, options)
    a = r.analysis
    e = a.experiment
    level, sentence = verification_summary(a)
    warning = baseline_warning(a)
    out = ([f"**{warning}**", ""] if warning else []) + [f"## alloclab: {e.row.title}", "", *header(a), "",
           ("**" + sentence + "**") if level != "ok" else sentence, ""]
    if r.tune is not None:
        from alloclab.report import tune   # a tune race's: the other reports never load it
        out += [tune.markdown(r.tune, tune.title(e)).rstrip("\n"), ""]
    rows = answers(a)
    if rows:
        out += ["### Answer", ""] + ([f"Primary metrics against {baseline_ran(a)}.", ""] if warning else [])
        out += table(["workload", "metric", "variant", "verdict", "effect [interval]", "mechanism (decided)"],
                     [[x.workload, x.metric, x.variant, f"**{x.verdict}**" if x.verdict in ("better", "worse")
                       else x.verdict, x.text, ", ".join(x.mechanism)] for x in rows])
        out.append("")
    out += [f"**{line}.**\n" for line in wrapper_answers(a)]
    out += [f"{line}.\n" for line in bound_answers(a)]
    out.append("Each cell: median, then the change against the baseline with its interval, the adjusted p and "
               "the verdict: better/worse (the interval excludes no change), equivalent (the whole interval "
               "within the margin), undecided (with the runs per variant likely to decide it). * marks the "
               "primary metric.")
    out.append("")
    for w in a.workloads:
        out += workload_section(a, w, options.details)
    rec = r.recommendation
    if r.tune is not None:   # a tune race: tune's answer, above, is the answer
        return "\n".join(out).rstrip() + "\n"
    out += recommendation_section(rec.workloads + ([rec.overall] if len(rec.workloads) > 1 else []),
                                  r.max_rss_increase)
    return "\n".join(out).rstrip() + "\n"
