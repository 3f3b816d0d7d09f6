"""`alloclab suite`: the built-in workloads under every variant, one table each and a summary."""

from __future__ import annotations

import typer
from rich.table import Table

from alloclab import defaults
from alloclab.catalog import allocators as cat
from alloclab.cli import experiment_flow as flow
from alloclab.cli.app import app, console, timeout_option
from alloclab.cli.experiment_options import ExperimentOptions, budget_option, experiment_options, max_runs_option
from alloclab.catalog.variants import installed_variants


def default_variants() -> list[str]:
    """Every installed allocator, plus the tuned variants of suite.toml whose allocator is here."""
    from alloclab.workloads import builtin  # loads the measuring modules (psutil, pyelftools): not at start
    catalog = cat.load_catalog()
    specs = [v.spec for v in installed_variants(catalog)]
    for spec in builtin.suite_defaults():
        if cat.is_installed(catalog.get(spec.split(":", 1)[0])):
            specs.append(spec)
    return specs


def print_catalog() -> None:
    from alloclab.workloads import builtin
    t = Table(title="Built-in workloads", show_lines=True)
    for col in ("name", "what it does", "stands for", "primary metric", "parameters"):
        t.add_column(col)
    for d in builtin.registry().values():
        p = d.primary()
        t.add_row(d.name, d.description, d.stands_for,
                  f"{p.name} ({p.unit}, {'higher' if p.higher_is_better else 'lower'} is better)",
                  ", ".join(d.params))
    console.print(t)


@app.command()
@experiment_options(budget=budget_option(defaults.SUITE.budget), timeout=timeout_option(defaults.SUITE.timeout_s),
                    max_runs=max_runs_option(defaults.SUITE.max_runs))
def suite(
    workload: list[str] = typer.Option([], "--workload", show_default="all", help="Built-in workload; repeat."),
    quick: bool = typer.Option(False, "--quick", help="Small sizes (about 0.2-0.5 s a run)."),
    param: list[str] = typer.Option([], "--param", help="Workload parameter NAME=VALUE; lists (threads=1,2,4,8) and ranges (1..16*2) sweep."),
    list_: bool = typer.Option(False, "--list", help="List the built-in workloads and exit."),
    *, opts: ExperimentOptions,
) -> None:
    """Run the built-in workloads (modelled on real allocator-bound programs) under each variant."""
    if list_:
        print_catalog()
        return
    from alloclab.measure.targets import BuiltinTarget, workloads_for
    from alloclab.plan import sweep

    flow.check_first(opts)
    target = BuiltinTarget(workload, param, quick)
    specs, sweeps = sweep.plan_variants(opts.allocator, opts.ablate)
    built = workloads_for(target, base=defaults.SUITE)
    plan = flow.Plan("suite", built.title, built.workloads, specs or default_variants(), sweeps + built.sweeps,
                     target, built.defaults, summary=True)
    flow.gate(flow.measure_and_show(opts, plan), opts)
