"""From an inspection's snapshot to its answer: the memory rules of catalog/tune_rules.toml that read
memory at rest (those with `returns`), read through the same readings as a fingerprint's split
(diagnosis.rest_values) and the same prescription (prescribe.py); each setting with its env line
and systemd drop-in (stats/apply.py), and the command that would race it.

In: a Snapshot (store/inspect_model.py). Out: an Answer. A process is its own default: a memory
rule's gain is weighed against the memory the process holds now."""

from __future__ import annotations

import os
import shlex

from alloclab.catalog.allocators import BASELINE, load_catalog
from alloclab.catalog.tune_rules import load_rules
from alloclab.store.inspect_model import Answer, Finding, Setting, Snapshot
from alloclab.tune.diagnosis import Reading, arena_fit, free_chunk_values, hist_of_chunks, rest_values, size_text
from alloclab.tune.prescribe import prescribe

REST_WHERE = "now"
KEPT_TOP = 1 << 20    # a free top worth a sentence where glibc's thresholds were not read


def memory_rules():
    """The rules a snapshot can fire: those that read memory at rest and name what they give back."""
    return tuple(r for r in load_rules() if r.returns is not None)


def reading(snap: Snapshot) -> Reading | None:
    if snap.split is None:
        return None
    # The chunks the walk counted stand in for the sizes a fingerprint would have counted the
    # program asking for: a snapshot has no requests, only the chunks still serving them.
    values = {k: float(v) for k, v in rest_values(snap.split, hist_of_chunks(snap.chunk_sizes)).items()
              if v is not None}
    values |= free_chunk_values(snap.chunk_sizes, snap.split)
    # The CPUs the process may use, not alloclab's: a service pinned to one runs one thread at once.
    values |= {"threads": float(snap.threads), "cpus": float(snap.cpus or os.cpu_count() or 1)}
    values |= arena_fit(values)
    return Reading(snap.allocator, snap.allocator, values, rest_where=REST_WHERE)


def command(snap: Snapshot) -> str:
    """Its command line as a shell line (a rewritten process title leaves empty arguments behind)."""
    argv = list(snap.cmdline)
    while argv and not argv[-1]:
        argv.pop()
    return shlex.join(argv) if argv else snap.exe


def race_command(snap: Snapshot) -> str:
    from alloclab.measure.inspect.snapshot import program_names
    from alloclab.workloads.experiment_file import inspect_recipe
    for name in program_names(snap.exe, snap.cmdline):
        recipe = inspect_recipe(name)
        if recipe is not None:
            return f"alloclab tune recipe:{recipe[0]}"
    return "alloclab tune -- " + command(snap)


def _others(allocator: str) -> list[str]:
    """The installed allocators tune would race, other than the one the process runs."""
    from alloclab.catalog.variants import installed_variants
    return [v.spec for v in installed_variants() if v.allocator is not None and v.allocator.race_in_tune
            and v.allocator.name != allocator and not v.allocator.is_system] + \
        (["glibc"] if allocator != "glibc" else [])


def _setting(spec: str, command: str) -> Setting:
    from alloclab.catalog.variants import parse_variant
    from alloclab.errors import AlloclabError
    from alloclab.stats.apply import apply_lines
    try:
        env = dict(parse_variant(spec).env)
    except AlloclabError as exc:
        return Setting(spec, f"# {exc}", "")
    line, systemd = apply_lines(env, (), command)
    return Setting(spec, line, systemd)


def _versions(snap: Snapshot) -> dict[str, str]:
    """A bundled copy's version, from the names of its options in the program's bytes: the setting's
    name follows it (mimalloc 2.1 renamed decommit_delay to purge_delay)."""
    a = load_catalog().allocators.get(snap.allocator)
    if a is None or not a.bundled:
        return {}
    from pathlib import Path

    from alloclab.catalog.allocators import bundled_version
    return {a.name: bundled_version(a, Path(f"/proc/{snap.pid}/exe"))}


def answer(snap: Snapshot) -> Answer:
    out = Answer(race=race_command(snap))
    r = reading(snap)
    if r is None:
        return out
    rx = prescribe({snap.allocator: r}, _others(snap.allocator), _versions(snap), rules=memory_rules(), default=r,
                    beside=False)
    line = command(snap)
    by_rule: dict[str, Finding] = {}
    for c in rx.candidates:
        if c.rule not in rx.fired:
            continue
        f = by_rule.setdefault(c.rule, Finding(c.rule, c.mechanism, c.why, c.expect))
        f.settings.append(_setting(c.spec, line))
    out.fired = list(by_rule.values())
    if {"glibc-free-sized", "glibc-free-pinned"} & set(by_rule):
        # A setting acts on a restarted process; the memory free inside it now can go back today.
        release = load_catalog().get(BASELINE).release_call
        out.said.append(f"now, without a restart: {release} called inside process {snap.pid} gives back the "
                        f"whole pages of its free chunks ({size_text(snap.split.parts.get('free_inside', 0))} free "
                        f"inside): the program's own call where it has one, else `gdb -p {snap.pid} -batch -ex "
                        f"'call (int) {release}'`, which stops it and runs glibc's code in it")
    out.silent = [name for name in rx.silent]
    parts = snap.split.parts
    if snap.allocator == "glibc" and not snap.thresholds and parts.get("free_top", 0) >= KEPT_TOP:
        # Without mp_ glibc's thresholds are unknown: what the walk shows, and no claim about why.
        out.said.append(f"{size_text(parts['free_top'])} free at the top, kept")
    known = load_catalog().allocators.get(snap.allocator)
    if snap.source == "smaps alone" and (known is None or (known.books is not None and not known.bundled)):
        out.said.append(f"{snap.allocator}'s own split needs a channel (a recipe's) or --attach")
    return out


# --- two inspections of one process ------------------------------------------------------------

def diff(a: Snapshot, b: Snapshot) -> dict:
    """Part by part, what B holds against A (bytes), the parts that grew most first; with whether the
    two are one process (its pid and command line), which a diff of two others does not claim."""
    from alloclab.store.fingerprint_model import PARTS
    pa = a.split.parts if a.split else {}
    pb = b.split.parts if b.split else {}
    rows = [{"part": k, "a": pa.get(k, 0), "b": pb.get(k, 0), "change": pb.get(k, 0) - pa.get(k, 0)}
            for k in PARTS if k in pa or k in pb]
    totals = {k: {"a": getattr(a, k), "b": getattr(b, k), "change": getattr(b, k) - getattr(a, k)}
              for k in ("rss", "pss")}
    anon_a, anon_b = (a.split.anon if a.split else 0), (b.split.anon if b.split else 0)
    totals["anon"] = {"a": anon_a, "b": anon_b, "change": anon_b - anon_a}
    grew = sorted((r for r in rows if r["change"] > 0), key=lambda r: -r["change"])
    return {"same_process": a.pid == b.pid and a.cmdline == b.cmdline, "a": {"pid": a.pid, "when": a.when},
            "b": {"pid": b.pid, "when": b.when}, "parts": rows, "totals": totals,
            "grew_most": grew[0]["part"] if grew else None}
