"""Command line entry point: the commands of the core (allocators, compare, report, experiments).

Other commands register themselves on the same app from their own modules in this package.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from alloclab.catalog import allocators as cat
from alloclab.cli.app import (AblateOption, AllocatorOption, CallGraphOption, DbOption, DetailsOption,
    ExportJsonOption, FailIfWorseOption, MaxRssIncreaseOption, MaxRunsOption, MetricOption, MinEffectOption,
    FingerprintOption, NoVerifyOption, ProfileOption, ProfileRunsOption, ReportFileOption, ReportOption, RunsOption, SeedOption,
    ShellOption, app, budget_option, console, decision_settings, err, gate, run_experiment,
    show, timeout_option, warmup_option)
from alloclab.cli.outputs import check_outputs
from alloclab.errors import AlloclabError
from alloclab.fleet import cli_glue as fleet_cli
from alloclab.store.db import Store


def _sigterm_as_interrupt(*_):
    raise KeyboardInterrupt


def main() -> None:
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    # Started from a non-interactive shell's background job, a process inherits SIGINT ignored and
    # Python then never raises KeyboardInterrupt: Ctrl-C (and kill -INT) must still stop the
    # experiment, kill its children and keep the runs measured so far.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _register_commands()
    try:
        app()
    except AlloclabError as exc:
        # Messages are plain text: "[params]" or "alloclab[fleet]" in one must not read as markup.
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)


def _register_commands() -> None:
    """Import the modules whose commands register on `app`."""
    import importlib
    for name in ("suite", "service", "profile", "reports", "sweep"):
        importlib.import_module(f"alloclab.cli.{name}")


# --- allocators -------------------------------------------------------------------------------

@app.command()
def allocators() -> None:
    """List the catalog: found or missing, version, library, tunables, release call."""
    catalog = cat.load_catalog()
    t = Table(title="Allocators", show_lines=True)
    for col in ("name", "status", "version", "library", "tunables", "release to OS"):
        t.add_column(col)
    missing = []
    for a in catalog.allocators.values():
        path = cat.locate(a)
        found = a.is_system or path is not None
        if not found:
            missing.append(a.name)
        t.add_row(a.name, "[green]found[/]" if found else f"[red]missing[/]\napt-get install -y {a.package}",
                  cat.version_of(a, path) if found else "",
                  "(libc, no preload)" if a.is_system else str(path or ""),
                  ", ".join(tn.name for tn in a.tunables),
                  a.release_call)
    console.print(t)
    if missing:
        console.print(f"Missing: {', '.join(missing)}. Install with: {catalog.install_line(missing)}")
    console.print("A variant is NAME[:VAR=VALUE,...]\\[@LABEL], e.g. glibc:MALLOC_TOP_PAD_=64M; "
                  "any path to a .so is a custom allocator.")


@app.command(context_settings={"allow_interspersed_args": False})
def compare(
    command: list[str] = typer.Argument(..., metavar="-- CMD [ARGS]...", help="The program to run, after --."),
    allocator: list[str] = AllocatorOption,
    runs: Optional[int] = RunsOption,
    warmup: int = warmup_option(1),
    metric: list[str] = MetricOption,
    timeout: Optional[float] = timeout_option(None),
    seed: int = SeedOption,
    shell: bool = ShellOption,
    no_verify: bool = NoVerifyOption,
    fingerprint: bool = FingerprintOption,
    db: Path = DbOption,
    export_json: Optional[Path] = ExportJsonOption,
    details: bool = DetailsOption,
    min_effect: float = MinEffectOption,
    until_precise: Optional[str] = typer.Option(None, "--until-precise", help="Instead of until decided: add interleaved blocks until every primary metric's median CI half-width is below this, e.g. 2%."),
    max_runs: Optional[int] = MaxRunsOption,
    budget: str = budget_option("10m"),
    fail_if_worse: Optional[str] = FailIfWorseOption,
    report: Optional[str] = ReportOption,
    report_file: Optional[Path] = ReportFileOption,
    max_rss_increase: Optional[float] = MaxRssIncreaseOption,
    param: list[str] = typer.Option([], "--param", "-p", help="NAME=VALUES substituted for {NAME} in the command's arguments; lists (1,2,4) and ranges (1..16*2) sweep."),
    profile: bool = ProfileOption,
    profile_runs: int = ProfileRunsOption,
    call_graph: bool = CallGraphOption,
    ablate: Optional[str] = AblateOption,
    fleet: Optional[str] = fleet_cli.FleetOption,
    fleet_mode: str = fleet_cli.FleetModeOption,
    fleet_require_all: bool = fleet_cli.FleetRequireAllOption,
) -> None:
    """Run CMD under each allocator variant and compare speed and memory.

    Variants may sweep a tunable: -a 'glibc:MALLOC_TOP_PAD_=128K..256M*4' or
    -a 'jemalloc:MALLOC_CONF=dirty_decay_ms:{0,1000,10000}'."""
    from alloclab.cli import sweep as cli_sweep
    from alloclab.plan import param_sweep, sweep
    from alloclab.workloads.metrics import parse_metric_option
    from alloclab.measure.runner import Settings

    check_outputs(db=db, report=report, report_file=report_file, export_json=export_json)
    fleet_cli.check(fleet, fleet_mode, until_precise=until_precise, profile=profile)
    metrics = [parse_metric_option(m) for m in metric]
    specs, sweeps = sweep.plan_variants(allocator, ablate)
    params = param_sweep.expand_params(param)
    workloads = param_sweep.command_workloads(command, params, metrics, shell)
    sweeps += param_sweep.param_sweeps(workloads, params.swept)
    store = Store(db)
    err.print(f"Storing results in {store.path.resolve()}", highlight=False)
    settings = Settings(warmup=warmup, timeout_s=timeout, seed=seed, verify=not no_verify, fingerprint=fingerprint,
                        kind="compare", title=" ".join(command), extra_config=sweep.sweep_config(sweeps),
                        **decision_settings(runs, max_runs, budget, min_effect, first_look=10,
                                            default_max_runs=300, until_precise=until_precise,
                                            profile=profile))
    if profile:
        from alloclab.cli.profile import check_profiling
        check_profiling()
    if fleet:
        exp_id = fleet_cli.run(store, fleet, fleet_mode, fleet_require_all, "compare",
                               {"command": command, "param": param, "metric": metric, "shell": shell},
                               specs, settings, note=lambda text: err.print(text, highlight=False))
    else:
        exp_id = run_experiment(store, workloads, specs, settings)
    show(store, exp_id, details=details, min_effect=min_effect, export_json=export_json,
         report_format=report, report_file=report_file, max_rss_increase=max_rss_increase)
    if fleet:
        fleet_cli.show_hosts(store, exp_id, console, min_effect)
    if sweeps:
        cli_sweep.show_sweeps(store, exp_id, min_effect=min_effect)
    if profile:
        from alloclab.cli.profile import profile_after
        profile_after(store, exp_id, workloads, specs, runs=profile_runs, call_graph=call_graph, timeout_s=timeout)
    gate(store, exp_id, fail_if_worse, min_effect)


if __name__ == "__main__":
    main()
