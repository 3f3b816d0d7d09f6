"""The Typer app and what every command shares (consoles, progress bar, showing results).

Commands live in cli*.py modules that register on `app`; none holds measurement logic."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from alloclab.errors import AlloclabError
from alloclab.store.db import DEFAULT_DB, Store

# Every command module imports this one, and `alloclab --help` imports them all: the statistics
# (scipy, numpy), the runner (psutil, pyelftools) and the exporters load inside the functions
# that use them, so that starting the CLI costs a tenth of a second, not seconds.
if TYPE_CHECKING:
    from alloclab.measure.runner import Settings

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Which memory allocator, and which tuning, is best for your program? Measured.")
# Tables are meant to be pasted into mails: do not squeeze them to 80 columns when piped.
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 160)

DbOption = typer.Option(DEFAULT_DB, "--db", help="SQLite database of results (created if missing).")


def percent(text: str) -> float:
    """'2%' or the fraction '0.02': both are two percent. A bare number of 1 or more is refused
    rather than guessed at: '2' could mean 2% or 200%."""
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise AlloclabError(f"Cannot read '{text}' as a percentage; write e.g. 2% or 0.02.") from None
    if not math.isfinite(value):
        raise AlloclabError(f"Cannot read '{text}' as a percentage; write e.g. 2% or 0.02.")
    if not t.endswith("%") and abs(value) >= 1:
        raise AlloclabError(f"'{text}' is ambiguous as a percentage: a bare number is a fraction (0.02 is 2%). "
                            f"Write {t}% for {t} percent, or {value / 100:g} for the same as a fraction.")
    return value


# Parsed here, at the edge: the commands get the margin as a number (0.02), never as text.
def min_effect_value(text: str) -> float:
    margin = percent(text)
    if margin < 0:
        raise AlloclabError(f"--min-effect cannot be negative (got {text}): it is the margin within which two "
                            f"variants count as equivalent. Give e.g. --min-effect 2%.")
    return margin


def _check_percent(value: str | None) -> str | None:
    """Refuses a bad percentage before any run; the text itself is kept for the gate's messages."""
    if value is not None:
        percent(value)
    return value


# Options shared by the commands that run experiments (compare, suite, run): defined here once so
# that a flag means the same everywhere. Where a command's default differs, a function gives the
# option with that default.
MinEffectOption = typer.Option("2%", "--min-effect", parser=min_effect_value, metavar="PERCENT", help="Equivalence margin: a comparison whose whole interval lies within ±this is 'equivalent'.")
FailIfWorseOption = typer.Option(None, "--fail-if-worse", callback=_check_percent, metavar="PERCENT", help="Gate for CI and reviews, e.g. 5%: exit 1 when a variant is decided worse than the baseline by at least this on a primary metric, 3 when something stays undecided, 0 otherwise.")
MaxRunsOption = typer.Option(None, "--max-runs", help="Until decided (or with --until-precise): at most this many runs per variant.")
AllocatorOption = typer.Option([], "-a", "--allocator", help="Variant NAME[:VAR=VALUE,...]\\[@LABEL], may sweep ({0,64M}, 128K..256M*4); repeat. Default: every installed allocator (suite adds its tuned variants, run the file's).")
SeedOption = typer.Option(1, "--seed", help="Seed of the randomized run order.")
NoVerifyOption = typer.Option(False, "--no-verify", help="Skip the untimed verification (LD_DEBUG bindings run, settings read back).")
FingerprintOption = typer.Option(False, "--fingerprint", help="Also one untimed run per workload and variant with a counting preload before the allocator: allocation calls, sizes, threads, cross-thread frees, lifetimes, live bytes against RSS, memory system calls.")
MetricOption = typer.Option([], "--metric", "-m", help="NAME=REGEX[:higher|lower] or NAME=json:KEY; repeat.")
ShellOption = typer.Option(False, "--shell", help="Run the command through /bin/sh -c.")
ExportJsonOption = typer.Option(None, "--export-json", help="Write raw samples and metadata as JSON.")
DetailsOption = typer.Option(False, "--details", help="Show every standard measure.")
ProfileOption = typer.Option(False, "--profile", help="Afterwards, profile each variant with perf record: the allocator's share of CPU (a server's process tree, not its client).")


def _check_timeout(value: float | None) -> float | None:
    if value is not None and not value > 0:
        raise AlloclabError(
            f"--timeout must be a positive number of seconds (got {value:g}): it is the time after which a "
            f"run is killed. Give e.g. --timeout 60, or leave it out for no limit.")
    return value


def timeout_option(default: float | None = None):
    return typer.Option(default, "--timeout", callback=_check_timeout,
                        help="Kill a run (its whole process group; a service's client) after this many seconds.")


RunsOption = typer.Option(None, "--runs", "-n", help="Exactly this many measured runs per workload and variant. Default: until every comparison is decided, within --budget and --max-runs (run: first looking after the file's runs).")


def warmup_option(default: int | None = 1, help_default: str = ""):
    return typer.Option(default, "--warmup", help="Warm-up blocks, discarded (the first one also verifies the allocator)" + (f"; {help_default}." if help_default else "."))


ProfileRunsOption = typer.Option(3, "--profile-runs", help="Profiled runs per variant with --profile.")
CallGraphOption = typer.Option(False, "--call-graph", "-g", help="With --profile: record call graphs.")
AblateOption = typer.Option(None, "--ablate", help="VARIANT with several settings: run the baseline, each setting alone and all together.")
ReportFileOption = typer.Option(None, "--report-file", help="Write the --report there (the format follows the suffix if --report is not given).")
MaxRssIncreaseOption = typer.Option(None, "--max-rss-increase", parser=percent, metavar="PERCENT", help="Memory budget of the recommendation, e.g. 10%.")


def _check_report_format(value: str | None) -> str | None:
    from alloclab.report import check_format_option  # the exporters load matplotlib: only when asked
    return check_format_option(value)


ReportOption = typer.Option(None, "--report", callback=_check_report_format,
                            help="Render the results as terminal, md, html, json or csv.")


# --- running experiments ----------------------------------------------------------------------

def run_experiment(store: Store, workloads, variant_specs: list[str], settings: Settings) -> int:
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    from alloclab.measure.runner import Experiment, Progress as RunProgress
    from alloclab.stats.looks import Judge
    from alloclab.catalog.variants import parse_variants

    variants = parse_variants(variant_specs)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                  console=err, transient=True) as bar:
        task = bar.add_task("starting", total=None)
        progress = RunProgress(
            start=lambda total: bar.update(task, total=total),
            advance=_Advance(bar, task),
            note=lambda text: bar.console.print(f"[yellow]{text}[/]", highlight=False))
        # The bar advances when a run starts; completed = runs started.
        exp = Experiment(store, workloads, variants, settings, progress, judge=Judge())
        return exp.run()


class _Advance:
    """The bar's advance per run started, handed to rich at most 20 times a second: the bar is
    redrawn 10 times a second anyway, and a run of a short command is shorter than an update."""

    def __init__(self, bar, task):
        self.bar, self.task, self.pending, self.last = bar, task, 0, 0.0

    def __call__(self, text: str) -> None:
        self.pending += 1
        now = time.monotonic()
        if now - self.last >= 0.05:
            self.bar.update(self.task, advance=self.pending, description=text[:60])
            self.pending, self.last = 0, now


def show(store: Store, exp_id: int, *, details: bool = False, min_effect: float | None = None,
         baseline: str | None = None, export_json: Path | None = None, report_format: str | None = None,
         report_file: Path | None = None, max_rss_increase: float | None = None):
    """The results of an experiment: the terminal table, or the report in `report_format` on
    stdout; with `report_file`, the terminal table here and the report in that file. Returns the
    analysis, for callers that show more of it (computing it is most of a report's time)."""
    from alloclab.stats.analysis import analyze
    from alloclab.report import Options, format_for, jsonout, terminal, write_report

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


def budget_option(default: str | None, help_default: str = ""):
    return typer.Option(default, "--budget", help="Until decided: stop adding runs after this long, e.g. 90s, 20m, 1h" + (f" ({help_default})." if help_default else "."))


def seconds(text: str) -> float:
    """'90s', '20m', '1h30m' or a plain number of seconds."""
    import re
    t = text.strip().lower()
    parts = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?", t)
    if not t or not parts or not any(parts.groups()):
        raise AlloclabError(f"Cannot read '{text}' as a duration; write e.g. 90s, 20m or 1h.")
    h, m, sec = (float(g) if g else 0.0 for g in parts.groups())
    total = h * 3600 + m * 60 + sec
    if total <= 0:
        raise AlloclabError(f"The budget must be longer than 0 (got '{text}'); write e.g. 90s, 20m or 1h.")
    return total


def decision_settings(runs: int | None, max_runs: int | None, budget: str, min_effect: float,
                      first_look: int, default_max_runs: int, until_precise: str | None = None,
                      profile: bool = False) -> dict:
    """Settings of how long to measure, shared by compare, suite and run: `--runs N` means exactly N;
    without it (and without --until-precise) blocks are added until every primary comparison is
    decided, within --budget and --max-runs, and what stays open gets a one-run profile per variant
    (unless --profile profiles everything afterwards)."""
    if runs is not None and runs < 1:
        raise AlloclabError(f"--runs must be at least 1 (got {runs}).")
    limit = max_runs if max_runs is not None else default_max_runs
    sequential = runs is None and not until_precise
    return dict(runs=runs if runs is not None else first_look, until_decided=sequential,
                auto_profile=sequential and not profile,
                first_look=min(first_look, limit), max_runs=limit, max_seconds=seconds(budget), margin=min_effect,
                until_precise=percent(until_precise) if until_precise else None)


def gate(store: Store, exp_id: int, fail_if_worse: str | None, min_effect: float | None) -> None:
    """--fail-if-worse: exit 1 when a variant is decided worse by at least the threshold on a primary
    metric, 3 when a primary comparison stays undecided, else return (exit 0)."""
    if not fail_if_worse:
        return
    from alloclab.stats.analysis import analyze
    from alloclab.report.common import primary_comparisons
    threshold = percent(fail_if_worse)
    a = analyze(store.load(exp_id), min_effect=min_effect)
    worse, undecided = [], []
    for w, row, vi, c in primary_comparisons(a):
        bad = (1 - c.ratio) if row.higher_is_better else (c.ratio - 1)
        if c.verdict == "worse" and bad >= threshold - 1e-12:
            worse.append(f"{w.name} {row.name} {a.labels[vi]} ({stats_text(c)})")
        elif c.verdict == "undecided":
            undecided.append(f"{w.name} {row.name} {a.labels[vi]}")
    if worse:
        err.print(f"[bold red]fail-if-worse {fail_if_worse}:[/] decided worse: " + "; ".join(worse), highlight=False)
        raise typer.Exit(1)
    if undecided:
        err.print(f"[yellow]fail-if-worse {fail_if_worse}:[/] undecided within the budget: " + "; ".join(undecided)
                  + ". Give it more runs (--budget, --max-runs).", highlight=False)
        raise typer.Exit(3)
    err.print(f"fail-if-worse {fail_if_worse}: every primary comparison decided better, equivalent, or worse by "
              f"less than {fail_if_worse}.", highlight=False)


def stats_text(c) -> str:
    from alloclab.stats.estimates import format_comparison
    return format_comparison(c)


