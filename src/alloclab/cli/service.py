"""`alloclab run FILE.toml | recipe:NAME` and `alloclab recipes`: experiments from files."""

from __future__ import annotations

from typing import Optional

import typer
from rich.text import Text

from alloclab import defaults
from alloclab.catalog import allocators as cat
from alloclab.cli import experiment_flow as flow
from alloclab.cli.app import ListFormatOption, app, console, err
from alloclab.cli.experiment_options import ExperimentOptions, budget_option, experiment_options, max_runs_option, warmup_option
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
        err.print(f"Skipping variants whose allocator is not installed: {', '.join(skipped)} "
                  f"(`alloclab allocators` shows the install line).", style="yellow", highlight=False)
    return keep


@app.command("run")
@experiment_options(budget=budget_option(None, f"the file's, else {defaults.RUN.budget}"),
                    warmup=warmup_option(None, f"the file's, else {defaults.WARMUP}"),
                    max_runs=max_runs_option(f"the file's, else {defaults.RUN.max_runs}"))
def run_file(
    target: str = typer.Argument(..., metavar="FILE.toml|recipe:NAME", help="An experiment file, or recipe:NAME (see `alloclab recipes`)."),
    param: list[str] = typer.Option([], "--param", help="Override a parameter of the file: NAME=VALUE; repeat."),
    idle: Optional[float] = typer.Option(None, "--idle", show_default="the file's", help="Service mode: seconds of rest after the load before the last memory reading."),
    client: list[str] = typer.Option([], "--client", show_default="all of them", help="Run only this [[client]] (or [[command]]) of the file, by name; repeat."),
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
                          note=lambda text: err.print(text, style="yellow", highlight=False))
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
def recipes(fmt: str = ListFormatOption) -> None:
    """List the shipped recipes: what each runs and measures, and what it needs installed."""
    import json

    from alloclab.workloads import experiment_file
    from alloclab.workloads.primary import primary_metric

    rows = []
    for name in experiment_file.recipe_names():
        ef = experiment_file.resolve(experiment_file.RECIPE_PREFIX + name)
        measures = []
        for load in ef.loads:
            m = primary_metric(ef.metric_defs(load))
            measures.append({"load": load.name, "metric": m.name if m else "wall_s", "unit": m.unit if m else "s"})
        needs = {r.package: r.present() for r in ef.requires}
        rows.append({"recipe": f"{experiment_file.RECIPE_PREFIX}{name}", "runs": ef.description.split(";")[0],
                     "measures": measures, "server_memory": ef.service is not None,
                     "needs": [{"package": pkg, "found": found} for pkg, found in needs.items()],
                     "budget": ef.budget or defaults.RUN.budget, "max_runs": ef.max_runs})
    if fmt == "json":
        typer.echo(json.dumps(rows, indent=1))
        return
    missing_all = sorted({n["package"] for r in rows for n in r["needs"] if not n["found"]})
    for r in rows:
        console.print(Text.assemble((r["recipe"], "bold"), f"  {r['runs']}"), highlight=False)
        said = "; ".join(f"{m['load']}: {m['metric']} ({m['unit']})" for m in r["measures"])
        console.print(f"  measures: {said}" + (", and the server's memory after each phase"
                                                        if r["server_memory"] else ""), highlight=False)
        missing = [n["package"] for n in r["needs"] if not n["found"]]
        console.print(Text.assemble("  needs: " + ", ".join(n["package"] for n in r["needs"]) + " (",
                                    (f"missing: {', '.join(missing)}", "red") if missing else ("all found", "green"),
                                    ")"), highlight=False)
    if missing_all:
        console.print(f"To install what is missing: apt-get install -y {' '.join(missing_all)}")
    console.print("Run one with `alloclab run recipe:NAME` (until decided, within its budget), or tune it with "
                  "`alloclab tune recipe:NAME`; override a parameter with --param NAME=VALUE. What each measured "
                  "with its defaults: docs/results/recipes.md.", highlight=False)
