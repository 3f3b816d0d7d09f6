"""The --fleet options of compare, suite and run, and the one call each makes. No Dask import here:
a command without --fleet never loads it."""

from __future__ import annotations

import dataclasses
from typing import Optional

import typer

from alloclab.errors import AlloclabError

FleetOption = typer.Option(None, "--fleet", metavar="ADDRESS",
                           help="Run on a Dask fleet: tcp://HOST:PORT, ssh://COORDINATOR,HOST1,... or local:N (docs/fleet.md).")
FleetModeOption = typer.Option("per-host", "--fleet-mode",
                               help="per-host: the whole experiment on every host; split: its blocks spread over identical hosts.")
FleetRequireAllOption = typer.Option(False, "--fleet-require-all",
                                     help="Stop when a host fails the pre-flight check, instead of leaving it out (named).")


def check(fleet: Optional[str], mode: str, **unsupported) -> None:
    """Refuse, before anything runs, what a fleet run cannot do yet."""
    if not fleet:
        return
    from alloclab.fleet.address import check_mode, parse
    parse(fleet)
    check_mode(mode)
    named = [k for k, v in unsupported.items() if v]
    if named:
        raise AlloclabError(f"{', '.join('--' + k.replace('_', '-') for k in named)} cannot be combined with --fleet yet: "
                            f"run without --fleet for that, or drop the option.")


def run(store, fleet: str, mode: str, require_all: bool, kind: str, inputs, variant_specs: list,
        settings, note) -> int:
    from alloclab.catalog.variants import VariantSpec, parse_variants
    from alloclab.fleet.address import parse
    from alloclab.fleet.client import FleetRun
    from alloclab.fleet.spec import SessionSpec, portable
    if mode == "split" and getattr(settings, "until_decided", False):
        raise AlloclabError("--fleet-mode split shares out a fixed number of blocks: give --runs N (each host then "
                            "runs its share). Measuring until decided works with --fleet-mode per-host, where each "
                            "host decides on its own runs.")
    # Sent as read (VariantSpec), not as text: a host resolves them against its own catalog. Only
    # the default list (every allocator installed here) is resolved here.
    specs = ([VariantSpec.of(s) for s in variant_specs] if variant_specs
             else [v.written for v in parse_variants([])])
    # A worker's store holds runs, not profiles: the fleet's answer is the runs'.
    settings = dataclasses.replace(settings, auto_profile=False)
    spec = SessionSpec(kind, portable(kind, inputs), specs, settings)
    return FleetRun(store, parse(fleet), mode, require_all, spec, settings.title, note=note).run()
