"""`alloclab suite`: the built-in workloads under every variant, one table each and a summary."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from alloclab import defaults
from alloclab.catalog import allocators as cat
from alloclab.cli import experiment_flow as flow
from alloclab.cli.app import app, console, timeout_option
from alloclab.cli.experiment_options import ExperimentOptions, budget_option, experiment_options
from alloclab.catalog.variants import installed_variants

if TYPE_CHECKING:
    from alloclab.stats.analysis import Analysis


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


def _ratio_text(g, invert_sign: bool = False) -> str:
    if g is None or not math.isfinite(g.ratio):
        return "n/a"
    return f"{g.ratio:.3f}x [{g.ci_low:.3f}, {g.ci_high:.3f}]"


def print_summary(a: Analysis) -> None:
    from alloclab.stats.analysis import summarize_variants, winners
    from alloclab.stats.estimates import format_comparison

    t = Table(title="[bold]Summary across workloads[/] (baseline: " + a.labels[a.baseline_idx] + ")",
              title_justify="left")
    for col in ("variant", "speed vs baseline (geomean, >1 faster)", "peak RSS vs baseline (geomean)",
                "significantly better on", "significantly worse on", "allocator"):
        t.add_column(col)
    for s in summarize_variants(a):
        status = "verified" if s.statuses == {"verified"} else ", ".join(sorted(s.statuses))
        t.add_row(s.label, _ratio_text(s.speed), _ratio_text(s.memory), ", ".join(s.better) or "-",
                  ", ".join(s.worse) or "-", status)
    console.print(t)
    for name, label, row in winners(a):
        if row is None:
            continue
        if label is None:
            console.print(f"{name}: no variant is significantly better than the baseline on {row.name}.")
            continue
        vi = a.labels.index(label)
        console.print(f"{name}: [bold]{label}[/] wins on {row.name} ({row.unit}): "
                      f"{format_comparison(row.cells[vi].comparison)}")


@app.command()
@experiment_options(budget=budget_option(defaults.SUITE.budget), timeout=timeout_option(defaults.SUITE.timeout_s))
def suite(
    workload: list[str] = typer.Option([], "--workload", "-w", help="Built-in workload; repeat. Default: all."),
    quick: bool = typer.Option(False, "--quick", help="Small sizes (about 0.2-0.5 s a run)."),
    param: list[str] = typer.Option([], "--param", "-p", help="Workload parameter NAME=VALUE; lists (threads=1,2,4,8) and ranges (1..16*2) sweep."),
    list_: bool = typer.Option(False, "--list", help="List the built-in workloads and exit."),
    *, opts: ExperimentOptions,
) -> None:
    """Run the built-in workloads (modelled on real allocator-bound programs) under each variant."""
    if list_:
        print_catalog()
        return
    from alloclab.plan import param_sweep, sweep
    from alloclab.workloads import builtin

    flow.check_first(opts)
    names = workload or list(builtin.registry())
    for name in names:
        builtin.get(name)  # unknown names fail before anything is compiled
    params = param_sweep.expand_params(param)
    workloads = param_sweep.builtin_workloads(names, params, quick)
    specs, sweeps = sweep.plan_variants(opts.allocator, opts.ablate)
    sweeps += param_sweep.param_sweeps(workloads, params.swept)
    plan = flow.Plan("suite", "suite: " + ", ".join(names) + (" (quick)" if quick else ""), workloads,
                     specs or default_variants(), sweeps, {"workload": names, "param": param, "quick": quick},
                     defaults.SUITE, after_table=print_summary)
    flow.gate(flow.measure_and_show(opts, plan), opts)
