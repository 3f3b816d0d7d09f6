"""`alloclab run FILE.toml | recipe:NAME` and `alloclab recipes`: experiments from files."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.table import Table

from alloclab.catalog import allocators as cat
from alloclab.cli import sweep as cli_sweep
from alloclab.cli.app import (AblateOption, AllocatorOption, CallGraphOption, DbOption, DetailsOption,
    ExportJsonOption, FailIfWorseOption, MaxRssIncreaseOption, MaxRunsOption, MinEffectOption,
    FingerprintOption, NoVerifyOption, ProfileOption, ProfileRunsOption, ReportFileOption, ReportOption, RunsOption, SeedOption,
    app, budget_option, console, decision_settings, err, gate, run_experiment,
    show, timeout_option, warmup_option)
from alloclab.cli.outputs import check_outputs
from alloclab.errors import AlloclabError
from alloclab.fleet import cli_glue as fleet_cli
from alloclab.store.db import Store
from alloclab.catalog.variants import parse_variant

if TYPE_CHECKING:  # loaded by the commands, not when `alloclab` starts
    from alloclab.workloads import experiment_file

DEFAULT_RUNS = 5


def _default_variants(ef: experiment_file.ExperimentFile) -> list[str]:
    """The file's variants whose allocator is installed; the others are named, not silently dropped."""
    catalog = cat.load_catalog()
    keep, skipped = [], []
    for spec in ef.variants:
        try:
            parse_variant(spec, catalog)
            keep.append(spec)
        except AlloclabError as exc:
            if "is not installed" not in str(exc):
                raise
            skipped.append(spec)
    if skipped:
        err.print(f"[yellow]Skipping variants whose allocator is not installed: {', '.join(skipped)} "
                  f"(`alloclab allocators` shows the install line).[/]", highlight=False)
    return keep


@app.command("run")
def run_file(
    target: str = typer.Argument(..., metavar="FILE.toml|recipe:NAME", help="An experiment file, or recipe:NAME (see `alloclab recipes`)."),
    allocator: list[str] = AllocatorOption,
    param: list[str] = typer.Option([], "--param", "-p", help="Override a parameter of the file: NAME=VALUE; repeat."),
    runs: Optional[int] = RunsOption,
    max_runs: Optional[int] = MaxRunsOption,
    budget: Optional[str] = budget_option(None, "default: the file's, else 25m"),
    fail_if_worse: Optional[str] = FailIfWorseOption,
    warmup: Optional[int] = warmup_option(None, "default: the file's, else 1"),
    timeout: Optional[float] = timeout_option(None),
    seed: int = SeedOption,
    no_verify: bool = NoVerifyOption,
    fingerprint: bool = FingerprintOption,
    idle: Optional[float] = typer.Option(None, "--idle", help="Service mode: seconds of rest after the load before the last memory reading (default: the file's)."),
    keep: bool = typer.Option(False, "--keep", help="Keep the working directory (data, logs) and print where it is."),
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
    """Run an experiment file: a server under each allocator variant while a client drives load
    (or a command under each variant), with setup and teardown around it."""
    from alloclab.workloads import experiment_file
    from alloclab.measure.service import executors as service_executors
    from alloclab.plan import sweep
    from alloclab.measure.runner import Settings

    check_outputs(db=db, report=report, report_file=report_file, export_json=export_json)
    fleet_cli.check(fleet, fleet_mode, profile=profile, keep=keep)
    ef = experiment_file.resolve(target)
    if not fleet:  # a fleet's hosts are checked instead, each in its pre-flight check
        ef.check_requirements()
    params = ef.with_params(experiment_file.param_options(param))
    if idle is not None:
        if ef.service is None or idle < 0:
            raise AlloclabError("--idle applies to a file with a [service], and cannot be negative.")
        ef.service = dataclasses.replace(ef.service, idle=idle)
    # -a may sweep a tunable (glibc:MALLOC_TOP_PAD_={0,8M,64M}) like compare's.
    variants, sweeps = sweep.plan_variants(allocator, ablate)
    variants = variants or _default_variants(ef)
    store = Store(db)
    err.print(f"Storing results in {store.path.resolve()}", highlight=False)
    workloads, session = service_executors.workloads(ef, params, keep=keep,
                                                     note=lambda text: err.print(f"[yellow]{text}[/]", highlight=False))
    if profile:
        from alloclab.measure.profile import record
        from alloclab.cli.profile import check_profiling
        check_profiling()
        if profile_runs < 1:
            raise AlloclabError(f"--profile-runs must be at least 1 (got {profile_runs}).")
        for w in workloads:
            record.check_profilable(w)
    settings = Settings(warmup=warmup if warmup is not None else (ef.warmup if ef.warmup is not None else 1),
                        timeout_s=timeout, seed=seed, verify=not no_verify, fingerprint=fingerprint, kind="run", title=ef.name,
                        extra_config=sweep.sweep_config(sweeps),
                        **decision_settings(runs, max_runs if max_runs is not None else ef.max_runs,
                                            budget or ef.budget or "25m", min_effect,
                                            first_look=ef.runs or DEFAULT_RUNS, default_max_runs=30,
                                            profile=profile))
    try:
        if fleet:
            exp_id = fleet_cli.run(store, fleet, fleet_mode, fleet_require_all, "run",
                                   {"target": target, "param": param, "idle": idle}, variants, settings,
                                   note=lambda text: err.print(text, highlight=False))
        else:
            exp_id = run_experiment(store, workloads, variants, settings)
        show(store, exp_id, details=details, min_effect=min_effect, export_json=export_json,
             report_format=report, report_file=report_file,
             max_rss_increase=max_rss_increase)
        if fleet:
            fleet_cli.show_hosts(store, exp_id, console, min_effect)
        if sweeps:
            cli_sweep.show_sweeps(store, exp_id, min_effect=min_effect)
        if profile:
            from alloclab.cli.profile import profile_after
            # The session is set up afresh for the profiled runs (the runner cleaned it up).
            profile_after(store, exp_id, workloads, variants, runs=profile_runs, call_graph=call_graph,
                          timeout_s=timeout)
    finally:
        session.cleanup()  # also done by the runner; here for errors raised before it started
    if keep and session.workdir is not None:
        console.print(f"Working directory kept: {session.workdir}")
    gate(store, exp_id, fail_if_worse, min_effect)


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
        limits = f"until decided, budget {ef.budget or '25m'}" + (f", at most {ef.max_runs} runs" if ef.max_runs else "")
        t.add_row(f"recipe:{name}", ef.description, needs, params,
                  limits + "\n" + (f"measured: {ef.measured}" if ef.measured else "not measured with defaults yet"))
    console.print(t)
    if missing_all:
        console.print(f"To install what is missing: apt-get install -y {' '.join(sorted(missing_all))}")
    console.print("Run one with `alloclab run recipe:NAME`; override a parameter with --param NAME=VALUE.")
