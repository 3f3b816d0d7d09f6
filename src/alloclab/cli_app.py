"""The Typer app and what every command shares (consoles, progress bar, showing results).

Commands live in cli*.py modules that register on `app`; none holds measurement logic."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from .errors import AlloclabError
from .store import DEFAULT_DB, Store

# Every command module imports this one, and `alloclab --help` imports them all: the statistics
# (scipy, numpy), the runner (psutil, pyelftools) and the exporters load inside the functions
# that use them, so that starting the CLI costs a tenth of a second, not seconds.
if TYPE_CHECKING:
    from .runner import Settings

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Which memory allocator, and which tuning, is best for your program? Measured.")
# Tables are meant to be pasted into mails: do not squeeze them to 80 columns when piped.
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 160)

DbOption = typer.Option(DEFAULT_DB, "--db", help="SQLite database of results (created if missing).")

# Options shared by the commands that run experiments (compare, suite, run).
MinEffectOption = typer.Option("0%", "--min-effect", help="Smaller significant effects print as ~.")
ProfileRunsOption = typer.Option(3, "--profile-runs", help="Profiled runs per variant with --profile.")
CallGraphOption = typer.Option(False, "--call-graph", "-g", help="With --profile: record call graphs.")
AblateOption = typer.Option(None, "--ablate", help="VARIANT with several settings: run the baseline, each setting alone and all together.")
ReportFileOption = typer.Option(None, "--report-file", help="Write the --report there (the format follows the suffix if --report is not given).")
MaxRssIncreaseOption = typer.Option(None, "--max-rss-increase", help="Memory budget of the recommendation, e.g. 10%.")


def _check_report_format(value: str | None) -> str | None:
    from .report import check_format_option  # the exporters load matplotlib: only when asked
    return check_format_option(value)


ReportOption = typer.Option(None, "--report", callback=_check_report_format,
                            help="Render the results as terminal, md, html, json or csv.")


# --- running experiments ----------------------------------------------------------------------

def run_experiment(store: Store, workloads, variant_specs: list[str], settings: Settings) -> int:
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    from .runner import Experiment, Progress as RunProgress
    from .variants import parse_variants

    variants = parse_variants(variant_specs)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                  console=err, transient=True) as bar:
        task = bar.add_task("starting", total=None)
        progress = RunProgress(
            start=lambda total: bar.update(task, total=total),
            advance=lambda text: bar.update(task, advance=1, description=text[:60]),
            note=lambda text: bar.console.print(f"[yellow]{text}[/]", highlight=False))
        # The bar advances when a run starts; completed = runs started.
        exp = Experiment(store, workloads, variants, settings, progress)
        return exp.run()


def show(store: Store, exp_id: int, *, details: bool = False, min_effect: float = 0.0,
         baseline: str | None = None, export_json: Path | None = None, report_format: str | None = None,
         report_file: Path | None = None, max_rss_increase: float | None = None):
    """The results of an experiment: the terminal table, or the report in `report_format` on
    stdout; with `report_file`, the terminal table here and the report in that file. Returns the
    analysis, for callers that show more of it (computing it is most of a report's time)."""
    from .analysis import analyze
    from .report import Options, format_for, jsonout, terminal, write_report

    a = analyze(store.load(exp_id), baseline=baseline, min_effect=min_effect)
    options = Options(details=details, max_rss_increase=max_rss_increase)
    fmt = report_format or (format_for(report_file) if report_file else "terminal")
    if report_file is not None or fmt == "terminal":
        terminal.render(a, console, details=details, max_rss_increase=max_rss_increase)
    if report_file is not None or fmt != "terminal":
        written = write_report(a, fmt, report_file, options, console=console)
        if written:
            console.print(f"Report ({fmt}) written to {written}")
    if export_json:
        export_json.write_text(jsonout.render(a, max_rss_increase))
        console.print(f"Raw samples and metadata written to {export_json}")
    # On stdout only under the table: a report piped to a file must stay clean.
    (console if fmt == "terminal" or report_file is not None else err).print(
        f"Results stored in {store.path} (experiment {exp_id}).")
    return a


def percent_or_none(text: str | None) -> float | None:
    return percent(text) if text else None


def percent(text: str) -> float:
    try:
        return float(text.rstrip("%")) / 100
    except ValueError:
        raise AlloclabError(f"Cannot read '{text}' as a percentage; write e.g. 2% or 0.02.") from None


