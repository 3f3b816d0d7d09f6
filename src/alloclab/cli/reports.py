"""Commands that look at stored results: report, experiments, diff."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table
from rich.text import Text

from alloclab import defaults
from alloclab.cli.app import (ListFormatOption, ReadDbOption as DbOption, app, console, err, min_effect_value,
                              open_store, percent)
from alloclab.cli.outputs import check_outputs, emit, output_format, plain_text
from alloclab.errors import AlloclabError
from alloclab.fleet import hosts as fleet_hosts
from alloclab.report import CHOICES, Options, canonical, check_format_option, write_report
from alloclab.store.db import Store

FORMAT_HELP = f"One of: {CHOICES}."
DIFF_FORMATS = ("terminal", "md", "json")


def _load_ref(store: Store, ref: str):
    """ID, or ID@HOST: one host's runs of a fleet experiment, so that hosts can be diffed."""
    exp, host = fleet_hosts.parse_ref(ref)
    e = store.load(exp)
    return fleet_hosts.for_host(e, host) if host else e


def _is_id(ref: str) -> bool:
    """An experiment id (or ID@HOST); anything else names a file, whatever its suffix."""
    return re.fullmatch(r"\d+(@.+)?", ref) is not None


def _same(a: str, db_a: Path, b: str, db_b: Path) -> bool:
    if _is_id(a) and _is_id(b):
        return a == b and db_a.resolve() == db_b.resolve()
    if not _is_id(a) and not _is_id(b):   # one file twice, or two copies of one export
        pa, pb = Path(a), Path(b)
        return pa.resolve() == pb.resolve() or (pa.is_file() and pb.is_file() and pa.read_bytes() == pb.read_bytes())
    return False


def _exported(path: str):
    """An experiment exported as JSON (--export-json, `report -f json`), read into a store of its own."""
    import json
    import tempfile

    from alloclab.store.imports import import_experiment
    if Path(path).suffix.lower() in (".csv", ".md", ".markdown", ".html", ".htm", ".txt"):
        raise AlloclabError(f"{path} is a report ({Path(path).suffix[1:]}): it holds no runs to compare. Give an "
                            f"experiment exported as JSON (--export-json, or `alloclab report ID -f json`), or an "
                            f"experiment id.")
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise AlloclabError(f"Cannot read {path}: {exc.strerror}. Give an experiment exported with --export-json, "
                            f"or an experiment id.") from None
    except ValueError as exc:
        raise AlloclabError(f"{path} is not JSON ({exc}). Give an experiment exported with --export-json, or an "
                            f"experiment id.") from None
    # The store is a means of reading the file: it goes once the experiment is loaded.
    with tempfile.TemporaryDirectory(prefix="alloclab-diff-") as scratch:
        store = Store(Path(scratch) / "imported.db")
        try:
            return store.load(import_experiment(store, data, path))
        finally:
            store.close()


@app.command()
def report(
    experiment: Optional[int] = typer.Argument(None, show_default="the latest", help="Experiment id."),
    db: Path = DbOption,
    fmt: Optional[str] = typer.Option(None, "--format", "-f", callback=check_format_option, show_default="terminal, or the suffix of -o's file", help=FORMAT_HELP),
    output: Optional[Path] = typer.Option(None, "--output", "-o", show_default="stdout", help="Write the report to FILE, in the format its suffix names (.md, .html, .json, .csv, .txt) unless -f is given."),
    details: bool = typer.Option(False, "--details", help="The full tables, with every standard measure, instead of the short answer."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Variant label to compare against."),
    min_effect: Optional[float] = typer.Option(None, "--min-effect", parser=min_effect_value, metavar="PERCENT", show_default=f"the experiment's, else {defaults.percent_text(defaults.MARGIN)}", help="Equivalence margin."),
    max_rss_increase: Optional[float] = typer.Option(
        None, "--max-rss-increase", parser=percent, metavar="PERCENT", show_default="none", help="Memory budget of the recommendation, e.g. 10%."),
    export_json: Optional[Path] = typer.Option(None, "--export-json", help="Also write the JSON report here."),
) -> None:
    """Show a stored experiment as a terminal table, Markdown, HTML, JSON or CSV, with a recommendation."""
    check_outputs(output=output, export_json=export_json)
    fmt = output_format(fmt, output)
    if fmt != "html":
        return _report(experiment, db, fmt, output, details, baseline, min_effect, max_rss_increase, export_json)
    from alloclab.report import pen   # (multiprocessing: imported for a page only)
    pen.start_early()   # matplotlib's import beside the loading below, if the CLI's start did not
    try:
        _report(experiment, db, fmt, output, details, baseline, min_effect, max_rss_increase, export_json)
    finally:
        pen.stop_early()


def _report(experiment, db, fmt, output, details, baseline, min_effect, max_rss_increase, export_json) -> None:
    from alloclab.fleet.report import per_host, render_hosts
    from alloclab.stats.results_cache import keep, results

    store = open_store(db)
    if store.kind(experiment if experiment is not None else store.latest()) == "inspect":
        return _report_inspection(store, experiment if experiment is not None else store.latest(), fmt, output)
    e = store.load(experiment)
    if output is None and fmt == "html" and sys.stdout.isatty():
        output = Path(f"alloclab-report-{e.id}.html")  # a page of SVG is no use on a terminal
    # A fleet experiment's per-host tables follow the terminal report on the terminal.
    by_host = fmt == "terminal" and output is None and bool(fleet_hosts.hosts_of(e))
    r = results(e, baseline=baseline, min_effect=min_effect, max_rss_increase=max_rss_increase,
               hosts=per_host(e) if by_host else None)
    options = Options(details=details)
    written = write_report(r, fmt, output, options, console=console)
    if by_host:
        render_hosts(r, console, details=details)
    if export_json:
        write_report(r, "json", export_json, options)
    keep(r)
    for path in (written, export_json):
        if path:
            err.print(f"Report written to {path}", highlight=False)


def _diff_inspections(pairs: list, fmt: str, output: Path | None) -> None:
    from alloclab.report.inspect import render_diff
    from alloclab.tune.inspection import diff as inspection_diff
    diffs = [inspection_diff(x, y) for x, y in pairs]
    if fmt == "json":
        text = json.dumps(diffs, indent=1) + "\n"
    elif fmt == "md":
        raise AlloclabError("A diff of two inspections is shown as terminal or json, not md.")
    elif output is None:
        for d in diffs:
            render_diff(d, console)
        return
    else:
        text = "".join(plain_text(lambda c, d=d: render_diff(d, c)) for d in diffs)
    emit(text, output, "Diff")


def _report_inspection(store: Store, exp: int, fmt: str, output: Path | None) -> None:
    """An inspection (`alloclab inspect`) as it was shown: terminal, JSON or its watch's page."""
    from alloclab.report.inspect import render_json, render_terminal
    items = store.inspections(exp)
    if fmt not in ("terminal", "json", "html"):
        raise AlloclabError(f"Experiment {exp} is an inspection: its report is terminal, json or html, not {fmt}.")
    if fmt == "json":
        text = render_json(items, exp)
    elif fmt == "html":
        from alloclab.report.inspect_html import render_html
        text = render_html(items, exp, None)
    elif output is None:
        render_terminal(items, console, exp)
        return
    else:
        text = plain_text(lambda c: render_terminal(items, c, exp))
    emit(text, output, "Report")


def _inspection_pairs(store_a: Store, a: str, store_b: Store, b: str) -> list | None:
    """Two inspections' snapshots to diff, or None where A and B are not both inspections: ID is an
    inspection's last sample of each process, ID:N its N-th sample (from 0; -1 the last)."""
    def pick(store: Store, ref: str):
        head, _, nth = ref.partition(":")
        if not head.isdigit() or store.kind(int(head)) != "inspect":
            return None
        items = store.inspections(int(head))
        if not items:
            raise AlloclabError(f"Inspection {head} holds no sample (it failed). Give another id.")
        if nth:
            try:
                return [items[int(nth)].snapshot]
            except (ValueError, IndexError):
                raise AlloclabError(f"Inspection {head} has samples 0 to {len(items) - 1}; {ref} names none of "
                                    f"them. Write ID:N with N in that range (-1: the last).") from None
        last = {}
        for i in items:
            last[i.snapshot.pid] = i.snapshot
        return list(last.values())
    sa, sb = pick(store_a, a), pick(store_b, b)
    if sa is None or sb is None:
        if (sa is None) != (sb is None):
            raise AlloclabError(f"{a} and {b} are not both inspections: `alloclab diff` compares two experiments "
                                f"or two inspections (`alloclab experiments` lists which is which).")
        return None
    by_pid = {s.pid: s for s in sb}
    pairs = [(x, by_pid[x.pid]) for x in sa if x.pid in by_pid]
    if not pairs and len(sa) == 1 and len(sb) == 1:
        pairs = [(sa[0], sb[0])]
    if not pairs:
        raise AlloclabError(f"Inspections {a} and {b} share no process: give one sample of each (ID:N).")
    return pairs


@app.command()
def experiments(
    db: Path = DbOption,
    fmt: str = ListFormatOption,
    as_json: bool = typer.Option(False, "--json", hidden=True),   # the older spelling of -f json
) -> None:
    """List stored experiments: id, date, command or recipe, variants, runs, host."""
    rows = open_store(db).listing()
    if as_json or fmt == "json":
        console.print_json(json.dumps([r.to_dict() for r in rows]))
        return
    if not rows:
        console.print(f"No experiments in {db} yet. Run `alloclab compare -- CMD` or `alloclab suite`.")
        return
    t = Table(title=f"Experiments in {db}", title_justify="left")
    # Every cell whole: a narrow terminal wraps a title (folding a word longer than its column)
    # rather than cut it, the command being what tells two experiments apart.
    for col in ("id", "date (UTC)", "kind", "status", "command / recipe", "variants", "runs ok/total", "host"):
        t.add_column(col, justify="right" if col in ("id", "runs ok/total") else "left", overflow="fold")
    status_style = {"complete": "green", "interrupted": "yellow", "failed": "red", "running": "yellow"}
    for r in rows:
        title = r.title
        if r.workloads > 1:
            title += f" ({r.workloads} workloads)"
        t.add_row(str(r.id), r.date.replace("T", " ")[:16], r.kind,
                  Text(r.status, style=status_style.get(r.status, "")), title, ", ".join(r.variants),
                  f"{r.runs_ok}/{r.runs}", f"{r.host} ({r.kernel}, glibc {r.glibc})")
    console.print(t)
    console.print("Show one with `alloclab report ID`; compare two with `alloclab diff A B`.", style="dim")


@app.command()
def diff(
    a: str = typer.Argument(..., metavar="A", help="The reference: an experiment id, ID@HOST for one host of a fleet experiment, or a JSON file exported with --export-json."),
    b: str = typer.Argument(..., metavar="B", help="What to compare against A: the same kinds."),
    db: Path = DbOption,
    db_b: Optional[Path] = typer.Option(None, "--db-b", help="Database of B, when it was measured elsewhere."),
    fmt: Optional[str] = typer.Option(None, "--format", "-f", show_default="terminal, or the suffix of -o's file", help="One of: terminal, md (markdown), json."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", show_default="stdout", help="Write to FILE, in the format its suffix names (.md, .json, .txt) unless -f is given."),
    details: bool = typer.Option(False, "--details", help="Compare every standard measure."),
    min_effect: float = typer.Option(defaults.percent_text(defaults.MARGIN), "--min-effect", parser=min_effect_value, metavar="PERCENT", help="Equivalence margin of the comparisons."),
) -> None:
    """Compare two experiments of the same workload (another day, machine or allocator version): two
    ids, or two files exported with --export-json, as pyperf compare_to compares two result files."""
    fmt = canonical(fmt) if fmt is not None else None
    if fmt is not None and fmt not in DIFF_FORMATS:
        raise AlloclabError(f"Unknown diff format '{fmt}'; choose terminal, md (markdown) or json.")
    fmt = output_format(fmt, output, DIFF_FORMATS)
    from alloclab.report.diff import render_json, render_markdown, render_terminal
    from alloclab.stats.diff import diff_experiments

    check_outputs(output=output)
    if ":" in a or ":" in b or (a.isdigit() and b.isdigit()):
        pairs = _inspection_pairs(open_store(db), a, open_store(db_b or db), b)
        if pairs is not None:
            return _diff_inspections(pairs, fmt, output)

    if _same(a, db, b, db_b or db):
        which = f"experiment {a}" if _is_id(a) else (a if a == b else f"{a} and {b} hold the same bytes")
        said = (f"A and B are the same experiment ({which}): identical, nothing to compare. Give two "
                f"experiments, or --db-b for B's database.")
        ref = (lambda r: int(r) if r.isdigit() else r)   # noqa: E731
        emit(json.dumps({"schema": 1, "a": ref(a), "b": ref(b), "identical": True, "said": said}, indent=1) + "\n"
             if fmt == "json" else (f"## alloclab diff: {said}\n" if fmt == "md" else said + "\n"), output, "Diff")
        return
    ea, eb = (_load_ref(open_store(path), ref) if _is_id(ref) else _exported(ref)
              for path, ref in ((db, a), (db_b or db, b)))
    d = diff_experiments(ea, eb, min_effect=min_effect, details=details)
    if fmt == "terminal" and output is None:
        render_terminal(d, console)
        return
    if fmt == "terminal":
        text = plain_text(lambda c: render_terminal(d, c))
    else:
        text = render_markdown(d) if fmt == "md" else render_json(d)
    emit(text, output, "Diff")
