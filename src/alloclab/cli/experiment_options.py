"""The options compare, suite and run share, declared once, and the typed record they become.

A command declares only its own options and one parameter `opts: ExperimentOptions`;
`@experiment_options(...)` adds the shared ones to its signature (what Typer reads for parsing
and --help) and hands the command their values as one ExperimentOptions. A command whose default
differs (suite's --timeout, run's --budget and --warmup, which default to the file's) passes
that option in.

In: the command line. Out: ExperimentOptions, checked before anything is measured.
"""

from __future__ import annotations

import copy
import functools
import inspect
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import typer

from alloclab import defaults
from alloclab.cli.app import (DbOption, NoVerifyOption, SeedOption, min_effect_value, percent,
                              timeout_option)
from alloclab.errors import AlloclabError
from alloclab.report import CHOICES
from alloclab.fleet import cli_glue as fleet_cli

RUNS_PANEL, RESULTS_PANEL, PROFILE_PANEL, FLEET_PANEL = "Variants and runs", "Results", "Profile", "Fleet"


def _check_percent(value: str | None) -> str | None:
    """Refuses a bad percentage before any run; the text itself is kept for the gate's messages."""
    if value is not None:
        percent(value)
    return value


def _check_report_format(value: str | None) -> str | None:
    from alloclab.report import check_format_option  # the exporters load matplotlib: only when asked
    return check_format_option(value)


def max_runs_option(shown: str | int):
    """--max-runs with the command's default said in its help (compare's 300, suite's 80, a file's own)."""
    return typer.Option(None, "--max-runs", rich_help_panel=RUNS_PANEL, show_default=str(shown),
                        help="Until decided (or with --until-precise): at most this many runs per variant.")


def budget_option(default: str | None, help_default: str | None = None):
    """`help_default`: the default in words, where it is not one value (run's: the file's, else 25m)."""
    return typer.Option(default, "--budget", rich_help_panel=RUNS_PANEL, show_default=help_default or True,
                        help="Until decided: stop adding runs after this long, e.g. 90s, 20m, 1h.")


def warmup_option(default: int | None = defaults.WARMUP, help_default: str | None = None):
    return typer.Option(default, "--warmup", rich_help_panel=RUNS_PANEL, show_default=help_default or True,
                        help="Warm-up blocks, discarded (the first one also verifies the allocator).")


def _check_hook(value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise AlloclabError("--setup, --prepare and --cleanup each take a command line, as hyperfine's do "
                            "(e.g. --prepare 'rm -f out.txt'); an empty one runs nothing: leave the option out.")
    return value


def _hook_option(name: str, when: str):
    return typer.Option(None, f"--{name}", metavar="CMD", callback=_check_hook, rich_help_panel=RUNS_PANEL,
                        help=f"As hyperfine's --{name}: run CMD (through /bin/sh -c) {when}.")


def _panel(option, panel: str):
    """An option also used by other commands (profile, report), in its panel here only."""
    option = copy.copy(option)
    option.rich_help_panel = panel
    return option


@dataclass(frozen=True)
class ExperimentOptions:
    """The shared options as typed values: percentages as fractions, the budget as given (a
    command may default it to its file's)."""

    allocator: list[str]
    ablate: Optional[str]
    runs: Optional[int]
    max_runs: Optional[int]
    budget: Optional[str]
    min_effect: float
    fail_if_worse: Optional[str]
    warmup: Optional[int]
    timeout: Optional[float]
    seed: int
    no_verify: bool
    fingerprint: bool
    setup: Optional[str]
    prepare: Optional[str]
    cleanup: Optional[str]
    profile: bool
    profile_runs: int
    call_graph: bool
    db: Path
    report: Optional[str]
    report_file: Optional[Path]
    export_json: Optional[Path]
    export_markdown: Optional[Path]
    export_csv: Optional[Path]
    details: bool
    max_rss_increase: Optional[float]
    fleet: Optional[str]
    fleet_mode: str
    fleet_require_all: bool

    def __post_init__(self) -> None:
        if why := defaults.refusal(runs=self.runs, warmup=self.warmup, max_runs=self.max_runs):
            raise AlloclabError(why)
        if self.profile and self.profile_runs < 1:
            raise AlloclabError(f"--profile-runs must be at least 1 (got {self.profile_runs}).")

    def exports(self) -> dict[str, Path]:
        """The files to write beside what is shown, by format (hyperfine's --export-* options)."""
        return {fmt: path for fmt, path in (("json", self.export_json), ("md", self.export_markdown),
                                            ("csv", self.export_csv)) if path is not None}

    @property
    def fail_if_worse_fraction(self) -> float | None:
        return percent(self.fail_if_worse) if self.fail_if_worse else None


# In the order --help lists them, each in its panel.
_OPTIONS = dict(
    allocator=typer.Option([], "-a", "--allocator", rich_help_panel=RUNS_PANEL, show_default="every installed allocator (suite adds its tuned variants, run the file's)", help="Variant NAME[:VAR=VALUE,...][@LABEL], may sweep ({0,64M}, 128K..256M*4); repeat."),
    ablate=typer.Option(None, "--ablate", rich_help_panel=RUNS_PANEL, help="VARIANT with several settings: run the baseline, each setting alone and all together."),
    runs=typer.Option(None, "--runs", rich_help_panel=RUNS_PANEL, show_default="until every comparison is decided, within --budget and --max-runs (run: first looking after the file's runs)", help="Exactly this many measured runs per workload and variant."),
    max_runs=max_runs_option(defaults.COMPARE.max_runs),   # compare's; suite and run pass their own
    budget=budget_option(None),
    min_effect=typer.Option(defaults.percent_text(defaults.MARGIN), "--min-effect", parser=min_effect_value, metavar="PERCENT", rich_help_panel=RUNS_PANEL, help="Equivalence margin: a comparison whose whole interval lies within ±this is 'equivalent'."),
    fail_if_worse=typer.Option(None, "--fail-if-worse", callback=_check_percent, metavar="PERCENT", rich_help_panel=RUNS_PANEL, help="Gate for CI and reviews, e.g. 5%: exit 1 when a variant is decided worse than the baseline by at least this on a primary metric, 3 when something stays undecided, 0 otherwise."),
    warmup=warmup_option(),
    timeout=_panel(timeout_option(None), RUNS_PANEL),
    seed=_panel(SeedOption, RUNS_PANEL),
    no_verify=_panel(NoVerifyOption, RUNS_PANEL),
    fingerprint=typer.Option(False, "--fingerprint", rich_help_panel=RUNS_PANEL, help="Also one untimed run per workload and variant with a counting preload before the allocator: allocation calls, sizes, threads, cross-thread frees, lifetimes, live bytes against RSS, memory system calls."),
    setup=_hook_option("setup", "once, before anything runs the program"),
    prepare=_hook_option("prepare", "before each run (warm-up, verification and --fingerprint runs too), outside its measurement"),
    cleanup=_hook_option("cleanup", "once, after the last run, also when the experiment fails or is interrupted (unless --setup failed)"),
    profile=typer.Option(False, "--profile", rich_help_panel=PROFILE_PANEL, help="Afterwards, profile each variant with perf record: the allocator's share of CPU (a server's process tree, not its client)."),
    profile_runs=typer.Option(defaults.PROFILE_RUNS, "--profile-runs", rich_help_panel=PROFILE_PANEL, help="Profiled runs per variant with --profile."),
    call_graph=typer.Option(False, "--call-graph", "-g", rich_help_panel=PROFILE_PANEL, help="With --profile: record call graphs."),
    db=_panel(DbOption, RESULTS_PANEL),
    report=typer.Option(None, "--format", "-f", callback=_check_report_format, rich_help_panel=RESULTS_PANEL, help=f"Render the results as one of: {CHOICES}."),
    report_file=typer.Option(None, "--output", "-o", rich_help_panel=RESULTS_PANEL, help="Write the report to FILE, the terminal table here (the format follows the suffix if -f is not given)."),
    export_json=typer.Option(None, "--export-json", rich_help_panel=RESULTS_PANEL, help="Also write the results with every run's raw samples and metadata as JSON (alloclab diff reads two such files)."),
    export_markdown=typer.Option(None, "--export-markdown", rich_help_panel=RESULTS_PANEL, help="Also write the report as Markdown."),
    export_csv=typer.Option(None, "--export-csv", rich_help_panel=RESULTS_PANEL, help="Also write the report as CSV."),
    details=typer.Option(False, "--details", rich_help_panel=RESULTS_PANEL, help="Show every standard measure."),
    max_rss_increase=typer.Option(None, "--max-rss-increase", parser=percent, metavar="PERCENT", rich_help_panel=RESULTS_PANEL, help="Memory budget of the recommendation, e.g. 10%."),
    fleet=_panel(fleet_cli.FleetOption, FLEET_PANEL),
    fleet_mode=_panel(fleet_cli.FleetModeOption, FLEET_PANEL),
    fleet_require_all=_panel(fleet_cli.FleetRequireAllOption, FLEET_PANEL),
)
_TYPES = typing.get_type_hints(ExperimentOptions)
# Older spellings, kept so that no script breaks; --help lists only the current ones.
_ALIASES = {"report": ("report_alias", typer.Option(None, "--report", hidden=True, callback=_check_report_format)),
            "report_file": ("report_file_alias", typer.Option(None, "--report-file", hidden=True))}


def experiment_options(only: tuple[str, ...] | None = None, **own_defaults):
    """Adds the shared options to a command taking `opts: ExperimentOptions`; `own_defaults`
    replaces a shared option by the command's own version of it (budget_option("10m"), ...).
    `only`: the shared options the command takes (its --help lists no other); the rest keep their
    defaults in its ExperimentOptions."""
    unknown = set(own_defaults) - set(_OPTIONS) | set(only or ()) - set(_OPTIONS)
    if unknown:
        raise TypeError(f"not shared options: {sorted(unknown)}")
    taken = [name for name in _OPTIONS if only is None or name in only]
    shared = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                                default=_panel(own_defaults[name], _OPTIONS[name].rich_help_panel)
                                if name in own_defaults else _OPTIONS[name],
                                annotation=_TYPES[name])
              for name in taken]
    shared += [inspect.Parameter(alias, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=_TYPES[name])
               for name, (alias, option) in _ALIASES.items() if name in taken]
    fixed = {name: option.default for name, option in _OPTIONS.items() if name not in taken}

    def decorate(command):
        own = [p for p in inspect.signature(command, eval_str=True).parameters.values() if p.name != "opts"]

        @functools.wraps(command)
        def with_options(**values):
            for name, (alias, _) in _ALIASES.items():
                old = values.pop(alias, None)
                if old is not None and values.get(name) is None:
                    values[name] = old
            opts = ExperimentOptions(**fixed, **{name: values.pop(name) for name in taken})
            return command(**values, opts=opts)

        with_options.__signature__ = inspect.Signature(own + shared)
        with_options.__annotations__ = {p.name: p.annotation for p in own + shared}
        return with_options
    return decorate
