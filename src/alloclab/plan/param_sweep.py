"""Parameter sweeps: `--param NAME=A,B,C` (and the range forms of plan/sweep.py) expanded into one
workload per combination, and the curve structures that say which workloads form a sweep.

In: --param items and a command or built-in workload names. Out: the Workloads of the product
of the swept values (placeholders {NAME} filled in) and the sweep structures stored with the
experiment.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from alloclab.errors import AlloclabError
from alloclab.plan.sweep import (MAX_CELLS, MAX_POINTS, _PLACEHOLDER, _Slot, _check_distinct, _expand_item,
                                 _segment_template, _split_top, point_value)


@dataclass
class ParamSweep:
    combos: list[dict[str, str]]    # one parameter set per workload to build
    swept: list[str]                # the names that take more than one value


def _param_values(item: str) -> tuple[str, list[str]]:
    key, sep, value = item.partition("=")
    key, value = key.strip(), value.strip()
    where = f"--param '{item}'"
    if not sep or not key or not value:
        raise AlloclabError(f"Cannot read {where}: write NAME=VALUE, NAME=A,B,C, NAME={{A,B}} or a range "
                            f"like NAME=1..8*2, e.g. --param threads=1,2,4,8.")
    if "{" in value or "}" in value:
        if len(_split_top(value, where)) > 1:
            raise AlloclabError(f"{where} mixes a list in braces with commas outside it; write either "
                                f"{key}=1,2,4 or {key}={{1,2,4}}.")
        template = _segment_template(value, key, where)
        slots = [p for p in template if isinstance(p, _Slot)]
        values = []
        for combo in itertools.product(*(s.texts for s in slots)):
            chosen = iter(combo)
            values.append("".join(p if isinstance(p, str) else next(chosen) for p in template))
    else:
        values = [t for part in value.split(",") for t in _expand_item(part, where)]
    _check_distinct(values, where)
    if len(values) > MAX_POINTS:
        raise AlloclabError(f"{where} gives {len(values)} values (more than {MAX_POINTS}); use fewer points.")
    return key, values


def expand_params(items: list[str]) -> ParamSweep:
    """--param items -> one parameter dict per point of their cartesian product."""
    named: dict[str, list[str]] = {}
    for item in items:
        key, values = _param_values(item)
        if key in named:
            raise AlloclabError(f"--param {key} is given twice; give all its values in one option, e.g. "
                                f"--param {key}=1,2,4.")
        named[key] = values
    total = math.prod(len(v) for v in named.values())
    if total > MAX_CELLS:
        raise AlloclabError(f"The --param values make {total} workloads (more than {MAX_CELLS}); sweep fewer "
                            f"parameters at once.")
    combos = [dict(zip(named, combo)) for combo in itertools.product(*named.values())]
    return ParamSweep(combos or [{}], [k for k, v in named.items() if len(v) > 1])


def substitute(argv: list[str], params: dict[str, str]) -> list[str]:
    """`{name}` in argv elements -> the value (each element stays one argument; no shell)."""
    return [_PLACEHOLDER.sub(lambda m: params.get(m.group(1), m.group(0)), a) for a in argv]


def command_workloads(argv: list[str], params: ParamSweep, metrics, shell: bool = False) -> list:
    """`alloclab compare -- CMD ... {threads}` with --param threads=...: one workload per point."""
    from alloclab.workloads.command import command_workload

    if not params.combos[0]:
        return [command_workload(argv, metrics, shell)]
    if shell:
        raise AlloclabError("--param substitutes values into the command's arguments, which --shell would hand to a "
                            "shell as one string; drop --shell and give the program and its arguments after --, "
                            "e.g. -- ./bench --threads {threads}.")
    used = {m.group(1) for a in argv for m in _PLACEHOLDER.finditer(a)}
    missing = [k for k in params.combos[0] if k not in used]
    if missing:
        raise AlloclabError(f"--param {missing[0]} is given but the command has no {{{missing[0]}}} to put it in; "
                            f"write it where the value goes, e.g. -- ./bench --threads {{{missing[0]}}}.")
    template = " ".join(argv)
    out = []
    for combo in params.combos:
        w = command_workload(substitute(argv, combo), metrics)
        w.params = dict(combo)
        w.info["template"] = template
        out.append(w)
    return out


def builtin_workloads(names: list[str], params: ParamSweep, quick: bool) -> list:
    """Built-in workloads for every point; a workload without a swept parameter is built once."""
    from alloclab.workloads import builtin

    known = {k for n in names for k in builtin.get(n).params}
    unused = sorted(set(params.combos[0]) - known)
    if unused:
        raise AlloclabError(f"No chosen workload has a parameter {', '.join(unused)}. Run `alloclab suite --list` "
                            f"to see each workload's parameters.")
    out, seen = [], set()
    for name in names:
        defn = builtin.get(name)
        for combo in params.combos:
            own = {k: v for k, v in combo.items() if k in defn.params}
            key = (name, tuple(own.items()))
            if key not in seen:
                seen.add(key)
                out.append(builtin.workload(name, own, quick=quick))
    return out


def param_sweeps(workloads: list, swept: list[str]) -> list[dict]:
    """Curves along each swept parameter: workloads of one program with the other parameters equal."""
    out = []
    for name in swept:
        groups: dict[tuple, list[int]] = {}
        for i, w in enumerate(workloads):
            if name not in w.params:
                continue
            base = w.info.get("builtin") or w.info.get("template") or w.name
            fixed = tuple(sorted((k, v) for k, v in w.params.items() if k != name))
            groups.setdefault((base, fixed), []).append(i)
        for (base, fixed), idxs in groups.items():
            if len(idxs) < 2:
                continue
            out.append({"param": name, "base": base, "fixed": dict(fixed),
                        "points": [{"workload": i, "value": point_value(workloads[i].params[name]),
                                    "text": workloads[i].params[name]} for i in idxs]})
    return out
