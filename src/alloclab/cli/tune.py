"""`alloclab tune`: the options, one call of tune/session.py's TuneRun, and its answer shown. The
flow (diagnose, prescribe, bound, screen, race) and its state live in tune/."""

from __future__ import annotations

import typer
from rich.text import Text

from alloclab import defaults
from alloclab.cli import experiment_flow as flow
from alloclab.cli.app import MetricOption, ShellOption, app, console, draw_early, err, run_experiment, show
from alloclab.cli.experiment_options import ExperimentOptions, budget_option, experiment_options
from alloclab.cli.tune_args import TuneCommand, workloads_of
from alloclab.tune.styled import Line

# The shared options tune takes: it races its own candidates until decided, on this machine.
TAKES = ("allocator", "max_runs", "budget", "min_effect", "warmup", "timeout", "seed", "no_verify", "db", "report",
         "report_file", "export_json", "export_markdown", "export_csv", "details", "max_rss_increase")
ALLOCATOR = typer.Option([], "-a", "--allocator", rich_help_panel="Variants and runs",
                         show_default="every installed allocator",
                         help="An allocator of the catalog to consider (tune proposes its settings itself); repeat.")


def styled(line: str | Line, style: str = "") -> Text:
    """A line of tune/ as Text: a Line's styles come from its fields, and no text is read as markup
    (the user's command, a workload's name, `x=[bytearray(9)]` stay as written)."""
    if isinstance(line, Line):
        return Text.assemble(*line.parts, style=style)
    return Text(line, style=style)


class _UI:
    """How tune/ runs an experiment (with the progress bar) and says a line."""

    def run(self, store, workloads, variants, settings, judge=None) -> int:
        return run_experiment(store, workloads, variants, settings, judge=judge)

    def note(self, text: str | Line) -> None:
        err.print(styled(text), highlight=False)

    def say(self, text: str | Line, style: str = "") -> None:
        console.print(styled(text, style), highlight=False)

    def tell(self, fact: dict) -> None:
        from alloclab.report.tune import fact_line
        console.print(Text(f"{fact_line(fact)}.", style="bold"), highlight=False)


MAX_RUNS = typer.Option(None, "--max-runs", rich_help_panel="Variants and runs",
                        show_default="the file's, else 300, raised to what the budget left fits",
                        help="At most this many runs per variant in the race, never raised.")


@app.command(cls=TuneCommand, context_settings={"allow_interspersed_args": False})
@experiment_options(only=TAKES, allocator=ALLOCATOR, max_runs=MAX_RUNS,
                    budget=budget_option(None, f"a command's {defaults.TUNE.budget}, a file's own"))
def tune(
    target: list[str] = typer.Argument(..., metavar="recipe:NAME | FILE.toml | -- CMD [ARGS]...",
                                       help="A recipe or experiment file, or the program to run after --."),
    metric: list[str] = MetricOption,
    shell: bool = ShellOption,
    param: list[str] = typer.Option([], "--param", help="A file's parameter: NAME=VALUE; repeat."),
    client: list[str] = typer.Option([], "--client", show_default="all of them",
                                     help="A file's [[client]] (or [[command]]) to tune on, by name; repeat."),
    screen: str = typer.Option("auto", "--screen", help="auto: screen the candidates with a few runs each, then race "
                               "the finalists, where racing them all would not fit half the budget; always; never."),
    *, opts: ExperimentOptions,
) -> None:
    """Find the allocator and the tuning for your program: fingerprint it under each allocator, read what
    it does and where its memory goes, turn that into settings to try, race them on the real program,
    and say which is best and why."""
    from alloclab.tune.session import TuneOptions, TuneRun

    flow.check_first(opts)
    options = TuneOptions(opts.db, defaults.seconds(opts.budget) if opts.budget else None, tuple(opts.allocator),
                          screen, opts.min_effect, opts.max_rss_increase, opts.timeout, opts.seed, opts.warmup,
                          opts.max_runs, not opts.no_verify)
    workloads, cleanup, plan_defaults, title, question = workloads_of(
        target, metric, shell, param, client, note=lambda text: err.print(text, style="yellow", highlight=False))
    try:
        outcome = TuneRun(options, workloads, plan_defaults, title, _UI(), started=_command_began(),
                          question=question).run()
    finally:
        cleanup()
    if outcome.results is None:
        from alloclab.report.tune import stop_line
        style, text = stop_line(outcome.stop, outcome.stop_data)
        console.print(text, style=style, highlight=False)
        console.print(f"Results stored in {outcome.store_path} (diagnosis: experiment {outcome.diagnosis_id}).",
                      highlight=False)
        if opts.report or opts.report_file:
            err.print(f"No report written: tune raced nothing, so there is no race to report; its answer is "
                      f"the lines above (the diagnosis is experiment {outcome.diagnosis_id}).", style="yellow",
                      highlight=False)
        if outcome.stop.exit_code:
            raise typer.Exit(outcome.stop.exit_code)
        return
    draw_early(opts.report, opts.report_file)
    show(outcome.results, outcome.store_path, details=opts.details, exports=opts.exports(),
         report_format=opts.report, report_file=opts.report_file)
    outcome.keep()


# What is left after the race for the answer's analysis and rendering (1.3 s for `report` of a
# race of 9 variants on the development VM): the budget, timed from outside, includes it.
ANSWER_S = 1.5


def _command_began() -> float:
    """When this process started, on time.monotonic()'s clock, less the answer's time: a budget timed
    from outside (`time alloclab tune --budget 4m ...`) is the budget."""
    import time

    import psutil

    age = max(0.0, time.time() - psutil.Process().create_time())
    return time.monotonic() - age - ANSWER_S
