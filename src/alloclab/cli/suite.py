"""`alloclab suite`: the built-in workloads under every variant, one table each and a summary."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from alloclab.catalog import allocators as cat
from alloclab.cli import sweep as cli_sweep
from alloclab.fleet import cli_glue as fleet_cli
from alloclab.cli.app import (AblateOption, AllocatorOption, CallGraphOption, DbOption, DetailsOption,
    ExportJsonOption, FailIfWorseOption, MaxRssIncreaseOption, MaxRunsOption, MinEffectOption,
    FingerprintOption, NoVerifyOption, ProfileOption, ProfileRunsOption, ReportFileOption, ReportOption, RunsOption, SeedOption,
    app, budget_option, console, decision_settings, err, gate, run_experiment,
    show, timeout_option, warmup_option)
from alloclab.cli.outputs import check_outputs
from alloclab.store.db import Store
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


def _ratio_text(g, invert_sign: bool = False) -> str:
    if g is None or not math.isfinite(g.ratio):
        return "n/a"
    return f"{g.ratio:.3f}x [{g.ci_low:.3f}, {g.ci_high:.3f}]"


def print_summary(store: Store, exp_id: int, min_effect: float, a=None) -> None:
    """`a`: the experiment's analysis with this min_effect, when the caller has it already."""
    from alloclab.stats.analysis import analyze, summarize_variants, winners
    from alloclab.stats.estimates import format_comparison

    a = a or analyze(store.load(exp_id), min_effect=min_effect)
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
def suite(
    workload: list[str] = typer.Option([], "--workload", "-w", help="Built-in workload; repeat. Default: all."),
    allocator: list[str] = AllocatorOption,
    runs: Optional[int] = RunsOption,
    max_runs: Optional[int] = MaxRunsOption,
    budget: str = budget_option("3m"),
    fail_if_worse: Optional[str] = FailIfWorseOption,
    warmup: int = warmup_option(1),
    quick: bool = typer.Option(False, "--quick", help="Small sizes (about 0.2-0.5 s a run)."),
    param: list[str] = typer.Option([], "--param", "-p", help="Workload parameter NAME=VALUE; lists (threads=1,2,4,8) and ranges (1..16*2) sweep."),
    timeout: Optional[float] = timeout_option(120.0),
    seed: int = SeedOption,
    no_verify: bool = NoVerifyOption,
    fingerprint: bool = FingerprintOption,
    list_: bool = typer.Option(False, "--list", help="List the built-in workloads and exit."),
    db: Path = DbOption,
    export_json: Optional[Path] = ExportJsonOption,
    details: bool = DetailsOption,
    min_effect: float = MinEffectOption,
    profile: bool = ProfileOption,
    profile_runs: int = ProfileRunsOption,
    call_graph: bool = CallGraphOption,
    ablate: Optional[str] = AblateOption,
    report: Optional[str] = ReportOption,
    report_file: Optional[Path] = ReportFileOption,
    max_rss_increase: Optional[float] = MaxRssIncreaseOption,
    fleet: Optional[str] = fleet_cli.FleetOption,
    fleet_mode: str = fleet_cli.FleetModeOption,
    fleet_require_all: bool = fleet_cli.FleetRequireAllOption,
) -> None:
    """Run the built-in workloads (modelled on real allocator-bound programs) under each variant."""
    if list_:
        print_catalog()
        return
    from alloclab.plan import param_sweep, sweep
    from alloclab.measure.runner import Settings
    from alloclab.workloads import builtin

    check_outputs(db=db, report=report, report_file=report_file, export_json=export_json)
    fleet_cli.check(fleet, fleet_mode, profile=profile)
    names = workload or list(builtin.registry())
    for name in names:
        builtin.get(name)  # unknown names fail before anything is compiled
    params = param_sweep.expand_params(param)
    workloads = param_sweep.builtin_workloads(names, params, quick)
    specs, sweeps = sweep.plan_variants(allocator, ablate)
    specs = specs or default_variants()
    sweeps += param_sweep.param_sweeps(workloads, params.swept)
    store = Store(db)
    err.print(f"Storing results in {store.path.resolve()}", highlight=False)
    settings = Settings(warmup=warmup, timeout_s=timeout, seed=seed, verify=not no_verify, fingerprint=fingerprint, kind="suite",
                        title="suite: " + ", ".join(names) + (" (quick)" if quick else ""),
                        extra_config=sweep.sweep_config(sweeps),
                        **decision_settings(runs, max_runs, budget, min_effect, first_look=8, default_max_runs=80,
                                            profile=profile))
    if profile:
        from alloclab.cli.profile import check_profiling
        check_profiling()
    if fleet:
        exp_id = fleet_cli.run(store, fleet, fleet_mode, fleet_require_all, "suite",
                               {"workload": names, "param": param, "quick": quick}, specs, settings,
                               note=lambda text: err.print(text, highlight=False))
    else:
        exp_id = run_experiment(store, workloads, specs, settings)
    a = show(store, exp_id, details=details, min_effect=min_effect, export_json=export_json,
             report_format=report, report_file=report_file, max_rss_increase=max_rss_increase)
    if fleet:
        fleet_cli.show_hosts(store, exp_id, console, min_effect)
    print_summary(store, exp_id, min_effect, a)
    if sweeps:
        cli_sweep.show_sweeps(store, exp_id, min_effect=min_effect)
    if profile:
        from alloclab.cli.profile import profile_after
        profile_after(store, exp_id, workloads, specs, runs=profile_runs, call_graph=call_graph, timeout_s=timeout)
    gate(store, exp_id, fail_if_worse, min_effect)
