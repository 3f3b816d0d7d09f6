"""`alloclab run FILE.toml | recipe:NAME` and `alloclab recipes`: experiments from files."""

from __future__ import annotations

from typing import Optional

import typer
from rich.table import Table

from alloclab import defaults
from alloclab.catalog import allocators as cat
from alloclab.cli import experiment_flow as flow
from alloclab.cli.app import app, console, err
from alloclab.cli.experiment_options import ExperimentOptions, budget_option, experiment_options, warmup_option
from alloclab.errors import AlloclabError
from alloclab.catalog.variants import parse_variant

def _default_variants(target: str) -> list:
    """The variants of the file `target` whose allocator is installed, as read once (VariantSpec); the
    others are named, not silently dropped."""
    from alloclab.workloads import experiment_file

    ef = experiment_file.resolve(target)
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
    from alloclab.measure.targets import FileTarget, workloads_for
    from alloclab.plan import sweep

    flow.check_first(opts, keep=keep)
    target = FileTarget(target, param, idle, client, keep)
    # -a may sweep a tunable (glibc:MALLOC_TOP_PAD_={0,8M,64M}) like compare's.
    variants, sweeps = sweep.plan_variants(opts.allocator, opts.ablate)
    # A fleet's hosts are checked instead of this one, each in its pre-flight check.
    built = workloads_for(target, base=defaults.RUN, requirements=not opts.fleet,
                          note=lambda text: err.print(f"[yellow]{text}[/]", highlight=False))
    plan = flow.Plan("run", built.title, built.workloads, variants or _default_variants(target.target), sweeps,
                     target, built.defaults)
    try:
        r = flow.measure_and_show(opts, plan)
    finally:
        built.cleanup()  # also done by the runner; here for errors raised before it started
    if keep and built.session.workdir is not None:
        console.print(f"Working directory kept: {built.session.workdir}")
    flow.gate(r, opts)


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
