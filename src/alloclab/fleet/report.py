"""The per-host part of a fleet experiment's terminal report: one table group per host, then
where the hosts' verdicts agree and where they differ."""

from __future__ import annotations

from rich.console import Console, Group
from rich.text import Text

from alloclab.stats.analysis import analyze
from alloclab.report import terminal
from alloclab.store.db import Experiment
from alloclab.fleet import hosts as H


def render_hosts(e: Experiment, console: Console, min_effect: float = 0.0, details: bool = False) -> None:
    labels = H.hosts_of(e)
    if not labels:
        return
    fleet = e.config.get("fleet") or {}
    analyses = {}
    for host in labels:
        one = H.for_host(e, host)
        if not one.runs:
            continue
        a = analyze(one, min_effect=min_effect)
        analyses[host] = a
        m = one.machine
        console.print(Text(f"host {host}: {m.get('cpu_model')}, {m.get('usable_cores')} cores, kernel {m.get('kernel')}, "
                           f"glibc {m.get('glibc')}, THP {m.get('thp')}", style="bold"))
        for w in a.workloads:
            console.print(Group(terminal.workload_table(a, w, details), *terminal.notes(a, w, details)))
        console.print()
    if fleet.get("mode") == "split" and len(analyses) > 1:
        console.print(Text("split mode: the tables above are each host's share of the blocks; the pooled table is "
                           "the experiment's result, valid while the hosts are interchangeable:", style="dim"))
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
