"""Command line entry point: the commands of the core (allocators, compare, report, experiments).

Other commands register themselves on the same app from their own cli_*.py modules.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from . import catalog as cat
from .cli_app import (
    AblateOption, CallGraphOption, DbOption, MaxRssIncreaseOption, MinEffectOption,
    ProfileRunsOption, ReportFileOption, ReportOption, app, console, err, percent, percent_or_none,
    run_experiment, show,
)
from .errors import AlloclabError
from .store import Store


def _sigterm_as_interrupt(*_):
    raise KeyboardInterrupt


def main() -> None:
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    _register_commands()
    try:
        app()
    except AlloclabError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)


def _register_commands() -> None:
    """Import the modules whose commands register on `app` (each is optional while built)."""
    import importlib
    for name in ("cli_suite", "cli_service", "cli_profile", "cli_reports", "cli_sweep"):
        try:
            importlib.import_module(f"alloclab.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"alloclab.{name}":
                raise


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
    allocator: list[str] = typer.Option([], "-a", "--allocator", help="Variant NAME[:VAR=VALUE,...]\\[@LABEL]; repeat. Default: every installed allocator."),
    runs: int = typer.Option(10, "--runs", "-n", help="Measured runs per variant."),
    warmup: int = typer.Option(1, "--warmup", help="Warm-up blocks, discarded (the first one also verifies the allocator)."),
    metric: list[str] = typer.Option([], "--metric", "-m", help="NAME=REGEX[:higher|lower] or NAME=json:KEY; repeat."),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="Kill a run (its whole process group) after this many seconds."),
    seed: int = typer.Option(1, "--seed", help="Seed of the randomized run order."),
    shell: bool = typer.Option(False, "--shell", help="Run the command through /bin/sh -c."),
    no_verify: bool = typer.Option(False, "--no-verify", help="Skip the LD_DEBUG verification run."),
    db: Path = DbOption,
    export_json: Optional[Path] = typer.Option(None, "--export-json", help="Write raw samples and metadata as JSON."),
    details: bool = typer.Option(False, "--details", help="Show every standard measure."),
    min_effect: str = MinEffectOption,
    until_precise: Optional[str] = typer.Option(None, "--until-precise", help="Add interleaved blocks until every primary metric's median CI half-width is below this, e.g. 2%."),
    max_runs: int = typer.Option(50, "--max-runs", help="With --until-precise: at most this many runs per variant."),
    max_seconds: float = typer.Option(1800, "--max-seconds", help="With --until-precise: stop adding blocks after this long."),
    report: Optional[str] = ReportOption,
    report_file: Optional[Path] = ReportFileOption,
    max_rss_increase: Optional[str] = MaxRssIncreaseOption,
    param: list[str] = typer.Option([], "--param", "-p", help="NAME=VALUES substituted for {NAME} in the command's arguments; lists (1,2,4) and ranges (1..16*2) sweep."),
    profile: bool = typer.Option(False, "--profile", help="Afterwards, profile each variant with perf record: the allocator's share of CPU."),
    profile_runs: int = ProfileRunsOption,
    call_graph: bool = CallGraphOption,
    ablate: Optional[str] = AblateOption,
) -> None:
    """Run CMD under each allocator variant and compare speed and memory.

    Variants may sweep a tunable: -a 'glibc:MALLOC_TOP_PAD_=128K..256M*4' or
    -a 'jemalloc:MALLOC_CONF=dirty_decay_ms:{0,1000,10000}'."""
    from . import cli_sweep, sweep
    from .metrics import parse_metric_option
    from .runner import Settings

    metrics = [parse_metric_option(m) for m in metric]
    specs, sweeps = sweep.plan_variants(allocator, ablate)
    params = sweep.expand_params(param)
    workloads = sweep.command_workloads(command, params, metrics, shell)
    sweeps += sweep.param_sweeps(workloads, params.swept)
    store = Store(db)
    err.print(f"Storing results in {store.path.resolve()}", highlight=False)
    settings = Settings(runs=runs, warmup=warmup, timeout_s=timeout, seed=seed, verify=not no_verify,
                        kind="compare", title=" ".join(command),
                        until_precise=percent(until_precise) if until_precise else None,
                        max_runs=max_runs, max_seconds=max_seconds, extra_config=sweep.sweep_config(sweeps))
    if profile:
        from .cli_profile import check_profiling
        check_profiling()
    exp_id = run_experiment(store, workloads, specs, settings)
    show(store, exp_id, details=details, min_effect=percent(min_effect), export_json=export_json,
         report_format=report, report_file=report_file, max_rss_increase=percent_or_none(max_rss_increase))
    if sweeps:
        cli_sweep.show_sweeps(store, exp_id, min_effect=percent(min_effect))
    if profile:
        from .cli_profile import profile_after
        profile_after(store, exp_id, workloads, specs, runs=profile_runs, call_graph=call_graph, timeout_s=timeout)


if __name__ == "__main__":
    main()
