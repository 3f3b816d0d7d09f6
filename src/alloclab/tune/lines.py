"""The diagnosis in words: what each allocator's fingerprint read, where its memory goes at rest,
and each fired rule's mechanism, as tune prints them before it races (tune/session.py)."""

from __future__ import annotations

from alloclab.tune.diagnosis import Reading, size_text
from alloclab.tune.prescribe import Prescription


def diagnosis_lines(readings: dict[str, Reading], rx: Prescription) -> list[str]:
    """What the fingerprint read, per allocator, and which rules it fired."""
    out = []
    for r in readings.values():
        v = r.values
        # A figure the fingerprint could not give is absent (None); threads and trimming are left
        # out at zero too.
        allocs, threads, trimmed = r.get("allocs_per_s"), r.get("threads"), r.get("trim_bytes")
        parts = [f"{allocs:,.0f} allocations/s"] if allocs is not None else []
        if threads:
            parts.append(f"{threads:.0f} thread{'s' if round(threads) != 1 else ''}")
        if trimmed:
            parts.append(f"heap trimmed {size_text(trimmed)} ({v.get('brk_calls', 0):,.0f} brk calls)")
        # (reading, words before its size, words after): each shown where the fingerprint gave it.
        for key, before, after in (("heap_swing", "heap swing", f"a {r.per}"), ("munmap_bytes", "unmapped", ""),
                                   ("madvise_bytes", "madvise'd away", ""),
                                   ("overhead_peak", "held beyond live", "at the peak"),
                                   ("held_after_phase", "", r.held_where)):
            if key == "overhead_peak" and v.get(key, 0) < 0:
                # More asked than resident: pages malloc'd and never touched, not memory held.
                parts.append(f"{size_text(-v[key])} more asked than resident at the peak")
            elif v.get(key) or (key in v and key in ("heap_swing", "overhead_peak", "held_after_phase")):
                parts.append(" ".join(x for x in (before, size_text(v[key]), after) if x))
        out.append(f"{r.label}: " + ", ".join(parts))
        if (rest := rest_text(r)) is not None:
            out.append(f"  where the memory goes {r.rest_where}: {rest}")
    out.append("rules fired: " + (", ".join(rx.fired) or "none")
               + (f"; silent: {', '.join(rx.silent)}" if rx.silent else ""))
    seen = set()
    for c in rx.candidates:   # each mechanism once, in the words of the rule that read it
        if c.rule not in seen and c.rule in rx.fired:
            seen.add(c.rule)
            out.append(f"  {c.rule}: {c.mechanism}")
    return out


# The split's parts as the diagnosis names them (readings rest_*: tune/diagnosis.py).
_REST = (("live", "live"), ("free_top", "free at the top"), ("free_inside", "free inside"), ("caches", "caches"),
         ("decaying", "decaying"), ("metadata", "metadata"), ("held", "held, not split"), ("other", "other"))


def rest_text(r: Reading) -> str | None:
    """'13.9 MiB anonymous: free at the top 10.6 MiB, free inside 1.44 MiB, ...' from the reading."""
    anon = r.get("rest_anon")
    if anon is None:
        return None
    parts = [f"{words} {size_text(x)}" for key, words in _REST if (x := r.get(f"rest_{key}"))]
    return f"{size_text(anon)} anonymous: " + ", ".join(parts)
