"""The "Allocation fingerprint" section of every report: what the program asks of the allocator and
what each allocator holds beyond it, from the untimed fingerprint run of each cell
(measure/fingerprint.py). One row per figure, one column per variant; the same rows feed the
terminal, Markdown and JSON reports.

Every function here takes `fp_of` (variant_idx -> fingerprint) as Fingerprints, or as the stored
dicts, which it reads as Fingerprints (store/fingerprint_model.py)."""

from __future__ import annotations

from alloclab.report.numbers import fmt_value
from alloclab.store.fingerprint_model import PARTS, AllocatorAt, Fingerprint, Memory, MemorySplit

SYSCALL_ORDER = ("brk", "mmap", "munmap", "madvise", "mprotect", "mremap")
EXPLAIN = ("Untimed run per variant with a counting preload before the allocator. live = usable bytes "
           "(malloc_usable_size) the program holds; overhead = anonymous RSS - live (an upper bound: stacks "
           "and the counter's own tables count too); cross-thread frees and lifetimes sampled, 1 block in "
           "{every} by address; system calls of the whole tree ({how}).")


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:.1f}%"


def _mib(kb: float | None) -> str:
    return "n/a" if kb is None else f"{kb / 1024:.1f} MiB"


def _overhead(kb: float | None) -> str:
    # Below zero the program holds blocks whose pages it has not touched yet (not resident): glibc
    # hands out a freshly grown or just-trimmed heap top, or an mmap'd block, untouched.
    if kb is not None and kb < 0:
        return f"{_mib(kb)} (live blocks not all touched)"
    return _mib(kb)


def _size(n: float) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:,.1f} {unit}"
    return f"{n:,.0f} B"


def _count(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{int(x):,}" if float(x).is_integer() or abs(x) >= 1000 else fmt_value(x)


def typed(fp_of: dict[int, Fingerprint | dict]) -> dict[int, Fingerprint]:
    """variant_idx -> Fingerprint, from Fingerprints or stored dicts."""
    return {vi: Fingerprint.of(fp) for vi, fp in fp_of.items()}


def top_sizes(fp: Fingerprint | dict, n: int = 4) -> str:
    """The size classes that take most calls: '512-1023 B 82% (6.0 MB)'."""
    hist = Fingerprint.of(fp).hist
    total = sum(h.calls for h in hist) or 1
    best = sorted(hist, key=lambda h: -h.calls)[:n]
    return ", ".join(f"{h.label} B {h.calls / total * 100:.0f}%" for h in best) or "n/a"


def _lifetime(fp: Fingerprint) -> str:
    lt = fp.lifetime
    if not lt.sampled:
        return "n/a"
    return (f"{_pct(lt.short_lt_1ms)} / {_pct(lt.medium_1ms_1s)} / "
            f"{_pct((lt.long_ge_1s or 0) + (lt.live_at_exit or 0))}")


def _syscalls(fp: Fingerprint) -> str:
    s = fp.syscalls
    return " / ".join(_count(s.get(k, 0)) for k in SYSCALL_ORDER[:5]) if s else "n/a"


def _moved(fp: Fingerprint) -> str:
    b = fp.syscall_bytes
    if b is None:
        return "n/a"
    return (f"brk +{_size(b.brk_grown)} / -{_size(b.brk_shrunk)}; mmap anon {_size(b.mmap_anon)}, "
            f"munmap {_size(b.munmap)}; madvise'd away {_size(b.madvise_released)}")


def _mem(fp: Fingerprint) -> Memory:
    """The run's memory figures; all None where it read none."""
    return fp.memory or Memory()


def rows(fp_of: dict[int, Fingerprint | dict], order: list[int]) -> list[list[str]]:
    """[figure, value per variant in `order`]; a failed fingerprint run says so in its column."""
    fp_of = typed(fp_of)

    def row(name, f):
        return [name] + [("failed" if fp_of[vi].failed else f(fp_of[vi])) if vi in fp_of else "n/a" for vi in order]

    out = [
        row("alloc calls (frees)", lambda fp: f"{_count(fp.allocs)} ({_count(fp.frees)})"),
        row("calls/s (alloc+free)", lambda fp: _count(fp.calls_per_s)),
        row("sizes, by calls", top_sizes),
        row(">= 128 KiB: calls, bytes", lambda fp: f"{_pct(fp.big_call_share)}, {_pct(fp.big_byte_share)}"),
        row("realloc / aligned", lambda fp: f"{_count(fp.realloc)} / {_count(fp.aligned)}"),
        row("processes / allocating threads", lambda fp: f"{fp.processes} / {fp.threads}"),
        row("cross-thread frees (sampled)", lambda fp: f"{_pct(fp.cross_thread_share)} of "
                                                       f"{_count(fp.sampled.frees)}"),
        row("lifetime <1ms / <1s / longer", _lifetime),
        row("at peak live: live, anon RSS", lambda fp: f"{_mib(_mem(fp).peak_live_kb)}, "
                                                       f"{_mib(_mem(fp).anon_at_peak_live_kb)}"),
        row("overhead at peak live", lambda fp: _overhead(_mem(fp).overhead_at_peak_kb)),
        row("peak anon RSS", lambda fp: _mib(_mem(fp).peak_anon_kb)),
        row("at end: live, anon RSS", lambda fp: f"{_mib(_mem(fp).end_live_kb)}, {_mib(_mem(fp).end_anon_kb)}"),
        row("overhead at end", lambda fp: _overhead(_mem(fp).overhead_at_end_kb)),
        row("brk/mmap/munmap/madvise/mprotect", _syscalls),
        row("  bytes they moved", _moved),
        row("allocator's own figures", lambda fp: fp.allocator.source if fp.allocator else "n/a"),
        row("  at peak live: allocated, held", lambda fp: _own(fp.allocator and fp.allocator.at_peak_live)),
        row("  at end: allocated, held", lambda fp: _own(fp.allocator and fp.allocator.at_end)),
    ]
    works = list(dict.fromkeys(fp.per_work.work for fp in fp_of.values() if fp.per_work))
    if works:
        # Measured over the client's steady-state window (measure/fingerprint_work.py).
        def per_work(fp):
            pw = fp.per_work
            return "n/a" if pw is None else f"{_count(round(pw.calls))} ({_size(pw.bytes)} asked)"
        out.insert(2, row(f"alloc calls per {works[0]} (bytes)", per_work))
    # A server's memory phases: what the program still holds against what the allocator keeps.
    names = list(dict.fromkeys(ph.name for fp in fp_of.values() for ph in fp.phases))
    for name in names:
        def after(fp, name=name):
            ph = next((x for x in fp.phases if x.name == name), None)
            return "n/a" if ph is None else (f"{_mib(ph.live_kb)}, {_mib(ph.anon_kb)}: "
                                             f"{_mib(ph.overhead_kb)} beyond live")
        out.append(row(f"after {name}: live, anon RSS", after))
        if any(ph.own for fp in fp_of.values() for ph in fp.phases):
            def own(fp, name=name):
                ph = next((x for x in fp.phases if x.name == name), None)
                return _own(ph.own if ph else None)
            out.append(row(f"  allocator's allocated, held", own))
    return out


def _own(at: AllocatorAt | None) -> str:
    if not at:
        return "n/a"
    return f"{_mib(at.allocated_kb)}, {_mib(at.held_kb)}"


AGREE = 0.10   # the allocator's allocated bytes within 10% (or 1 MiB) of our live bytes: they agree


def agreement(live_kb: float | None, allocated_kb: float | None) -> str | None:
    """'agrees (+2.1%)' / 'differs (+35.0%)' for the allocator's allocated bytes against our live
    bytes; None where either is unknown. Within 1 MiB counts as agreeing: a small program's live
    bytes are dominated by what was allocated before the interposer or by the loader."""
    if live_kb is None or allocated_kb is None:
        return None
    diff = allocated_kb - live_kb
    rel = diff / live_kb if live_kb > 0 else float("inf")
    pct = f"{rel * 100:+.1f}%" if live_kb > 0 else f"{diff / 1024:+.1f} MiB"
    return f"agrees ({pct})" if abs(diff) <= 1024 or abs(rel) <= AGREE else f"differs ({pct})"


def agreement_lines(fp_of: dict[int, Fingerprint | dict], labels: list[str]) -> list[str]:
    """Where the allocator's own count of allocated bytes agrees with the interposer's live bytes,
    at the peak of live bytes and after each phase: 'glibc (glibc mallinfo2): allocated agrees with
    live at the peak (+0.8%), after flush (+3.0%)'."""
    out = []
    for vi, fp in sorted(typed(fp_of).items()):
        own = fp.allocator
        if own is None or fp.failed:
            continue
        points = [("at the peak", own.at_peak_live), ("at the end", own.at_end)]
        points += [(f"after {ph.name}", ph.own) for ph in fp.phases]
        said = [f"{where} {a}" for where, at in points
                if at is not None and (a := agreement(at.live_kb, at.allocated_kb)) is not None]
        if said:
            out.append(f"{labels[vi]} ({own.source}): allocated against live " + ", ".join(said))
        elif own.held_is:
            out.append(f"{labels[vi]} ({own.source}): reports no allocated bytes, only what it holds "
                       f"({own.held_is})")
    return out


def phase_lines(fp_of: dict[int, Fingerprint | dict], labels: list[str]) -> list[str]:
    """'after flush: tcmalloc holds 133.0 MiB beyond the program's 2.0 MiB live; jemalloc 3.1 MiB
    beyond 2.0 MiB' for the last phase the fingerprint runs read (what a server keeps at rest)."""
    last = {vi: fp.phases[-1] for vi, fp in typed(fp_of).items() if fp.phases}
    if not last:
        return []
    name = next(iter(last.values())).name
    parts = [f"{labels[vi]} holds {_mib(ph.overhead_kb)} beyond the program's {_mib(ph.live_kb)} live"
             for vi, ph in sorted(last.items()) if ph.name == name]
    return [f"after {name} (fingerprint run): " + "; ".join(parts)]


def summary_lines(fp_of: dict[int, Fingerprint | dict], labels: list[str]) -> list[str]:
    """The lines under the fingerprint table: what each allocator keeps after a server's last phase,
    where the allocators' own figures agree with ours, and where the memory goes at rest."""
    return phase_lines(fp_of, labels) + agreement_lines(fp_of, labels) + split_lines(fp_of, labels)


# How each part of the split reads (store/fingerprint_model.py's PARTS; measure/fingerprint_books.py).
PART_WORDS = {"live": "live", "free_top": "free at the top", "free_inside": "free inside", "caches": "caches",
              "decaying": "decaying", "metadata": "metadata", "held": "held, not split", "other": "other"}


def rest_split(fp: Fingerprint) -> MemorySplit | None:
    """The split at rest: after a server's last phase, else at the command's end."""
    if fp.books is None:
        return None
    phases = [sp for sp in fp.books.splits if sp.at.startswith("after ")]
    return phases[-1] if phases else fp.books.at("end")


def split_text(sp: MemorySplit) -> str:
    """'13.9 MiB anon: free at the top 10.6 MiB, free inside 1.4 MiB, ..., unexplained 0 B'."""
    parts = [f"{PART_WORDS[k]} {_size(sp.parts[k])}" for k in PARTS if sp.parts.get(k)]
    left = f", unexplained {'-' if sp.unexplained < 0 else ''}{_size(abs(sp.unexplained))}" \
        if abs(sp.unexplained) >= 1 << 20 else ""
    return f"{_size(sp.anon)} anonymous: " + ", ".join(parts) + left


def split_lines(fp_of: dict[int, Fingerprint | dict], labels: list[str]) -> list[str]:
    """A line per variant: where its memory sits at rest, by the allocator's own books."""
    out = []
    for vi, fp in sorted(typed(fp_of).items()):
        sp = None if fp.failed else rest_split(fp)
        if sp is not None:
            out.append(f"where the memory goes, {labels[vi]} {sp.at if sp.at != 'end' else 'at its end'} "
                       f"({fp.books.source}): {split_text(sp)}")
    return out


def split_rows(fp_of: dict[int, Fingerprint | dict], order: list[int], labels: list[str]) -> list[list[str]]:
    """[variant, reading, anonymous RSS, a column per part, unexplained] for every reading of every
    variant (MiB): the Markdown table and the JSON's parts."""
    fp_of = typed(fp_of)
    out = []
    for vi in order:
        fp = fp_of.get(vi)
        if fp is None or fp.failed or fp.books is None:
            continue
        for sp in fp.books.splits:
            out.append([labels[vi], sp.at, f"{sp.anon / (1 << 20):.1f}",
                        *(f"{sp.parts[k] / (1 << 20):.1f}" if k in sp.parts else "" for k in PARTS),
                        f"{sp.unexplained / (1 << 20):.1f}"])
    return out


SPLIT_HEADER = ["variant", "reading", "anon MiB", *(PART_WORDS[k] for k in PARTS), "unexplained"]


def explanation(fp_of: dict[int, Fingerprint | dict]) -> str:
    ok = [fp for fp in typed(fp_of).values() if not fp.failed]
    every = max((fp.sample_every for fp in ok), default=0) or "n/a"
    how = next((fp.syscalls_how for fp in ok if fp.syscalls_how), "not counted")
    return EXPLAIN.format(every=every, how=how)


def errors(fp_of: dict[int, Fingerprint | dict], labels: list[str]) -> list[str]:
    return [f"{labels[vi]}: {fp.error}" for vi, fp in sorted(typed(fp_of).items()) if fp.failed]


def for_workload(experiment, workload_idx: int) -> dict[int, Fingerprint]:
    """variant_idx -> fingerprint of one workload (empty when the experiment ran without --fingerprint)."""
    return typed({vi: fp for (wi, vi), fp in getattr(experiment, "fingerprints", {}).items() if wi == workload_idx})


# A memory system call cited in the answer's mechanism when the fingerprint runs count it at least
# this often in one of the two variants and 3 times as often in one as in the other: counts, not
# timings, so one untimed run each shows the mechanism (glibc's brk churn against TOP_PAD's none).
CITE_MIN_CALLS, CITE_FACTOR = 20, 3.0
CITE_MIN_OVERHEAD_KB = 4 * 1024   # and what it holds beyond live at the end, when 2x apart and 4 MiB


def mechanism(experiment, workload_idx: int, vi: int, base_idx: int, labels: list[str]) -> list[str]:
    """What the fingerprint runs show behind a verdict of `vi` against the baseline: "brk 1,393
    vs glibc 6 (fingerprint)", "31.0 MiB beyond live at end vs glibc 5.6 MiB (fingerprint)"."""
    fp_of = for_workload(experiment, workload_idx)
    fp, base = fp_of.get(vi), fp_of.get(base_idx)
    if not fp or not base or fp.failed or base.failed or vi == base_idx:
        return []
    out = []
    mine, theirs = fp.syscalls or {}, base.syscalls or {}
    for name in SYSCALL_ORDER:
        a, b = mine.get(name), theirs.get(name)
        if a is None or b is None or max(a, b) < CITE_MIN_CALLS or max(a, b) < CITE_FACTOR * max(min(a, b), 1):
            continue
        # Counts of the whole run, no rate: a server's run lasts longer than the client's time.
        out.append(f"{name} {a:,} vs {labels[base_idx]} {b:,} (fingerprint)")
    a, b = _mem(fp).overhead_at_end_kb, _mem(base).overhead_at_end_kb
    if a is not None and b is not None and max(a, b) >= CITE_MIN_OVERHEAD_KB and max(a, b) >= 2 * max(min(a, b), 1):
        out.append(f"{_mib(a)} beyond live at end vs {labels[base_idx]} {_mib(b)} (fingerprint)")
    return out
