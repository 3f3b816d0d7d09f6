"""From fingerprints to readings: what the program asks of each allocator and what that allocator
does about it, reduced to the named figures tune's rules read (catalog/tune_rules.toml).

In: the fingerprint dicts of the diagnosed workloads under the plain allocators (measure/fingerprint.py).
Out: a Reading per allocator, each a set of named numbers (bytes, per second, per unit of work).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

BIG = 128 * 1024


@dataclass(frozen=True)
class Reading:
    """One allocator's fingerprint, as the rules read it. `values` holds every named figure; a
    figure the fingerprint could not give (no system-call counts, no work unit) is absent."""
    allocator: str
    label: str
    values: dict[str, float] = field(default_factory=dict, hash=False)
    per: str = "second"            # the unit the per-unit figures use: a recipe's work, else the run
    held_where: str = "after a phase"

    def get(self, name: str) -> float | None:
        return self.values.get(name)


def _big_block(hist: list) -> float | None:
    """The upper edge of the power-of-two size class at or above 128 KiB that carries most bytes."""
    big = [(b, c) for c, _, n, b in hist if n and (1 << max(c - 1, 0)) >= BIG]
    if not big:
        return None
    _, c = max(big)
    return float(1 << c)


def _held(fp: dict) -> tuple[float | None, float | None, str]:
    """The most memory held beyond the live bytes after a memory phase of a service (after FLUSHALL,
    after the clients disconnect), with its share of the anonymous RSS there and which phase: what a
    server keeps between loads. A command's end is not such a phase: the process exits."""
    spots = [(ph["overhead_kb"], ph.get("anon_kb"), f"after {ph['name']}") for ph in fp.get("phases") or []]
    if not spots:
        return None, None, "after a phase"
    kb, anon, where = max(spots, key=lambda s: s[0])
    return kb * 1024.0, (kb / anon if anon else None), where


def reading(allocator: str, label: str, fp: dict, cpus: int | None = None) -> Reading:
    """The named figures of one fingerprint (measure/fingerprint.py's dict)."""
    wall = fp.get("wall_s") or None
    v: dict[str, float] = {"cpus": float(cpus or os.cpu_count() or 1)}
    v["threads"] = float(fp.get("threads") or 0)
    v["allocs"] = float(fp.get("allocs") or 0)
    if fp.get("allocs_per_s") is not None:
        v["allocs_per_s"] = float(fp["allocs_per_s"])
    if fp.get("cross_thread_share") is not None:
        v["cross_thread_share"] = float(fp["cross_thread_share"])
    mem = fp.get("memory") or {}
    for key, name in (("peak_live_kb", "peak_live"), ("end_live_kb", "end_live"),
                      ("overhead_at_peak_kb", "overhead_peak"), ("overhead_at_end_kb", "overhead_end"),
                      ("peak_anon_kb", "peak_anon")):
        if key in mem:
            v[name] = mem[key] * 1024.0
    if mem.get("end_anon_kb"):
        v["overhead_end_share"] = mem["overhead_at_end_kb"] / mem["end_anon_kb"]
    if mem.get("anon_at_peak_live_kb"):
        v["overhead_peak_share"] = mem["overhead_at_peak_kb"] / mem["anon_at_peak_live_kb"]
    series = fp.get("series") or []   # (t, live KiB, RSS KiB, anonymous KiB) every 20 ms
    if series:
        most = max(series, key=lambda pt: pt[3] - pt[1])
        v["overhead_most"] = (most[3] - most[1]) * 1024.0
        if most[3] > 0:
            v["overhead_most_share"] = (most[3] - most[1]) / most[3]
    held, share, where = _held(fp)
    if held is not None:
        v["held_after_phase"] = held
        if share is not None:
            v["held_after_phase_share"] = share
    if (bb := _big_block(fp.get("hist") or [])) is not None:
        v["big_block"] = bb
    big_bytes = float(fp.get("big_bytes") or 0)
    if wall:
        v["big_bytes_per_s"] = big_bytes / wall
    calls, moved = fp.get("syscalls") or {}, fp.get("syscall_bytes") or {}
    for key in ("brk", "mmap", "munmap", "madvise"):
        if key in calls:
            v[f"{key}_calls"] = float(calls[key])
    if moved:
        grown, shrunk = float(moved.get("brk_grown", 0)), float(moved.get("brk_shrunk", 0))
        v["trim_bytes"], v["munmap_bytes"] = shrunk, float(moved.get("munmap", 0))
        v["madvise_bytes"] = float(moved.get("madvise_released", 0))
        if grown:
            v["trim_share"] = shrunk / grown
        if big_bytes:
            v["big_unmapped_share"] = v["munmap_bytes"] / big_bytes
        if wall:
            v["trim_bytes_per_s"] = shrunk / wall
            v["mmap_churn_bytes_per_s"] = v["munmap_bytes"] / wall
            v["madvise_bytes_per_s"] = v["madvise_bytes"] / wall
    per, units = _units(fp)
    if "trim_bytes" in v:
        # The heap given back and regrown in one unit of work; without a unit, in one cycle of the
        # heap, which cannot exceed the most the program ever held live.
        if units:
            v["heap_swing"] = v["trim_bytes"] / units
        elif v["trim_bytes"]:
            v["heap_swing"] = min(v["trim_bytes"], v.get("peak_live", v["trim_bytes"]))
    return Reading(allocator, label, v, per, where)


def merged(parts: list[Reading]) -> Reading:
    """One allocator's readings of several workloads (a recipe's load and its memory phases) as one:
    each figure at its largest, since a rule should fire where any workload shows its mechanism and
    a value sized from it should cover the largest. The unit of work is the first workload's; where
    memory is held, the workload that held the most."""
    first = parts[0]
    values: dict[str, float] = {}
    for r in parts:
        for k, x in r.values.items():
            values[k] = max(values.get(k, x), x)
    held = max((r for r in parts if "held_after_phase" in r.values), key=lambda r: r.values["held_after_phase"],
               default=first)
    return Reading(first.allocator, first.label, values, first.per, held.held_where)


def _units(fp: dict) -> tuple[str, float | None]:
    """The work unit and how much of it the fingerprint run measured: a recipe's transactions in the
    client's measured window, or none for a command. The run's system calls also count its start
    and warm-up, so a figure per unit is, if anything, high: a pad sized from it errs large."""
    pw = fp.get("per_work")
    if not pw or not pw.get("rate") or not pw.get("window_s"):
        return "cycle of the heap", None
    return pw["work"], pw["rate"] * pw["window_s"]


def size_text(n: float) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= div:
            return f"{n / div:.3g} {unit}"
    return f"{n:.0f} B"


def value_text(name: str, value: float) -> str:
    """A reading as a sentence shows it."""
    if name.endswith("_share"):
        return f"{value * 100:.0f}%"
    if name.endswith("_per_s") and "bytes" in name:
        return size_text(value)
    if name in ("heap_swing", "big_block", "trim_bytes", "munmap_bytes", "madvise_bytes", "overhead_end",
                "overhead_peak", "overhead_most", "end_live", "peak_live", "peak_anon", "held_after_phase"):
        return size_text(value)
    return f"{value:,.0f}"
