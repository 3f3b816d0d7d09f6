"""tune's answer in the terminal and as Markdown: what to use for speed, for memory and after each
phase, the mechanism behind each, how to apply it, and what was ruled out. Renders only: the
choices were made by stats/tune_answer.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from alloclab.stats.tune_answer import TuneAnswer
from alloclab.tune.diagnosis import size_text

if TYPE_CHECKING:   # the diagnosis's types: a report of the race needs neither the rules nor their catalog
    from alloclab.tune.diagnosis import Reading
    from alloclab.tune.prescribe import Prescription

_GOAL = {"speed": "Best for speed", "memory": "Best for memory"}


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


def heading(p) -> str:
    """A pick's first line: 'Best for speed: mimalloc: wall_s -36.9% [-50.0, -20.3]'."""
    return f"{_GOAL.get(p.goal, 'Best for ' + p.goal)}: {p.label}: {p.effect}"


def sections(ans: TuneAnswer) -> list[tuple[str, bool, list[str]]]:
    """(title, a warning, lines) of what is not a pick, in the order every format gives them."""
    return [(title, warn, lines) for title, warn, lines in (
        ("Also decided better (its difference from the pick is not tested)", False, ans.also_better),
        ("Ruled out (decided worse or equivalent, or below the leader)", False, ans.ruled_out),
        ("Not decided within the budget", False, ans.open),
        ("Screened out before the race (a short screen's estimate, not a verdict)", False, ans.screened_out),
        ("Not in effect", True, ans.not_in_effect),
        ("Refused by the installed allocators", True, ans.refused)) if lines]


def answer_lines(ans: TuneAnswer) -> list[tuple[str, str]]:
    """(style, text) lines, the picks first."""
    out: list[tuple[str, str]] = []
    for p in ans.picks:
        out.append(("bold green", heading(p)))
        if p.mechanism:
            out.append(("", f"  why: {p.mechanism}"))
        if p.cost:
            out.append(("", f"  beside it: {p.cost}"))
        out.append(("", f"  run:     {p.apply.env_line}"))
        out += [("", ("  systemd: " if i == 0 else "           ") + line)
                for i, line in enumerate(p.apply.systemd.splitlines())]
    if ans.nothing:
        out.append(("bold yellow", f"Nothing to change: {ans.nothing}"))
    if ans.undecided:
        out.append(("bold yellow", f"Not decided yet: {ans.undecided}"))
    for title, warn, lines in sections(ans):
        out.append(("bold yellow" if warn else "bold", f"{title}:"))
        out += [("", f"  {line}") for line in lines]
    return out


def title(e) -> str:
    """The answer's heading, naming the race and the diagnosis it came from (a stored Experiment)."""
    diag = (e.config.tune or {}).get("diagnosis_experiment")
    return f"Tune answer (race: experiment {e.id}" + (f", diagnosis: experiment {diag})" if diag else ")")


def render(ans: TuneAnswer, console: Console, title: str = "Tune") -> None:
    console.print(f"[bold]{escape(title)}[/]", highlight=False)
    for style, text in answer_lines(ans):
        console.print(f"[{style}]{escape(text)}[/]" if style else escape(text), highlight=False, soft_wrap=False)


def markdown(ans: TuneAnswer, title: str = "Tune") -> str:
    """The answer as Markdown: its lines as the terminal gives them, in a text block (the commands and
    the systemd drop-in keep their indentation, and a patch mail quotes it as it is)."""
    return "\n".join([f"### {title}", "", "```text", *(text for _, text in answer_lines(ans)), "```"]) + "\n"
