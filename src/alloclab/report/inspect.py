"""`alloclab inspect`'s answer on the terminal and as JSON, a watch's line per sample and what grew
over it, and the diff of two inspections: renders the Inspection records and their growth
(store/inspect_model.py) and tune/inspection.py's diff; computes nothing. The watch's page is
report/inspect_html.py."""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table
from rich.text import Text

from alloclab.report.fingerprint import PART_WORDS, _size
from alloclab.stats.lazyfree import MIN_MB as LAZY_MIN_MB, MIN_SHARE as LAZY_MIN_SHARE
from alloclab.store.fingerprint_model import PARTS
from alloclab.store.inspect_model import GREW_AT_LEAST, Growth, Inspection, Snapshot, growth


# The parts of `other` that are not the allocator's heap, named where the reading told them apart
# (measure/inspect/runtimes.py).
OTHER_WORDS = {"own_maps": "own maps", "cpython_arenas": "CPython's object arenas (pymalloc)",
               "go_heap": "Go's heap", "java_heap": "the Java heap"}


def _parts_line(parts: dict[str, int]) -> str:
    return ", ".join(f"{PART_WORDS[k]} {_size(parts[k])}" for k in PARTS if k in parts)


def _how(s: Snapshot) -> list[str]:
    out = [f"read from: {s.source}" + (f" in {s.read_s:.2f} s" if s.read_s else "")]
    if s.stopped:
        out.append(f"stopped {s.pauses} times, at most {s.pause_max_ms:.1f} ms ({s.pause_total_ms:.0f} ms in all)")
    elif s.traced_by:
        out.append(f"not stopped: already traced by process {s.traced_by}, read while it ran")
    if s.residency:
        out.append(f"residency from {s.residency}")
    if s.cpus:
        out.append(f"CPUs it may use: {s.cpus} ({s.cpus_how})")
    return out


def _arena_table(s: Snapshot) -> Table:
    t = Table(show_edge=False, pad_edge=False, box=None)
    for col in ("arena", "threads", "heaps", "system", "top (resident)", "free inside", "fastbins", "tcache",
                "in use", "unread"):
        t.add_column(col, justify="left" if col == "arena" else "right")
    for a in s.arenas:
        t.add_row("main" if a.main else f"{a.address:#x}", str(len(a.threads)) if a.threads else "?", str(a.heaps),
                  _size(a.system), f"{_size(a.top)} ({_size(a.top_resident)})",
                  f"{_size(a.free)} ({a.free_count:,})", f"{_size(a.fast)} ({a.fast_count:,})",
                  f"{_size(a.tcache)} ({a.tcache_count:,})", f"{_size(a.in_use)} ({a.in_use_count:,})",
                  _size(a.unread))
    return t


def _environment(systemd: str) -> list[str]:
    """A drop-in's own lines (its Environment= and UnsetEnvironment=), without the form around them."""
    return [ln for ln in systemd.splitlines() if ln.startswith(("Environment=", "UnsetEnvironment="))]


def _drop_in_form(ans) -> str:
    """The drop-in form once for every candidate of the answer: where it goes, and that a candidate's
    lines go under [Service] (the comment line of the first candidate's drop-in says where)."""
    for f in ans.fired:
        for st in f.settings:
            head = next((ln for ln in st.systemd.splitlines() if ln.startswith("#")), None)
            if head and _environment(st.systemd):
                return (f"`{head.lstrip('# ').split('  ')[0]}`, and under [Service] its systemd line "
                        f"({head.split('(', 1)[1].rstrip(')')})" if "(" in head else head.lstrip("# "))
    return ""


def lazyfree_line(rollup: dict[str, int]) -> str | None:
    """What of the anonymous RSS is LazyFree (freed with MADV_FREE, still resident), where it is a real
    part of it (stats/lazyfree.py's bounds): memory the kernel takes back when it needs it."""
    lazy, anon = rollup.get("LazyFree", 0), rollup.get("Anonymous", 0)
    if lazy < LAZY_MIN_MB * (1 << 20) or lazy < LAZY_MIN_SHARE * anon:
        return None
    return (f"LazyFree {_size(lazy)} of the anonymous {_size(anon)}: pages freed with MADV_FREE, still counted "
            f"in RSS until the kernel takes them back, when it needs them, at no cost to the process")


def render_terminal(items: list[Inspection], console: Console, experiment: int | None = None) -> None:
    for ins in items:
        s, ans = ins.snapshot, ins.answer
        head = Text.assemble((f"Process {s.pid}", "bold"), (f" at +{s.t_s:.1f} s" if s.t_s else "") +
                             f": {' '.join(s.cmdline)[:120] or s.exe}")
        console.print(head, highlight=False)
        console.print(f"  allocator: {s.allocator} ({s.allocator_how})" +
                      (f"; glibc {s.glibc}" if s.glibc else ""), highlight=False)
        console.print("  " + "; ".join(_how(s)), highlight=False)
        console.print(f"  RSS {_size(s.rss)}, PSS {_size(s.pss)}" +
                      (f", swapped {_size(s.rollup['Swap'])}" if s.rollup.get("Swap") else ""), highlight=False)
        if (lazy := lazyfree_line(s.rollup)) is not None:
            console.print(f"  {lazy}", highlight=False)
        if s.split is not None:
            sp = s.split
            console.print(f"  where its {_size(sp.anon)} of anonymous memory goes: {_parts_line(sp.parts)}"
                          + (f", unexplained {_size(sp.unexplained)}" if abs(sp.unexplained) >= 1 << 20 else ""),
                          highlight=False)
            if s.booked:
                console.print(f"  as address space: {_parts_line(s.booked)}", highlight=False)
            if sp.other_parts and sp.parts.get("other"):
                console.print("  other: " + ", ".join(f"{OTHER_WORDS.get(k, k.replace('_', ' '))} {_size(v)}"
                                                      for k, v in sp.other_parts.items() if v), highlight=False)
        if s.smaps and s.source == "smaps alone":
            console.print("  smaps: " + ", ".join(f"{k} {_size(v)}" for k, v in s.smaps.items()), highlight=False)
        if s.arenas:
            console.print(_arena_table(s))
        if s.mapped_count:
            console.print(f"  mapped chunks: {s.mapped_count:,}, {_size(s.mapped_bytes)} "
                          f"({_size(s.mapped_resident)} resident)", highlight=False)
        th = s.thresholds
        if th:
            raised = f" (raised by the free of a {_size(th['raised_by'])} block)" if th.get("raised_by") else ""
            console.print(f"  thresholds: trim {_size(th['trim_threshold'])}, mmap {_size(th['mmap_threshold'])}"
                          f"{raised}, " + ("fixed by a setting" if th.get("thresholds_fixed") else "moving (glibc's default)")
                          + f"; top pad {_size(th['top_pad'])}", highlight=False)
        for note in s.notes:
            console.print(f"  {note}", style="dim", highlight=False)
        if ans.fired:
            console.print(Text.assemble(("What would give it back", "bold"), " (each setting at the program's next start)"))
        for f in ans.fired:
            console.print(Text.assemble("  ", (f.rule, "bold"), f": {f.mechanism}"), highlight=False)
            console.print(f"    {f.why}", highlight=False)
            for st in f.settings:
                console.print(f"    run:     {st.env_line}", highlight=False, soft_wrap=True)
                lines = _environment(st.systemd)
                if lines:
                    console.print("    systemd: " + "; ".join(lines), highlight=False, soft_wrap=True)
        form = _drop_in_form(ans)
        if form:
            console.print("  under systemd, one of them: " + form, highlight=False, soft_wrap=True)
        for line in ans.said:
            console.print(f"  {line}", highlight=False)
        if not ans.fired:
            console.print("  No memory rule fires on this snapshot: nothing held at rest that a setting gives back.",
                          highlight=False)
        console.print(f"  race it: {ans.race}", highlight=False, soft_wrap=True)   # a line to paste: never broken
        if ins.children:
            console.print(f"  its children: {', '.join(map(str, ins.children))}", highlight=False)
        console.print()
    render_growth(growth(items), console, experiment)


def sample_line(ins: Inspection) -> str:
    """One sample of a watch in a line: when, the anonymous RSS and its parts, the stops, the rules."""
    s = ins.snapshot
    sp = s.split
    parts = ", ".join(f"{PART_WORDS[k]} {_size(v)}" for k in PARTS if (v := sp.parts.get(k))) if sp else ""
    stops = f"; {s.pauses} stops, longest {s.pause_max_ms:.1f} ms" if s.stopped else ""
    rules = f"; fires: {', '.join(f.rule for f in ins.answer.fired)}" if ins.answer.fired else ""
    return (f"+{s.t_s:6.1f} s  {s.pid}  anon {_size(sp.anon) if sp else '?'}" + (f": {parts}" if parts else "")
            + f"; RSS {_size(s.rss)}{stops}{rules}")


def growth_line(g: Growth) -> str:
    """Which part grew, first sample to last, in bytes and as a share of the anonymous RSS's growth."""
    head = f"Process {g.pid} over {g.t_s:.1f} s ({g.samples} samples)"
    if g.grew is None:
        return (f"{head}: no part grew by {_size(GREW_AT_LEAST)} or more; the anonymous RSS changed by "
                f"{_signed(g.anon_change)}.")
    share = (f", {g.share:.0%} of the anonymous RSS's growth ({_signed(g.anon_change)})" if g.share is not None
             else f"; the anonymous RSS changed {_signed(g.anon_change)}")
    return f"{head}: {PART_WORDS[g.grew]} grew most, {_signed(g.change)}{share}."


def changes_line(g: Growth) -> str:
    """Each part's change over the watch (those it held at either end)."""
    return "each part: " + ", ".join(f"{PART_WORDS[r['part']]} {_signed(r['change'])}" for r in g.parts
                                     if r["first"] or r["last"])


def render_growth(gs: list[Growth], console: Console, experiment: int | None = None) -> None:
    for g in gs:
        console.print(growth_line(g), highlight=False, soft_wrap=True)
        console.print("  " + changes_line(g), highlight=False, soft_wrap=True)
    if gs and experiment is not None:
        console.print(f"Part by part: `alloclab diff {experiment}:0 {experiment}:-1`.", style="dim", highlight=False)


def render_json(items: list[Inspection], experiment: int | None) -> str:
    return json.dumps({"experiment": experiment, "inspections": [i.to_dict() for i in items],
                       "growth": [g.to_dict() for g in growth(items)]}, indent=1) + "\n"


def render_diff(d: dict, console: Console) -> None:
    same = "one process" if d["same_process"] else "two different processes"
    console.print(f"Process {d['a']['pid']} at {d['a']['when']} against {d['b']['pid']} at {d['b']['when']} "
                  f"({same})", highlight=False)
    t = Table(show_edge=False, box=None)
    for col in ("part", "A", "B", "change"):
        t.add_column(col, justify="left" if col == "part" else "right")
    for r in d["parts"]:
        t.add_row(PART_WORDS[r["part"]], _size(r["a"]), _size(r["b"]), _signed(r["change"]))
    for k, words in (("anon", "anonymous RSS"), ("rss", "RSS"), ("pss", "PSS")):
        v = d["totals"][k]
        t.add_row(words, _size(v["a"]), _size(v["b"]), _signed(v["change"]))
    console.print(t)
    grew = d["grew_most"]
    console.print(f"Grew most: {PART_WORDS[grew]}." if grew else "No part grew.", highlight=False)


def _signed(n: int) -> str:
    return ("+" if n > 0 else "-" if n < 0 else "") + _size(abs(n))
