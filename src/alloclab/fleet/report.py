"""The per-host part of a fleet experiment's terminal report: one table group per host, then
where the hosts' verdicts agree and where they differ."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.text import Text

from alloclab.report import terminal
from alloclab.store.db import Experiment
from alloclab.fleet import hosts as H

if TYPE_CHECKING:
    from alloclab.stats.results import Results


def per_host(e: Experiment) -> dict[str, Experiment]:
    """The experiment as each host alone measured it, for the Results' per-host analyses; {} for
    one that ran on one machine."""
    return {host: H.for_host(e, host) for host in H.hosts_of(e)}


def render_hosts(r: Results, console: Console, details: bool = False) -> None:
    """Each host, and how the hosts compare, from `r` built with hosts=per_host(r.experiment); with
    `details`, each host's tables (the short answer names the hosts and where they agree)."""
    e = r.experiment
    if not H.hosts_of(e):
        return
    fleet = e.config.fleet or {}
    analyses = r.hosts or {}
    for host, a in analyses.items():
        m = a.experiment.machine
        console.print(Text(f"host {host}: {m.cpu_model}, {m.usable_cores} cores, kernel {m.kernel}, "
                           f"glibc {m.glibc}, THP {m.thp}", style="bold"))
        if details:
            for w in a.workloads:
                console.print(Group(terminal.workload_table(a, w, details), *terminal.notes(a, w, details)))
            console.print()
    if not details:
        console.print()
    if fleet.get("mode") == "split" and len(analyses) > 1:
        console.print(Text("split mode: each host ran its share of the blocks (its tables with --details); the pooled "
                           "answer is the experiment's result, valid while the hosts are interchangeable:", style="dim"))
        effects = H.host_effects(analyses)
        for line in effects:
            console.print(Text(f"  hosts differ: {line}", style="bold yellow"))
        if effects:
            console.print(Text("  -> the hosts are not interchangeable for this workload: read the per-host tables, "
                               "or run with --fleet-mode per-host", style="dim"))
        else:
            console.print(Text("  no host differs significantly from the first on any primary metric "
                               "(unpaired: Mann-Whitney and a bootstrap interval, Bonferroni over the checks)", style="dim"))
    if len(analyses) > 1:
        console.print(Text("Across hosts (primary metric's verdict per host):", style="bold underline"))
        for line in H.agreement(analyses):
            console.print(Text("  " + line, style="yellow" if "disagree" in line else ""))
    for key, why in (fleet.get("failed") or {}).items():
        console.print(Text(f"fleet task {key} failed: {why}", style="red"))
    for name, why in (fleet.get("left_out") or {}).items():
        console.print(Text(f"fleet worker {name} was left out: {why}", style="yellow"))
