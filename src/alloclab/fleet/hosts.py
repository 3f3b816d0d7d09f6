"""Hosts of a fleet experiment as plain data: labels, fingerprints, one host's view, agreement.

Each run records its host in extra.host; the experiment's machine record keeps every host's
snapshot under "hosts". Nothing here imports Dask.
"""

from __future__ import annotations

import dataclasses

from alloclab.errors import AlloclabError
from alloclab.store.db import Experiment

# What makes two hosts the same machine for split mode (and what may explain a difference).
FINGERPRINT = ("cpu_model", "cores", "usable_cores", "memory_total_mb", "kernel", "os", "glibc", "allocators",
               "thp", "thp_defrag", "governor", "perf_counters", "alloclab", "python")


def fingerprint(snapshot: dict) -> tuple:
    return tuple(repr(snapshot.get(k)) for k in FINGERPRINT)


def fingerprint_differences(snapshots: dict[str, dict]) -> list[str]:
    """'kernel: 6.1 on a, 6.8 on b' for every fingerprint field that is not the same on every host."""
    out = []
    for key in FINGERPRINT:
        values: dict[str, list[str]] = {}
        for host, snap in snapshots.items():
            values.setdefault(repr(snap.get(key)), []).append(host)
        if len(values) > 1:
            out.append(f"{key}: " + "; ".join(f"{v} on {', '.join(h)}" for v, h in values.items()))
    return out


def combined_machine(snapshots: dict[str, dict], address: str) -> dict:
    """The experiment's machine record: fields all hosts share, 'varies' for the rest, every host's own."""
    first = next(iter(snapshots.values()))
    out = {k: (first.get(k) if all(s.get(k) == first.get(k) for s in snapshots.values()) else "varies by host")
           for k in first}
    return out | {"host": f"{len(snapshots)} hosts ({', '.join(snapshots)})", "hosts": dict(snapshots),
                  "fleet": address}


def hosts_of(e: Experiment) -> list[str]:
    """The host labels of an experiment in first-run order; [] for a single-machine experiment."""
    seen = list((e.machine.hosts or {}).keys())
    for r in e.runs:
        h = r.extra.get("host")
        if h and h not in seen:
            seen.append(h)
    return seen


def for_host(e: Experiment, host: str) -> Experiment:
    """The experiment as that host alone measured it: its runs, its machine, its verification."""
    hosts = hosts_of(e)
    if host not in hosts:
        raise AlloclabError(f"Experiment {e.id} has no host '{host}'. Its hosts are: {', '.join(hosts) or 'none (it ran on one machine)'}. "
                            f"Write ID@HOST with one of them.")
    snap = (e.machine.hosts or {}).get(host, {})
    ver = {tuple(int(i) for i in k.split(",")): v for k, v in (snap.get("verifications") or {}).items()} or e.verifications
    runs_here = (e.config.fleet or {}).get("runs_per_host", {}).get(host, e.config.runs)
    return dataclasses.replace(e, runs=[r for r in e.runs if r.extra.get("host") == host],
                               config=e.config.with_(runs=runs_here),
                               machine={k: v for k, v in snap.items() if k != "verifications"} | {"host": host},
                               verifications=ver)


def parse_ref(text: str) -> tuple[int, str | None]:
    """ID or ID@HOST, as `alloclab diff` and `alloclab report` take them."""
    ident, _, host = text.partition("@")
    try:
        return int(ident), (host or None)
    except ValueError:
        raise AlloclabError(f"Cannot read experiment '{text}': write an id (12) or, for one host of a fleet "
                            f"experiment, ID@HOST (12@web1); `alloclab experiments` lists them.") from None


def agreement(analyses: dict[str, object]) -> list[str]:
    """Per workload and variant, where the primary metric's verdict agrees across hosts and where not:
    'tcmalloc: better on 3 of 3 hosts'; 'mimalloc: better on a, b; worse on c'."""
    lines = []
    first = next(iter(analyses.values()))
    for wi, w in enumerate(first.workloads):
        primary = w.primary()
        if primary is None:
            continue
        for vi, label in enumerate(first.labels):
            if vi == first.baseline_idx:
                continue
            verdicts: dict[str, list[str]] = {}
            for host, a in analyses.items():
                row = next((r for r in a.workloads[wi].rows if r.name == primary.name), None)
                c = row.comparison(vi) if row else None
                verdicts.setdefault(c.verdict if c else "no data", []).append(host)
            where = f"{w.name}, {label} ({primary.name})"
            if len(verdicts) == 1:
                verdict = next(iter(verdicts))
                lines.append(f"{where}: {verdict} on {len(analyses)} of {len(analyses)} hosts")
            else:
                lines.append(f"{where}: " + "; ".join(f"{v} on {', '.join(h)}" for v, h in verdicts.items())
                             + " -- the hosts disagree")
    return lines


def host_effects(analyses: dict[str, object], alpha: float = 0.05) -> list[str]:
    """Split mode's check that the hosts are interchangeable: per workload and variant, the primary
    metric on each host against the first host. Runs on two hosts are not paired, so the one engine
    (decide.judge) compares them unpaired (ratio of medians, bootstrap interval, Mann-Whitney),
    Bonferroni across every such check. A line per significant difference; [] when none."""
    from alloclab.stats import decide
    from alloclab.stats import estimates as stats
    hosts = list(analyses)
    first = analyses[hosts[0]]
    pairs, where = [], []
    for wi, w in enumerate(first.workloads):
        primary = w.primary()
        if primary is None:
            continue
        for vi, label in enumerate(first.labels):
            base = primary.cells[vi].values
            for host in hosts[1:]:
                row = next((r for r in analyses[host].workloads[wi].rows if r.name == primary.name), None)
                if row is None or len(base) < 2 or len(row.cells[vi].values) < 2:
                    continue
                pairs.append((base, row.cells[vi].values, primary.higher_is_better))
                where.append(f"{w.name}, {label} ({primary.name}): {host} against {hosts[0]}")
    design = decide.Design.fixed(1, alpha)
    checks = [decide.judge(b, c, hib, margin=0.0, design=design, blocks=1, family=len(pairs)) for b, c, hib in pairs]
    out = []
    for text, c in zip(where, checks):
        if c.verdict in ("better", "worse"):
            out.append(f"{text} (unpaired: two hosts): {stats.format_comparison(c)}")
    return out
