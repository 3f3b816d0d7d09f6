"""tune's answer in words, for every format: what the program runs, the picks (better on both axes
first, then the best for speed, for memory, at its end and after each phase), the mechanism behind
each, what it costs on the other axis, how to apply it, and every other candidate with why it was not
picked. The choices were made by stats/tune_answer.py; the words are this module's alone.
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from alloclab.stats.estimates import format_comparison
from alloclab.stats.failing import default_fails_text
from alloclab.report.numbers import fmt_value
from alloclab.stats.hugepages import HugeNote
from alloclab.stats.lazyfree import LazyNote
from alloclab.stats.two_groups import TwoGroups
from alloclab.stats.tune_answer import Effect, Other, Outcome, Pick, Reason, State, TuneAnswer
from alloclab.workloads.metrics import memory_goal

_GOAL = {"both": "Better on both", "speed": "Best for speed", "memory": "Best for memory"}


def fact_line(fact: dict) -> str:
    """A fact tune states before its answer: the baseline where the program does not run glibc's
    malloc (tune/baseline.py), a fingerprint that failed only under alloclab (tune/diagnose_run.py)."""
    if fact.get("fact") == "baseline" and fact["how"] == "linked":
        via = f" through {fact['via']}" if fact.get("via") else ""
        version = f" {fact['version']}" if fact.get("version") else ""
        return (f"{fact['program']} links {fact['allocator']}{version} ({fact['library']}{via}): the baseline is "
                f"{fact['allocator']} as linked, and glibc races as a candidate, through alloclab's forwarding preload")
    if fact.get("fact") == "baseline" and fact["how"] == "bundled" and fact.get("settings"):
        version = f" {fact['version']}" if fact.get("version") else ""
        return (f"{fact['program']} bundles its own {fact['via']}{version} ({fact['library']}): no preload replaces "
                f"it, so none races; the baseline is that copy as built, and its own settings "
                f"({', '.join(fact['settings'][:4])}) are the candidates")
    if fact.get("fact") == "baseline" and fact["how"] == "bundled":
        return (f"{fact['program']} bundles its own {fact['via']} under prefixed names ({fact['library']}): no preload "
                f"replaces it, so every candidate changes only what reaches the malloc family; the baseline is the "
                f"program as it is")
    if fact.get("fact") == "bound":
        race = ("The rules that fired read only the allocation rate, and {}: they race" if fact["fired"] else
                "No rule fired, and {}: the plain allocators race")
        return race.format(share_text(fact))
    if fact.get("fact") == "alloclab-failure":
        v = fact["variant"]
        return (f"alloclab's fingerprint run of {fact['workload']} under {v} {fact['status']} ({fact['detail']}), and "
                f"{fact['plain_runs']} plain run{'s' if fact['plain_runs'] != 1 else ''} of it under {v}, without alloclab's interposer, succeeded: the "
                f"failure is alloclab's, not the program's. The diagnosis went on without {v}'s fingerprint: the "
                f"rules that read it were not read")
    raise ValueError(f"unknown fact {fact.get('fact')!r}")


def share_text(b: dict) -> str:
    """What a profiled look bounds (tune/bound.py's QuietBound, as recorded), in words."""
    what = (f"{b['metric']} (a rate: at most 1/(1 - share) - 1)" if b["rate"]
            else f"{b['metric'] or 'wall time'} (a time: at most the share)")
    where = f" of {b['workload']}" if b["workloads"] > 1 else ""
    most = f", the most of its {b['workloads']} workloads" if where else ""
    return (f"the allocator's functions and the kernel's memory management took {b['share'] * 100:.2f}% of "
            f"{b['default']}'s CPU in the profiled runs{where} ({b['samples']:,} samples{most}; at most "
            f"{b['upper'] * 100:.2f}% at 95% confidence): no allocator or setting can improve {what} by more than "
            f"about {b['bound'] * 100:.2f}%")


def stop_line(stop, data: dict) -> tuple[str, str]:
    """(style, text) of tune's stop where it raced nothing (tune/session.py's Stop and its figures)."""
    name = stop.name
    if name == "NOTHING_TO_TUNE":
        calls = f"the program makes {data['calls_per_s']:,.0f} allocation calls a second"
        seen = (f"{calls}, no rule of the catalog fired" if not data["fired"] else
                f"{calls}, the rules that fired ({', '.join(data['fired'])}) read only that rate, no workload has a "
                f"memory phase")
        return "bold green", f"Nothing to tune: {seen}, and {share_text(data)}, below the {data['margin'] * 100:g}% margin."
    if name == "DEFAULT_FAILS":
        text = default_fails_text(data["default"], f"its fingerprint run {data['status']} ({data['detail']})",
                                  data["stderr"], data["ran_under"])
        return "bold red", text[0].upper() + text[1:] + "."
    if name == "NO_CANDIDATE":
        if data.get("refused"):
            return "bold yellow", ("No candidate to race: every proposed setting was refused by the installed "
                                   "allocators (listed above).")
        return "bold yellow", (f"No candidate to race: the rules that fired ({', '.join(data.get('fired') or [])}) "
                               f"propose other allocators as installed, and -a {' -a '.join(data.get('allocators') or [])}"
                               f" left none beside the default. Name another allocator with -a, or leave -a out.")
    raise ValueError(f"unknown stop {stop!r}")


def facts(ans: TuneAnswer) -> list[str]:
    default = ans.lazyfree[0].label if ans.lazyfree and ans.lazyfree[0].without is None else None
    return [fact_line(f) for f in ([ans.baseline] if ans.baseline else []) + ans.failures] + \
        [lazy_text(n) for n in ans.lazyfree if n.label == default]


def lazy_text(n: LazyNote) -> str:
    """'... counts 128.0 MiB LazyFree of 192.3 MiB ...; without it: -12.0% [-14.1, -9.9]'."""
    text = (f"{n.workload}: {n.label}'s anonymous RSS at its end counts {n.mib:.1f} MiB LazyFree of "
            f"{n.end_mib:.1f} MiB: pages freed with MADV_FREE, which the kernel takes back when it needs "
            f"them, at no cost to the program")
    if n.without is not None:
        text += f"; without them, against the default: {format_comparison(n.without)} (end_anon_nolazy_mb)"
    return text


def pick_lazy(ans: TuneAnswer, p: Pick) -> list[str]:
    return [lazy_text(n) for n in ans.lazyfree if n.label == p.label and n.without is not None]


def two_groups_text(n: TwoGroups, also: list[str] = ()) -> str:
    """'/tmp/bigheap 512: its wall time runs fell into two groups, 6 of 12 at 0.0809 s and 6 at 0.363 s
    (the default: 0.389 s): ...'; `also`: the other metrics whose runs split with it."""
    def at(v: float) -> str:
        return f"{fmt_value(v)} {n.unit}".rstrip()
    alike = f" (and its {' and '.join(also)} alike)" if also else ""
    text = (f"{n.workload}: its {metric_words(n.metric)} runs{alike} fell into two groups, {n.low[0]} of "
            f"{n.low[0] + n.high[0]} at {at(n.low[1])} and {n.high[0]} at {at(n.high[1])}")
    if n.default_split:
        return text + (", and the default's split too: something outside the allocator changed between runs "
                       "(the machine's speed, a server's state), so read the effect as a mixture")
    base = f" (the default: {at(n.default_median)})" if n.default_median is not None else ""
    return text + f"{base}: the setting acted in only some runs, so the effect above is a mixture, not what each run gets"


def huge_text(n: HugeNote) -> str:
    """'/tmp/bigheap 512: 6 of 12 runs ended with 510 MiB of huge pages (AnonHugePages), ...'."""
    mib = f" with {fmt_value(n.given_mb)} MiB of" if n.given_mb is not None else " with"
    others = "; the others with none" if 0 < n.given < n.runs else ""
    return (f"{n.workload}: {n.given} of {n.runs} runs ended{mib} transparent huge pages (AnonHugePages){others}; "
            f"the default's {n.default_given} of {n.default_runs}")


def pick_huge(ans: TuneAnswer, p: Pick) -> list[str]:
    return [huge_text(n) for n in ans.hugepages if n.label == p.label]


def pick_two_groups(ans: TuneAnswer, p: Pick) -> list[str]:
    """One line a workload: its first metric that split, the others named beside it."""
    mine = [n for n in ans.two_groups if n.label == p.label]
    firsts: dict[str, TwoGroups] = {}
    for n in mine:
        firsts.setdefault(n.workload, n)
    return [two_groups_text(first, [metric_words(n.metric) for n in mine if n.workload == w and n is not first])
            for w, first in firsts.items()]


def metric_words(name: str) -> str:
    goal = memory_goal(name)
    if goal == "memory":
        return "peak RSS"
    if goal == "memory at its end":
        return "anonymous RSS at its end"
    if goal and goal.startswith("memory after "):
        return "RSS after " + goal.removeprefix("memory after ")
    return {"wall_s": "wall time", "minflt": "minor page faults"}.get(name, name)


def effects_text(effects: tuple[Effect, ...]) -> str:
    """'tps +6.2% [+2.9, +9.6]', each workload named where there are several."""
    several = len({e.workload for e in effects}) > 1
    return "; ".join(f"{e.workload + ': ' if several else ''}{metric_words(e.metric)} {format_comparison(e.comparison)}"
                     for e in effects)


def goals_text(goals: tuple[str, ...]) -> str:
    """'Better on both', 'Best for speed', 'Better on both, and best for speed and memory at its end'."""
    both = "both" in goals
    rest = [g for g in goals if g != "both"]
    if not rest:
        return _GOAL["both"]
    joined = ", ".join(rest[:-1]) + (" and " if len(rest) > 1 else "") + rest[-1]
    return f"Better on both, and best for {joined}" if both else f"Best for {joined}"


def heading(p: Pick) -> str:
    """A pick's first line: 'Best for speed: mimalloc: wall_s -36.9% [-50.0, -20.3]'."""
    return f"{goals_text(p.goals)}: {p.label}: {effects_text(p.effects)}"


def why(p: Pick) -> str:
    cand = p.candidate
    parts = ["the allocator as installed, with its defaults"] if p.plain else \
        [f"{cand.mechanism}; {cand.why}"] if cand is not None else []
    if p.faults:
        ratios = [e.comparison.ratio for e in p.faults]
        lo, hi = min(ratios), max(ratios)
        span = f"{(lo - 1) * 100:+.0f}%" if abs(hi - lo) < 0.01 else f"{(lo - 1) * 100:+.0f}% to {(hi - 1) * 100:+.0f}%"
        parts.append(f"measured against the default: minor page faults {span}")
    return ". ".join(parts)


def costs_text(effects: tuple[Effect, ...]) -> str:
    """effects_text, where the metrics decided equivalent are said together, once a workload
    (PostgreSQL's pick had eight of them, each "≈ within ±2% [...]")."""
    same = [e for e in effects if e.comparison.verdict == "equivalent"]
    if len(same) < 2:
        return effects_text(effects)
    several = len({e.workload for e in effects}) > 1
    groups: dict[str, list[str]] = {}
    for e in same:
        groups.setdefault(e.workload, []).append(metric_words(e.metric))
    margin = f"{same[0].comparison.margin * 100:g}"
    told = [f"{w + ': ' if several else ''}{', '.join(names)} ≈ within ±{margin}%" for w, names in groups.items()]
    rest = tuple(e for e in effects if e not in same)
    return "; ".join(([effects_text(rest)] if rest else []) + told)


def beside(p: Pick) -> str:
    """The other axis: what the pick costs or saves; for a memory pick at more than 1.5x the time, the
    best candidate that costs none beside it."""
    text = costs_text(p.costs)
    if p.instead is not None:
        text += (f"; costs no time: {p.instead.label} ({effects_text(p.instead.effects)}; "
                 f"{effects_text(p.instead.costs)})")
    return text


def _other_line(o: Other) -> str:
    rule = f" ({o.rule}, expected {o.expect})" if o.rule else ""
    line = f"{o.label}{rule}: {effects_text(o.effects)}"
    if o.reason == Reason.BELOW_LEADER and o.leader:
        line += (f" (dropped at {o.runs} runs: the most its interval allows is below the least {o.leader}'s "
                 f"allows)")
    return line


def _screened_line(s: dict) -> str:
    if "label" not in s:
        return s.get("text", "")
    rule = f" ({s['rule']}, expected {s['expect']})" if s.get("rule") else ""
    if s.get("not_screened"):
        return f"{s['label']}{rule}: not raced: {s['not_screened']}"
    by_axis: dict[str, list[str]] = {}
    estimates = s.get("estimates", [])
    several = len({x["workload"] for x in estimates}) > 1
    # An axis read on several metrics (the peak, and after each phase) names each.
    metrics: dict[str, set] = {}
    for e in estimates:
        metrics.setdefault(e["axis"], set()).add(e.get("metric"))
    for e in estimates:
        named = f"{metric_words(e['metric'])} " if len(metrics[e["axis"]]) > 1 and e.get("metric") else ""
        # A screen's few runs choose the finalists; their interval ("[-100.0, +48994967476.9]" on a
        # threaded program) bounds nothing: the estimate alone, with the runs it rests on.
        by_axis.setdefault(e["axis"], []).append(f"{e['workload'] + ': ' if several else ''}{named}"
                                                 f"{(e['ratio'] - 1) * 100:+.1f}%")
    words = ", ".join(f"{axis}: " + "; ".join(texts) for axis, texts in by_axis.items()) or "no estimate"
    if estimates and s.get("runs"):
        words += f" (estimates of {s['runs']} screen run{'s' if s['runs'] != 1 else ''} each)"
    lost = (f"; its interval lies wholly on the worse side after {s['runs']} screen runs"
            if s.get("worse_throughout") else "")
    return f"{s['label']}{rule}: screened at {words}{lost}"


def sections(ans: TuneAnswer) -> list[tuple[str, bool, list[str]]]:
    """(title, a warning, lines) of what is not a pick, in the order every format gives them."""
    lines = {o: [_other_line(x) for x in ans.of(o)] for o in (Outcome.ALSO_BETTER, Outcome.RULED_OUT, Outcome.OPEN)}
    return [(title, warn, ls) for title, warn, ls in (
        ("Also decided better (its difference from the pick is not tested)", False, lines[Outcome.ALSO_BETTER]),
        ("Ruled out (decided worse or equivalent, or below the leader)", False, lines[Outcome.RULED_OUT]),
        ("Not decided within the budget", False, lines[Outcome.OPEN]),
        ("Screened out or not raced (a short screen's estimate at most, not a verdict)", False,
         [_screened_line(s) for s in ans.screened_out]),
        ("Not in effect", True, [f"{o.label}: the verification found the setting or allocator not in effect, so it "
                                 f"was left out of the answer" for o in ans.of(Outcome.NOT_IN_EFFECT)]),
        ("Refused by the installed allocators", True, [f"{o.spec} ({o.rule}): {o.detail}"
                                                       for o in ans.of(Outcome.REFUSED)])) if ls]


def state_line(ans: TuneAnswer) -> tuple[str, str] | None:
    """(style, text) where no candidate is picked: keep the default, or what stayed open."""
    if ans.state == State.KEEP:
        who = "every finalist of the screen" if ans.screened_out else "every candidate"
        return "bold yellow", (f"Nothing to change: {who} was decided worse or equivalent on speed, and none decided "
                               f"to hold less memory: keep the default")
    if ans.state == State.OPEN and ans.largest_open is not None:
        top = ans.largest_open
        speed = effects_text(top.effects[:1])
        return "bold yellow", (f"Not decided yet: nothing decided better within the budget, and "
                               f"{len(ans.of(Outcome.OPEN))} candidate{'s' if len(ans.of(Outcome.OPEN)) != 1 else ''} still open; the largest estimate is "
                               f"{top.label} ({speed}). Keeping the default is not shown to be right: a larger "
                               f"--budget (or --max-runs) decides it")
    return None


def open_lead(ans: TuneAnswer) -> str | None:
    """The line before a pick that costs x1.5 on its other axis where a candidate that may be better on
    both stayed open."""
    o = ans.open_on_both
    if o is None or not ans.picks:
        return None
    p = ans.picks[0]
    costly = min((e for e in p.costs if e.comparison.gain > 0), key=lambda e: e.comparison.gain, default=None)
    slow = 1 / costly.comparison.gain if costly is not None else 1.0
    what = "the time" if costly is None or not memory_goal(costly.metric) else \
        f"the default's {metric_words(costly.metric)}"
    kind = "memory" if any(g.startswith("memory") for g in p.goals[:1]) else "speed"
    return (f"Not decided yet: {o.label} may be better on both ({effects_text(o.effects)}); a larger --budget "
            f"decides it. The {kind} pick below, {p.label}, costs x{slow:.2f} {what}")


def pick_view(p: Pick, ans: TuneAnswer | None = None) -> dict:
    """A pick's lines by role (the HTML page lays them out itself)."""
    return {"heading": heading(p), "why": why(p), "beside": beside(p) if p.costs else "", "apply": p.apply,
            "lazyfree": pick_lazy(ans, p) if ans is not None else [],
            "two_groups": pick_two_groups(ans, p) if ans is not None else [],
            "hugepages": pick_huge(ans, p) if ans is not None else []}


def answer_lines(ans: TuneAnswer) -> list[tuple[str, str]]:
    """(style, text) lines: the facts, the picks, then the rest."""
    out: list[tuple[str, str]] = [("bold", f"{line}.") for line in facts(ans)]
    if (lead := open_lead(ans)) is not None:
        out.append(("bold yellow", lead))
    for p in ans.picks:
        v = pick_view(p, ans)
        out.append(("bold green", v["heading"]))
        if v["why"]:
            out.append(("", f"  why: {v['why']}"))
        if v["beside"]:
            out.append(("", f"  beside it: {v['beside']}"))
        out += [("", f"  LazyFree: {line}") for line in v["lazyfree"]]
        out += [("", f"  huge pages: {line}") for line in v["hugepages"]]
        out += [("yellow", f"  two groups: {line}") for line in v["two_groups"]]
        out.append(("", f"  run:     {p.apply.env_line}"))
        if p.apply.build:
            out.append(("", f"  build:   {p.apply.build}"))
        out += [("", ("  systemd: " if i == 0 else "           ") + line)
                for i, line in enumerate(p.apply.systemd.splitlines())]
    if (state := state_line(ans)) is not None:
        out.append(state)
    for title, warn, lines in sections(ans):
        out.append(("bold yellow" if warn else "bold", f"{title}:"))
        out += [("", f"  {line}") for line in lines]
    return out


def title(e) -> str:
    """The answer's heading, naming the race and the diagnosis it came from (a stored Experiment)."""
    diag = e.config.tune.diagnosis_experiment if e.config.tune else None
    return f"Tune answer (race: experiment {e.id}" + (f", diagnosis: experiment {diag})" if diag else ")")


def render(ans: TuneAnswer, console: Console, title: str = "Tune") -> None:
    console.print(Text(title, style="bold"), highlight=False)
    for style, text in answer_lines(ans):
        # A shell line is pasted whole: the terminal may wrap it, a newline in it would break it.
        console.print(Text(text, style=style), highlight=False, soft_wrap=text.startswith("  run:"))


def markdown(ans: TuneAnswer, title: str = "Tune") -> str:
    """The answer as Markdown: its lines as the terminal gives them, in a text block (the commands and
    the systemd drop-in keep their indentation, and a patch mail quotes it as it is)."""
    return "\n".join([f"### {title}", "", "```text", *(text for _, text in answer_lines(ans)), "```"]) + "\n"
