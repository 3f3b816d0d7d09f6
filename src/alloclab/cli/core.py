"""Command line entry point: the commands of the core (allocators, compare, report, experiments).

Other commands register themselves on the same app from their own modules in this package.
"""

from __future__ import annotations

import signal
import sys
from typing import Optional

import typer
from rich.table import Table
from rich.text import Text

from alloclab.catalog import allocators as cat
from alloclab import defaults
from alloclab.cli import experiment_flow as flow
from alloclab.cli.app import ListFormatOption, MetricOption, ShellOption, app, console, err
from alloclab.cli.experiment_options import RUNS_PANEL, ExperimentOptions, budget_option, experiment_options
from alloclab.errors import AlloclabError


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
        err.print(Text.assemble(("error:", "bold red"), f" {exc}"), highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)


def _register_commands() -> None:
    """Import the modules whose commands register on `app`."""
    import importlib
    for name in ("suite", "service", "profile", "reports", "sweep", "tune", "inspect"):
        importlib.import_module(f"alloclab.cli.{name}")


# --- alloclab --version ---------------------------------------------------------------------------

def _show_version(value: bool) -> None:
    """alloclab's version, glibc's, and each installed allocator's as the catalog's probe reads it
    from its library (what a bug report or a result's context needs), then exit."""
    if not value:
        return
    from alloclab import __version__

    lines = [("alloclab", __version__, ""), ("glibc", cat.glibc_version(), "")]
    missing = []
    for a in cat.load_catalog().allocators.values():
        if a.is_system:
            continue
        path = cat.locate(a)
        if path is None:
            missing.append(a.name)
        else:
            lines.append((a.name, cat.version_of(a, path), str(path)))
    width, vwidth = (max(len(line[k]) for line in lines) for k in (0, 1))
    for name, version, where in lines:
        typer.echo(f"{name:<{width}}  {version:<{vwidth}}  {where}".rstrip())
    if missing:
        typer.echo(f"not installed: {', '.join(missing)}")
    raise typer.Exit()


@app.callback()
def _alloclab(version: bool = typer.Option(False, "--version", is_eager=True, callback=_show_version,
                                           help="Print alloclab's version, glibc's and each installed allocator's, "
                                                "and exit.")) -> None:
    """Which memory allocator, and which tuning, is best for your program? Measured."""


# --- allocators -------------------------------------------------------------------------------

@app.command()
def allocators(fmt: str = ListFormatOption) -> None:
    """List the catalog: found or missing, version, library, tunables, release call."""
    catalog = cat.load_catalog()
    if fmt == "json":
        import json
        found = {a.name: (a.is_system or path is not None, path) for a in catalog.allocators.values()
                 for path in [cat.locate(a)]}
        typer.echo(json.dumps([{"name": a.name, "found": found[a.name][0],
                                "version": cat.version_of(a, found[a.name][1]) if found[a.name][0] else None,
                                "library": str(found[a.name][1]) if found[a.name][1] else None,
                                "package": a.package, "tunables": [t.name for t in a.tunables],
                                "release_call": a.release_call} for a in catalog.allocators.values()], indent=1))
        return
    t = Table(title="Allocators", show_lines=True)
    for col in ("name", "status", "version", "library", "tunables", "release to OS"):
        t.add_column(col, overflow="fold")   # a library's path wraps, never ends in "…"
    missing = []
    for a in catalog.allocators.values():
        path = cat.locate(a)
        found = a.is_system or path is not None
        if not found:
            missing.append(a.name)
        t.add_row(a.name, Text("found", style="green") if found else
                  Text.assemble(("missing", "red"), f"\napt-get install -y {a.package}"),
                  cat.version_of(a, path) if found else "",
                  f"(built into the program: a copy of {a.bundled}, no preload)" if a.bundled else
                  "(libc, no preload)" if a.is_system else str(path or ""),
                  ", ".join(tn.name for tn in a.tunables),
                  a.release_call)
    console.print(t)
    if missing:
        console.print(f"Missing: {', '.join(missing)}. Install with: {catalog.install_line(missing)}")
    console.print(f"A variant is NAME[:VAR=VALUE,...][@LABEL], e.g. {catalog.examples['setting']}; "
                  "any path to a .so is a custom allocator.")


@app.command(context_settings={"allow_interspersed_args": False})
@experiment_options(budget=budget_option(defaults.COMPARE.budget))
def compare(
    command: list[str] = typer.Argument(..., metavar="-- CMD [ARGS]...", help="The program to run, after --."),
    metric: list[str] = MetricOption,
    shell: bool = ShellOption,
    param: list[str] = typer.Option([], "--param", help="NAME=VALUES substituted for {NAME} in the command's arguments; lists (1,2,4) and ranges (1..16*2) sweep."),
    until_precise: Optional[str] = typer.Option(None, "--until-precise", rich_help_panel=RUNS_PANEL, help="Instead of until decided: add interleaved blocks until every primary metric's median CI half-width is below this, e.g. 2%."),
    *, opts: ExperimentOptions,
) -> None:
    """Run CMD under each allocator variant and compare speed and memory.

    Variants may sweep a tunable: -a 'glibc:MALLOC_TOP_PAD_=128K..256M*4' or
    -a 'jemalloc:MALLOC_CONF=dirty_decay_ms:{0,1000,10000}'."""
    from alloclab.measure.targets import CommandTarget, workloads_for
    from alloclab.plan import sweep

    flow.check_first(opts, until_precise=until_precise)
    target = CommandTarget(command, param, metric, shell)
    specs, sweeps = sweep.plan_variants(opts.allocator, opts.ablate)
    built = workloads_for(target, base=defaults.COMPARE)
    plan = flow.Plan("compare", built.title, built.workloads, specs, sweeps + built.sweeps, target, built.defaults,
                     until_precise=until_precise)
    flow.gate(flow.measure_and_show(opts, plan), opts)


if __name__ == "__main__":
    main()
