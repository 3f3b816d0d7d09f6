"""`alloclab run FILE.toml | recipe:NAME` and `alloclab recipes`: experiments from files."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Optional

import typer
from rich.table import Table

from alloclab import defaults
from alloclab.catalog import allocators as cat
from alloclab.cli import experiment_flow as flow
from alloclab.cli.app import app, console, err
from alloclab.cli.experiment_options import ExperimentOptions, budget_option, experiment_options, warmup_option
from alloclab.errors import AlloclabError
from alloclab.catalog.variants import parse_variant

if TYPE_CHECKING:  # loaded by the commands, not when `alloclab` starts
    from alloclab.workloads import experiment_file

def _default_variants(ef: experiment_file.ExperimentFile) -> list:
    """The file's variants whose allocator is installed, as read once (VariantSpec); the others are
    named, not silently dropped."""
    catalog = cat.load_catalog()
    keep, skipped = [], []
    for spec in ef.variants:
        try:
            keep.append(parse_variant(spec, catalog).written)
        except AlloclabError as exc:
            if "is not installed" not in str(exc):
                raise
            skipped.append(spec)
    if skipped:
        err.print(f"[yellow]Skipping variants whose allocator is not installed: {', '.join(skipped)} "
                  f"(`alloclab allocators` shows the install line).[/]", highlight=False)
    return keep


@app.command("run")
@experiment_options(budget=budget_option(None, f"default: the file's, else {defaults.RUN.budget}"),
                    warmup=warmup_option(None, f"default: the file's, else {defaults.WARMUP}"))
def run_file(
    target: str = typer.Argument(..., metavar="FILE.toml|recipe:NAME", help="An experiment file, or recipe:NAME (see `alloclab recipes`)."),
    param: list[str] = typer.Option([], "--param", "-p", help="Override a parameter of the file: NAME=VALUE; repeat."),
    idle: Optional[float] = typer.Option(None, "--idle", help="Service mode: seconds of rest after the load before the last memory reading (default: the file's)."),
    client: list[str] = typer.Option([], "--client", help="Run only this [[client]] (or [[command]]) of the file, by name; repeat. Default: all of them."),
    keep: bool = typer.Option(False, "--keep", help="Keep the working directory (data, logs) and print where it is."),
    *, opts: ExperimentOptions,
) -> None:
    """Run an experiment file: a server under each allocator variant while a client drives load
    (or a command under each variant), with setup and teardown around it."""
    from alloclab.workloads import experiment_file
    from alloclab.measure.service import executors as service_executors
    from alloclab.plan import sweep

    flow.check_first(opts, keep=keep)
    ef = experiment_file.resolve(target)
    if not opts.fleet:  # a fleet's hosts are checked instead, each in its pre-flight check
        ef.check_requirements()
    params = ef.with_params(experiment_file.param_options(param))
    if idle is not None:
        if ef.service is None or idle < 0:
            raise AlloclabError("--idle applies to a file with a [service], and cannot be negative.")
        ef.service = dataclasses.replace(ef.service, idle=idle)
    # -a may sweep a tunable (glibc:MALLOC_TOP_PAD_={0,8M,64M}) like compare's.
    variants, sweeps = sweep.plan_variants(opts.allocator, opts.ablate)
    workloads, session = service_executors.workloads(ef, params, keep=keep, clients=client,
                                                     note=lambda text: err.print(f"[yellow]{text}[/]", highlight=False))
    plan = flow.Plan("run", ef.name, workloads, variants or _default_variants(ef), sweeps,
                     {"target": target, "param": param, "idle": idle, "client": client}, file_defaults(ef))
    try:
        r = flow.measure_and_show(opts, plan)
    finally:
        session.cleanup()  # also done by the runner; here for errors raised before it started
    if keep and session.workdir is not None:
        console.print(f"Working directory kept: {session.workdir}")
    flow.gate(r, opts)


def file_defaults(ef: experiment_file.ExperimentFile) -> defaults.CommandDefaults:
    """run's defaults where the file's [experiment] does not set them."""
    d = defaults.RUN
    return dataclasses.replace(d, first_look=ef.runs or d.first_look,
                               max_runs=ef.max_runs if ef.max_runs is not None else d.max_runs,
                               budget=ef.budget or d.budget, warmup=ef.warmup if ef.warmup is not None else d.warmup)


@app.command()
def recipes() -> None:
    """List the shipped experiment recipes and what each needs installed."""
    from alloclab.workloads import experiment_file

    t = Table(title="Recipes", show_lines=True)
    for col in ("recipe", "what it measures", "needs", "parameters (default)", "time (default run)"):
        t.add_column(col)
    missing_all: set[str] = set()
    for name in experiment_file.recipe_names():
        ef = experiment_file.resolve(experiment_file.RECIPE_PREFIX + name)
        missing = ef.missing()
        missing_all |= {r.package for r in missing}
        needs = "\n".join(f"{r.program} ({r.package}): " + ("[green]found[/]" if r.present() else "[red]missing[/]")
                          for r in ef.requires)
        params = ", ".join(f"{k}={v}" for k, v in ef.params.items())
        limits = f"until decided, budget {ef.budget or defaults.RUN.budget}" + (f", at most {ef.max_runs} runs" if ef.max_runs else "")
        t.add_row(f"recipe:{name}", ef.description, needs, params,
                  limits + "\n" + (f"measured: {ef.measured}" if ef.measured else "not measured with defaults yet"))
    console.print(t)
    if missing_all:
        console.print(f"To install what is missing: apt-get install -y {' '.join(sorted(missing_all))}")
    console.print("Run one with `alloclab run recipe:NAME`; override a parameter with --param NAME=VALUE.")
