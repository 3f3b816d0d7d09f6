"""tune's answer in the terminal and as Markdown: what to use for speed, for memory and after each
phase, the mechanism behind each, how to apply it, and what was ruled out. Renders only: the
choices were made by stats/tune_answer.py."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from alloclab.stats.tune_answer import TuneAnswer

_GOAL = {"speed": "Best for speed", "memory": "Best for memory"}


def heading(p) -> str:
    """A pick's first line: 'Best for speed: mimalloc: wall_s -36.9% [-50.0, -20.3]'."""
    return f"{_GOAL.get(p.goal, 'Best for ' + p.goal)}: {p.label}: {p.effect}"


def sections(ans: TuneAnswer) -> list[tuple[str, bool, list[str]]]:
    """(title, a warning, lines) of what is not a pick, in the order every format gives them."""
    return [(title, warn, lines) for title, warn, lines in (
        ("Also decided better (its difference from the pick is not tested)", False, ans.also_better),
        ("Ruled out (decided worse or equivalent, or below the leader)", False, ans.ruled_out),
        ("Not decided within the budget", False, ans.open),
        ("Screened out or not raced (a short screen's estimate at most, not a verdict)", False, ans.screened_out),
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
    diag = e.config.tune.diagnosis_experiment if e.config.tune else None
    return f"Tune answer (race: experiment {e.id}" + (f", diagnosis: experiment {diag})" if diag else ")")


def render(ans: TuneAnswer, console: Console, title: str = "Tune") -> None:
    console.print(f"[bold]{escape(title)}[/]", highlight=False)
    for style, text in answer_lines(ans):
        console.print(f"[{style}]{escape(text)}[/]" if style else escape(text), highlight=False, soft_wrap=False)


def markdown(ans: TuneAnswer, title: str = "Tune") -> str:
    """The answer as Markdown: its lines as the terminal gives them, in a text block (the commands and
    the systemd drop-in keep their indentation, and a patch mail quotes it as it is)."""
    return "\n".join([f"### {title}", "", "```text", *(text for _, text in answer_lines(ans)), "```"]) + "\n"
