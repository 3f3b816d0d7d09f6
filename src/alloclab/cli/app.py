"""The Typer app and what every command shares (consoles, progress bar, showing results).

Commands live in cli*.py modules that register on `app`; none holds measurement logic."""

from __future__ import annotations

import inspect
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from typer.core import TyperGroup
from rich.console import Console
from rich.markup import escape

from alloclab import defaults
from alloclab.defaults import seconds  # noqa: F401 (the CLI reads durations with it)
from alloclab.errors import AlloclabError
from alloclab.store.db import DEFAULT_DB, Store

# Every command module imports this one, and `alloclab --help` imports them all: the statistics
# (scipy, numpy), the runner (psutil, pyelftools) and the exporters load inside the functions
# that use them, so that starting the CLI costs a tenth of a second, not seconds.
if TYPE_CHECKING:
    from alloclab.catalog.variants import Variant
    from alloclab.measure.runner import Settings
    from alloclab.stats.results import Results

# The commands in the order a user needs them: tune answers the question, compare races what you
# already know to try, run takes a server's recipe, report shows what was stored.
COMMAND_ORDER = ("tune", "compare", "run", "inspect", "report", "suite", "profile", "diff", "experiments", "sweep",
                 "recipes", "allocators")


def reflow(text: str) -> str:
    """A docstring as one paragraph a blank line: the help renderer wraps it, not the source's lines."""
    paragraphs = [" ".join(p.split()) for p in inspect.cleandoc(text).split("\n\n")]
    return "\n\n".join(p for p in paragraphs if p)


class _Commands(TyperGroup):
    def list_commands(self, ctx) -> list[str]:
        rank = {name: i for i, name in enumerate(COMMAND_ORDER)}
        return sorted(super().list_commands(ctx), key=lambda n: rank.get(n, len(rank)))

    def get_command(self, ctx, name: str):
        cmd = super().get_command(ctx, name)
        if cmd is not None:
            plain_help(cmd)
            retire_short_flags(cmd)
        return cmd


# Short flags that hyperfine, whose options alloclab's follow, gives another meaning: for one release
# each is an error that names the long option (then it is free). flag -> (long option, hyperfine's).
RETIRED = {"-n": ("--runs", "-n names a command (--command-name) and -r gives the runs"),
           "-m": ("--metric", "-m is --min-runs"),
           "-p": ("--param", "-p is --prepare (alloclab's is --prepare CMD, long only for now)"),
           "-w": ("--workload", "-w is --warmup")}


def retire_short_flags(cmd) -> None:
    """Adds to a command, hidden, each retired flag whose long option it takes."""
    from typer.core import TyperOption

    if getattr(cmd, "_retired", False):
        return
    cmd._retired = True
    longs = {o for p in cmd.params for o in getattr(p, "opts", [])}
    for flag, (long, theirs) in RETIRED.items():
        if long not in longs or flag in {o for p in cmd.params for o in p.opts}:
            continue

        def refuse(ctx, param, value, flag=flag, long=long, theirs=theirs):
            if value:
                raise AlloclabError(f"{flag} is no longer a short flag of alloclab: in hyperfine, whose options "
                                    f"alloclab follows, {theirs}. Write {long} instead ({flag} {value[0]} is "
                                    f"{long} {value[0]}).")
        cmd.params.append(TyperOption(param_decls=[flag], type=str, multiple=True, hidden=True, expose_value=False,
                                      callback=refuse))


def plain_help(cmd) -> None:
    """A command's help shown as written: typer reads it as rich markup, which would eat the
    `[[client]]` of a file's table (and any other bracket), so every text is escaped here, once. A
    default given in words (`show_default="the file's"`) is shown as typer shows a value,
    `[default: X]` (typer itself would write `[default: (X)]`)."""
    if getattr(cmd, "_plain_help", False):
        return
    cmd._plain_help = True
    if cmd.help:
        cmd.help = escape(reflow(cmd.help))
    for p in cmd.params:
        if getattr(p, "help", None):
            p.help = escape(p.help)
        if isinstance(getattr(p, "show_default", None), str):
            p.help = (p.help + " " if p.help else "") + escape(f"[default: {p.show_default}]")
            p.show_default = False


app = typer.Typer(add_completion=False, no_args_is_help=True, cls=_Commands,
                  help="Which memory allocator, and which tuning, is best for your program? Measured.")
# Tables are meant to be pasted into mails: do not squeeze them to 80 columns when piped. Markup
# off: what these consoles print holds the user's commands, names and paths (`x=[bytearray(9)]`),
# which rich would read as tags (or :emoji: codes) and drop; a style is a Text's or print's `style`.
console = Console(width=None if sys.stdout.isatty() else 160, markup=False, emoji=False)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 160, markup=False, emoji=False)

# --db as each command uses it: a measuring command writes (and creates) the store, a reading one
# only opens it and says so when it is not there.
DbOption = typer.Option(DEFAULT_DB, "--db", help="SQLite database the results are added to (created if missing).")
ReadDbOption = typer.Option(DEFAULT_DB, "--db", help="SQLite database of results to read (never created).")


def open_store(db: Path) -> Store:
    """The store a reading command (report, experiments, diff, sweep) opens: never created by it."""
    if not db.exists():
        raise AlloclabError(f"No database at {db}. Give the path of one with --db (alloclab compare, suite, run "
                            f"and tune write alloclab.db in the current directory by default; so does make demo).")
    return Store(db)


def _check_list_format(value: str) -> str:
    if value not in ("terminal", "json"):
        raise AlloclabError(f"Unknown format '{value}' for a list: choose terminal or json (-f json for scripts).")
    return value


# The format of a command that lists (experiments, allocators, recipes), as the reports take it.
ListFormatOption = typer.Option("terminal", "--format", "-f", callback=_check_list_format,
                                help="terminal, or json for scripts.")


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


# Options that the commands running experiments share with others (profile, report); the rest of
# compare's, suite's and run's are in cli/experiment_options.py.
SeedOption = typer.Option(defaults.SEED, "--seed", help="Seed of the randomized run order.")
NoVerifyOption = typer.Option(False, "--no-verify", help="Skip the untimed verification (LD_DEBUG bindings run, settings read back).")
MetricOption = typer.Option([], "--metric", help="NAME=REGEX[:higher|lower] or NAME=json:KEY; repeat.")
ShellOption = typer.Option(False, "--shell", help="Run the command through /bin/sh -c.")


def _check_timeout(value: float | None) -> float | None:
    if why := defaults.refusal(timeout_s=value):
        raise AlloclabError(why)
    return value


def timeout_option(default: float | None = None):
    # None is no limit: said so in --help, where a blank default would read as "unknown".
    return typer.Option(default, "--timeout", callback=_check_timeout,
                        show_default=True if default is not None else "none: a run takes as long as it takes",
                        help="Kill a run (its whole process group; a service's client) after this many seconds.")


# --- running experiments ----------------------------------------------------------------------

def run_experiment(store: Store, workloads, variants: list[Variant], settings: Settings, judge=None) -> int:
    """`judge`: what decides at the looks (stats.looks.Judge unless given: tune races with its own)."""
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    from alloclab.measure.runner import Runner, Progress as RunProgress
    from alloclab.stats.looks import Judge

    with Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                  console=err, transient=True) as bar:
        task = bar.add_task("starting", total=None)
        progress = RunProgress(
            start=lambda total: bar.update(task, total=total),
            advance=_Advance(bar, task),
            note=lambda text: bar.console.print(text, style="yellow", highlight=False))
        # The bar advances when a run starts; completed = runs started.
        exp = Runner(store, workloads, variants, settings, progress, judge=judge or Judge())
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


def draw_early(report_format: str | None, report_file: Path | None) -> None:
    """Where the results will be shown with an HTML page: fork its drawer now (report/pen.py), so
    that matplotlib is imported while the statistics run, not after."""
    from alloclab.report import format_for

    try:
        fmt = report_format or (format_for(report_file) if report_file else None)
    except AlloclabError:
        return   # said where the report is written
    if fmt == "html":
        from alloclab.report import pen
        pen.start_early()


def show(r: Results, db: Path, *, details: bool = False, exports: dict[str, Path] | None = None,
         report_format: str | None = None, report_file: Path | None = None) -> None:
    """The results of an experiment just measured (stored in `db`): the terminal table, or the report
    in `report_format` on stdout; with `report_file`, the terminal table here and the report in that
    file."""
    from alloclab.report import Options, format_for, jsonout, terminal_brief, write_report

    options = Options(details=details)
    fmt = report_format or (format_for(report_file) if report_file else "terminal")
    if report_file is not None or fmt == "terminal":
        # A screen: one line a comparison; the full tables with --details and in the other formats.
        terminal_brief.render(r, console, details=details)
    if report_file is not None or fmt != "terminal":
        written = write_report(r, fmt, report_file, options, console=console)
        if written:
            console.print(f"Report ({fmt}) written to {written}")
    for fmt_, path in (exports or {}).items():
        if fmt_ == "json":
            path.write_text(jsonout.render(r))
            console.print(f"Results, with every run's raw samples and metadata, written to {path}")
        else:
            console.print(f"Report ({fmt_}) written to {write_report(r, fmt_, path, options)}")
    # On stdout only under the table: a report piped to a file must stay clean.
    (console if fmt == "terminal" or report_file is not None else err).print(
        f"Results stored in {db} (experiment {r.experiment.id}).")


