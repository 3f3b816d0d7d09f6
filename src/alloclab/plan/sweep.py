"""Sweeps, ablation and thread scaling: expanding one written spec into many cells, and reading
the results back as curves.

Written forms (expanded before any variant or workload is built, so every point becomes a cell
of one experiment and the runner interleaves them all in the same randomized blocks):

  START..STOP*FACTOR   geometric steps:  128K..256M*4 -> 128K,512K,2M,8M,32M,128M
  START..STOP+STEP     arithmetic steps: 1..8+1 -> 1,2,...,8
  {A,B,C}              a list, also inside a raw value (MALLOC_CONF=dirty_decay_ms:{0,1000});
                       an item may itself be a range: {0,128K..1M*2}
  NAME=A,B,C           (workload parameters only, where a comma cannot separate settings)

Several swept slots in one spec (or several swept --param) give their cartesian product.
The sweep structures stored with the experiment say which cells form a curve:
  {"tunable": KEY, "setting": VAR, "fixed": {...}, "points": [{"variant": label, "value": v, "text": t}]}
  {"param": NAME, "base": workload, "fixed": {...}, "points": [{"workload": idx, "value": v, "text": t}]}
  {"ablation": {"baseline": label, "settings": [{"setting": text, "variant": label}], "combined": label,
                "spec": as written}}
`value` is a number (sizes in bytes) or, for settings that are not numbers, the text itself.
A product of several swept settings gives one 1-D curve along each of them per combination of the
others' values (their values in "fixed").

Reading back: sweep_results() gives the curves (median and 95% CI of every headline metric per point,
the best, the cheapest within noise, thread scaling for `threads`), ablation_result() the contributions
and the interaction; cli_sweep renders both.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from alloclab.stats import estimates as stats
from alloclab.stats import ranktests
from alloclab.stats.analysis import Analysis, MetricRow
from alloclab.errors import AlloclabError
from alloclab.catalog.variants import Setting, _parse_settings, _split_spec, expand_size

MAX_POINTS = 64          # per swept slot or parameter
MAX_CELLS = 128          # per spec (product of its slots) or per --param product
SCALING_GAIN = 1.10      # adding threads must give at least +10% to count as scaling
SCALING_PARAMS = ("threads",)

_NUM = r"\d+(?:\.\d+)?[KMGT]?"
_RANGE = re.compile(rf"^({_NUM})\.\.({_NUM})(?:([*+])({_NUM}))?$", re.IGNORECASE)
_SUFFIX = re.compile(r"[KMGT]$", re.IGNORECASE)
_KEY_START = re.compile(r"^([A-Za-z_][\w.]*)=")
_NAME_BEFORE = re.compile(r"([A-Za-z_][\w.]*)[:=]$")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][\w-]*)\}")
_RANGE_FORMS = ("write START..STOP*FACTOR for geometric steps (e.g. 128K..256M*4 gives 128K, 512K, "
                "2M, 8M, 32M, 128M) or START..STOP+STEP for even steps (e.g. 1..8+1)")


# --- values -----------------------------------------------------------------------------------

def number(text: str) -> float | None:
    """'64M' -> 67108864, '1000' -> 1000, '0.5' -> 0.5; None when the text is not a number."""
    expanded = expand_size(text.strip())
    try:
        v = float(expanded)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _plain(v: float) -> int | float:
    return int(v) if float(v).is_integer() else v


def format_size(n: int) -> str:
    """131072 -> '128K', 3145728 -> '3M', 1000 -> '1000' (largest unit that divides exactly)."""
    for power, unit in ((4, "T"), (3, "G"), (2, "M"), (1, "K")):
        if n >= 1024 ** power and n % 1024 ** power == 0:
            return f"{n // 1024 ** power}{unit}"
    return str(n)


def expand_range(text: str, where: str) -> list[str]:
    """'128K..256M*4' -> ['128K', '512K', '2M', '8M', '32M', '128M'] (stop included when hit)."""
    m = _RANGE.match(text.strip())
    if not m:
        raise AlloclabError(f"Cannot read the range '{text}' in {where}: {_RANGE_FORMS}.")
    start_t, stop_t, op, step_t = m.groups()
    if op is None:
        raise AlloclabError(f"The range '{text}' in {where} has no step: {_RANGE_FORMS}.")
    if op == "*" and _SUFFIX.search(step_t):
        raise AlloclabError(f"The factor of the range '{text}' in {where} is a plain number (e.g. 128K..256M*4).")
    start, stop, step = number(start_t), number(stop_t), number(step_t)
    if not (start.is_integer() and stop.is_integer()):
        raise AlloclabError(f"The range '{text}' in {where} must run over whole numbers; list fractional "
                            f"values in braces instead, e.g. {{0.5,1,1.5}}.")
    if stop < start:
        raise AlloclabError(f"The range '{text}' in {where} runs backwards ({stop_t} is below {start_t}); "
                            f"write the smaller value first.")
    if op == "*" and (step <= 1 or start <= 0):
        raise AlloclabError(f"The geometric range '{text}' in {where} needs a start above 0 and a factor above 1 "
                            f"(e.g. 128K..256M*4).")
    if op == "+" and (step <= 0 or not step.is_integer()):
        raise AlloclabError(f"The range '{text}' in {where} needs a whole step above 0 (e.g. 1..8+1).")
    values: list[int] = []
    v = start
    while v <= stop and len(values) <= MAX_POINTS:
        n = int(round(v))
        if not values or n != values[-1]:
            values.append(n)
        v = v * step if op == "*" else v + step
    if len(values) > MAX_POINTS:
        raise AlloclabError(f"The range '{text}' in {where} gives more than {MAX_POINTS} points; use a larger "
                            f"step or a narrower range.")
    sized = bool(_SUFFIX.search(start_t) or _SUFFIX.search(stop_t))
    return [format_size(n) if sized else str(n) for n in values]


def _expand_item(item: str, where: str) -> list[str]:
    item = item.strip()
    if not item:
        raise AlloclabError(f"An empty item in the list in {where}; write items separated by single commas, "
                            f"e.g. {{0,64M}}.")
    return expand_range(item, where) if ".." in item else [item]


def _check_distinct(texts: list[str], where: str) -> None:
    seen: dict = {}
    for t in texts:
        key = number(t)
        key = t if key is None else key
        if key in seen:
            raise AlloclabError(f"The sweep in {where} gives the same value twice ({seen[key]} and {t}); "
                                f"list each value once.")
        seen[key] = t


def point_value(text: str) -> int | float | str:
    v = number(text)
    return text if v is None else _plain(v)


# --- variant specs ------------------------------------------------------------------------------

@dataclass
class _Slot:
    key: str          # the setting (environment variable or catalog tunable) it belongs to
    tunable: str      # the name the curve is drawn against (dirty_decay_ms inside MALLOC_CONF)
    texts: list[str]


def _split_top(text: str, where: str) -> list[str]:
    """Split at commas outside braces; braces must balance and not nest."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "{":
            if depth:
                raise AlloclabError(f"Nested braces in {where}; a list is one level: {{A,B,C}}.")
            depth = 1
        elif ch == "}":
            if not depth:
                raise AlloclabError(f"A '}}' without its '{{' in {where}; a list is written {{A,B,C}}.")
            depth = 0
        if ch == "," and not depth:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if depth:
        raise AlloclabError(f"A '{{' without its '}}' in {where}; a list is written {{A,B,C}}.")
    parts.append(cur)
    return parts


def _segment_template(segment: str, key: str, where: str) -> list[str | _Slot]:
    """One top-level setting segment as literal text and swept slots."""
    parts: list[str | _Slot] = []
    if "{" in segment:
        pos = 0
        for m in re.finditer(r"\{([^{}]*)\}", segment):
            literal = segment[pos:m.start()]
            if ".." in literal:
                raise AlloclabError(f"A range outside the braces in {where}; put it inside: {{0,128K..1M*2}}.")
            parts.append(literal)
            texts = [t for item in m.group(1).split(",") for t in _expand_item(item, where)]
            _check_distinct(texts, where)
            name = _NAME_BEFORE.search(segment[:m.start()])
            parts.append(_Slot(key, name.group(1) if name else key, texts))
            pos = m.end()
        if ".." in segment[pos:]:
            raise AlloclabError(f"A range outside the braces in {where}; put it inside: {{0,128K..1M*2}}.")
        parts.append(segment[pos:])
        return parts
    if ".." in segment:
        m = re.search(r"(^|[=:])([^=:]*\.\.[^=:]*)$", segment)
        if not m:
            raise AlloclabError(f"Cannot read the range in '{segment}' of {where}: {_RANGE_FORMS}.")
        texts = expand_range(m.group(2), where)
        prefix = segment[:m.start(2)]
        name = _NAME_BEFORE.search(prefix)
        return [prefix, _Slot(key, name.group(1) if name else key, texts)]
    return [segment]


def _base_label(name: str) -> str:
    is_path = name.endswith(".so") or ".so." in name or "/" in name
    return Path(name).name.split(".so")[0] if is_path else name


def _short(key: str, text: str) -> str:
    return Setting(key, text, text).short


def _default_label(spec: str, name: str, settings_text: str) -> str:
    """The label parse_variant gives a spec without @LABEL."""
    shorts = [Setting(k, w, expand_size(w)).short for k, w in _parse_settings(spec, settings_text)]
    return " ".join([_base_label(name)] + ([",".join(shorts)] if shorts else []))


def _expand_one(spec: str) -> tuple[list[str], list[dict]]:
    spec = spec.strip()
    name, settings_text, label = _split_spec(spec)
    where = f"variant '{spec}'"
    if "{" not in settings_text and "}" not in settings_text and ".." not in settings_text:
        return [spec], []
    template: list[str | _Slot] = []
    key = ""
    for i, segment in enumerate(_split_top(settings_text, where)):
        m = _KEY_START.match(segment)
        key = m.group(1) if m else key
        if i:
            template.append(",")
        template.extend(_segment_template(segment, key or segment, where))
    slots = [p for p in template if isinstance(p, _Slot)]
    total = math.prod(len(s.texts) for s in slots)
    if total > MAX_CELLS:
        raise AlloclabError(f"{where} expands to {total} variants (more than {MAX_CELLS}); sweep fewer "
                            f"settings at once or use fewer points.")
    specs, labels = [], {}
    for combo in itertools.product(*(range(len(s.texts)) for s in slots)):
        chosen = iter(combo)
        text = "".join(p if isinstance(p, str) else p.texts[next(chosen)] for p in template)
        concrete = f"{name}:{text}"
        if label:
            point_label = label + " " + ",".join(_short(s.tunable, s.texts[c]) for s, c in zip(slots, combo))
        else:
            point_label = _default_label(concrete, name, text)
        labels[combo] = point_label
        specs.append(f"{concrete}@{point_label}")
    return specs, _variant_sweeps(slots, labels)


def _variant_sweeps(slots: list[_Slot], labels: dict[tuple, str]) -> list[dict]:
    """1-D curves along every swept slot, one per combination of the other slots' values."""
    out = []
    for x in range(len(slots)):
        others = [i for i in range(len(slots)) if i != x]
        for fixed in itertools.product(*(range(len(slots[i].texts)) for i in others)):
            points = []
            for j, text in enumerate(slots[x].texts):
                combo = list(fixed)
                combo.insert(x, j)
                points.append({"variant": labels[tuple(combo)], "value": point_value(text), "text": text})
            out.append({"tunable": slots[x].tunable, "setting": slots[x].key,
                        "fixed": {slots[i].tunable: slots[i].texts[c] for i, c in zip(others, fixed)},
                        "points": points})
    return out


def expand_variant_specs(specs: list[str]) -> tuple[list[str], list[dict]]:
    """Concrete specs (each swept point with a readable @label) and the sweep structures."""
    out, sweeps, seen = [], [], {}
    for spec in specs:
        concrete, found = _expand_one(spec)
        for c in concrete:
            if "@" in c:
                lab = c.rsplit("@", 1)[1]
                if lab in seen:
                    raise AlloclabError(f"Variants '{seen[lab]}' and '{spec}' both give a variant labelled "
                                        f"'{lab}'. Drop the repeated point or give one spec its own @LABEL.")
                seen[lab] = spec
        out += concrete
        sweeps += found
    return out, sweeps


# --- ablation -------------------------------------------------------------------------------

def ablation_specs(spec: str) -> tuple[list[str], dict]:
    """Baseline, each setting on its own, all together; and the {"ablation": ...} structure."""
    spec = spec.strip()
    name, settings_text, label = _split_spec(spec)
    if "{" in settings_text or ".." in settings_text:
        raise AlloclabError(f"--ablate '{spec}' contains a sweep; ablation takes fixed settings, e.g. "
                            f"--ablate 'glibc:MALLOC_TOP_PAD_=64M,MALLOC_ARENA_MAX=2'. Sweep with -a instead.")
    pairs = _parse_settings(spec, settings_text)
    if len(pairs) < 2:
        raise AlloclabError(f"--ablate '{spec}' needs at least two settings to take apart, e.g. "
                            f"'glibc:MALLOC_TOP_PAD_=64M,MALLOC_ARENA_MAX=2'; to measure one setting, use -a.")
    base = _base_label(name)
    settings = [f"{k}={v}" for k, v in pairs]
    single_labels = [f"{base} {_short(k, v)}" for k, v in pairs]
    combined_label = label or _default_label(spec, name, settings_text)
    if len(set(single_labels)) < len(single_labels):
        raise AlloclabError(f"--ablate '{spec}' names the same setting twice; give each setting once.")
    specs = [name] + [f"{name}:{s}@{lab}" for s, lab in zip(settings, single_labels)] \
        + [f"{name}:{','.join(settings)}@{combined_label}"]
    return specs, {"ablation": {"baseline": base, "combined": combined_label, "spec": spec,
                                "settings": [{"setting": s, "variant": lab}
                                             for s, lab in zip(settings, single_labels)]}}


def plan_variants(allocator_specs: list[str], ablate: str | None = None) -> tuple[list[str], list[dict]]:
    """What -a and --ablate give together: concrete specs (repeats dropped) and every sweep."""
    specs, sweeps = expand_variant_specs(allocator_specs)
    if ablate:
        more, structure = ablation_specs(ablate)
        specs += [s for s in more if s not in specs and s.rsplit("@", 1)[0] not in specs]
        sweeps.append(structure)
    return specs, sweeps


def sweep_config(sweeps: list[dict]) -> dict:
    """The keys to merge into the experiment's config: every sweep, and the first on its own."""
    return {"sweeps": sweeps, "sweep": sweeps[0]} if sweeps else {}


def stored_sweeps(config: dict) -> list[dict]:
    return list(config.get("sweeps") or ([config["sweep"]] if config.get("sweep") else []))


# --- workload parameters ----------------------------------------------------------------------

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


# --- reading sweeps back ----------------------------------------------------------------------

@dataclass
class CurvePoint:
    text: str
    value: int | float | str
    label: str                          # the variant (variant sweeps) or the workload (param sweeps)
    summary: stats.CellSummary          # the decisive metric
    values: list[float]
    rss: stats.CellSummary | None       # peak RSS: the memory cost of the point
    metrics: dict[str, stats.CellSummary] = field(default_factory=dict)   # every headline metric
    vs_best: stats.Comparison | None = None
    within_noise: bool = False          # not significantly worse than the best

    @property
    def ci_overlaps(self) -> bool:
        return self.vs_best is not None and self.vs_best.ci_low <= 1 <= self.vs_best.ci_high


@dataclass
class ScalingStep:
    threads: int
    throughput: float
    speedup: float          # throughput / throughput at the fewest threads
    efficiency: float       # speedup / (threads / fewest threads)
    gain: float             # throughput / throughput at the previous point
    gain_low: float
    gain_high: float
    dropped: bool           # significantly lower than at the previous point


@dataclass
class Scaling:
    steps: list[ScalingStep]
    stops_at: int | None            # the last thread count worth having; None: still scaling at the end
    reason: str
    usable_cores: int | None
    cores_note: str | None
    throughput_note: str | None


@dataclass
class SweepCurve:
    kind: str                       # "variant" or "param"
    axis: str                       # the tunable or parameter swept
    source: int                     # index of its sweep structure (param curves of one sweep share it)
    base: str                       # the workload (variant sweeps) or the swept program (param sweeps)
    subject: str                    # the workload (variant sweeps) or the variant (param sweeps)
    fixed: dict
    metric: str
    unit: str
    higher_is_better: bool
    points: list[CurvePoint]
    best: CurvePoint | None
    cheap: CurvePoint | None
    notes: list[str] = field(default_factory=list)
    scaling: Scaling | None = None


def _order(points: list[CurvePoint]) -> list[CurvePoint]:
    if all(isinstance(p.value, (int, float)) for p in points):
        return sorted(points, key=lambda p: p.value)
    return points


def _point(text, value, label, row: MetricRow, vi: int, rows: dict[str, MetricRow]) -> CurvePoint:
    c = row.cells[vi]
    rss = rows.get("peak_rss_mb")
    return CurvePoint(str(text), value, label, c.summary, list(c.values),
                      rss.cells[vi].summary if rss else None,
                      {name: r.cells[vi].summary for name, r in rows.items()})


def _decide(curve: SweepCurve, alpha: float, min_effect: float) -> SweepCurve:
    """The best median, and the smallest setting not significantly worse than it."""
    measured = [p for p in curve.points if p.summary.n > 0]
    if not measured:
        curve.notes.append("no point has a successful run")
        return curve
    hib = curve.higher_is_better
    best = max(measured, key=lambda p: p.summary.median if hib else -p.summary.median)
    for p in measured:
        p.vs_best = stats.compare(best.values, p.values, hib, alpha=alpha, min_effect=min_effect)
        p.within_noise = p is best or p.vs_best.verdict != "worse"
    curve.best = best
    curve.cheap = next(p for p in curve.points if p.within_noise)
    n = min(p.summary.n for p in measured)
    need = ranktests.min_runs_for_significance(alpha)
    if n < need:
        curve.notes.append(f"{n} run(s) per point: no difference can be significant below {need}, so every "
                           f"point counts as within the noise of the best; use --runs 10 or more")
    failed = [p.label for p in curve.points if p.summary.n == 0]
    if failed:
        curve.notes.append("no successful run at: " + ", ".join(failed))
    return curve


def _rows(w) -> dict[str, MetricRow]:
    return {r.name: r for r in w.rows if r.headline}


def sweep_results(a: Analysis, sweeps: list[dict]) -> list[SweepCurve]:
    """Every variant or parameter sweep as curves with the best and the cheap choice."""
    curves = []
    for i, s in enumerate(sweeps):
        if "tunable" in s:
            curves += _variant_curves(a, s, i)
        elif "param" in s:
            curves += _param_curves(a, s, i)
    return curves


def _variant_curves(a: Analysis, s: dict, source: int) -> list[SweepCurve]:
    idx = {label: i for i, label in enumerate(a.labels)}
    points = [p for p in s["points"] if p["variant"] in idx]
    out = []
    for w in a.workloads:
        row = w.primary()
        if row is None or len(points) < 2:
            continue
        rows = _rows(w)
        curve = SweepCurve("variant", s["tunable"], source, w.name, w.name, s.get("fixed", {}), row.name, row.unit,
                           row.higher_is_better,
                           _order([_point(p.get("text", p["value"]), p["value"], p["variant"], row,
                                          idx[p["variant"]], rows) for p in points]), None, None)
        out.append(_decide(curve, a.alpha, a.min_effect))
    return out


def _param_curves(a: Analysis, s: dict, source: int) -> list[SweepCurve]:
    by_idx = {w.idx: w for w in a.workloads}
    points = [p for p in s["points"] if p["workload"] in by_idx]
    if len(points) < 2:
        return []
    first = by_idx[points[0]["workload"]].primary()
    if first is None:
        return []
    cores = a.experiment.machine.get("usable_cores")
    out = []
    for vi, label in enumerate(a.labels):
        made = []
        for p in points:
            w = by_idx[p["workload"]]
            row = w.row(first.name)
            if row is not None:
                made.append(_point(p.get("text", p["value"]), p["value"], w.name, row, vi, _rows(w)))
        fixed = dict(s.get("fixed", {}))
        curve = SweepCurve("param", s["param"], source, s.get("base", ""), label, fixed, first.name, first.unit,
                           first.higher_is_better,
                           _order(made), None, None)
        curve = _decide(curve, a.alpha, a.min_effect)
        if s["param"] in SCALING_PARAMS:
            curve.scaling = scaling_result(curve, cores)
        out.append(curve)
    return out


# --- thread scaling -----------------------------------------------------------------------------

def scaling_result(curve: SweepCurve, usable_cores: int | None) -> Scaling | None:
    """Throughput against threads: speedup, per-thread efficiency, and where adding threads stops paying."""
    pts = [p for p in curve.points if p.summary.n > 0 and isinstance(p.value, (int, float)) and p.value > 0]
    if len(pts) < 2:
        return None
    hib = curve.higher_is_better
    note = None if hib else (f"throughput taken as 1/{curve.metric} (assumes the same total work at every "
                             f"thread count)")

    def tput(p: CurvePoint) -> float:
        m = p.summary.median
        return m if hib else (1 / m if m else math.nan)

    n0, t0 = pts[0].value, tput(pts[0])
    steps = [ScalingStep(int(n0), t0, 1.0, 1.0, math.nan, math.nan, math.nan, False)]
    stops_at, reason = None, ""
    for prev, cur in zip(pts, pts[1:]):
        c = stats.compare(prev.values, cur.values, hib)
        gain, lo, hi = (c.ratio, c.ci_low, c.ci_high) if hib else (1 / c.ratio, 1 / c.ci_high, 1 / c.ci_low)
        t = tput(cur)
        speedup = t / t0
        steps.append(ScalingStep(int(cur.value), t, speedup, speedup * n0 / cur.value, gain, lo, hi,
                                 c.verdict == "worse"))
        if stops_at is None and (c.verdict == "worse" or gain < SCALING_GAIN):
            stops_at = int(prev.value)
            why = "a significant drop" if c.verdict == "worse" else f"less than +{SCALING_GAIN - 1:.0%}"
            ci = f"[{lo - 1:+.1%}, {hi - 1:+.1%}]" if math.isfinite(lo) and math.isfinite(hi) else "[n/a]"
            reason = f"{int(cur.value)} {curve.axis} give {gain - 1:+.1%} {ci} over {int(prev.value)} ({why})"
    if stops_at is None:
        last = steps[-1]
        reason = f"still scaling at {last.threads} {curve.axis} ({last.gain - 1:+.1%} over {steps[-2].threads})"
    most = max(s.threads for s in steps)
    cores_note = None
    if usable_cores and most > usable_cores:
        cores_note = (f"the sweep asks for up to {most} {curve.axis} but only {usable_cores} cores are usable here "
                      f"(os.sched_getaffinity): points above {usable_cores} measure oversubscription, not "
                      f"parallel scaling")
    return Scaling(steps, stops_at, reason, usable_cores, cores_note, note)


# --- ablation -----------------------------------------------------------------------------------

@dataclass
class Effect:
    name: str                       # the setting, or "all together"
    label: str
    summary: stats.CellSummary
    comparison: stats.Comparison    # against the baseline, Holm-adjusted over the ablation's variants
    rss: stats.Comparison | None    # peak RSS against the baseline


@dataclass
class AblationResult:
    workload: str
    metric: str
    unit: str
    higher_is_better: bool
    baseline: str
    baseline_summary: stats.CellSummary
    singles: list[Effect]
    combined: Effect
    expected: float                 # product of the single ratios
    interaction: float              # combined ratio / expected
    interaction_low: float
    interaction_high: float
    verdict: str                    # "none" | "synergy" | "antagonism" | "undetermined"
    text: str


def _interaction_ci(base, singles, combined, n_boot: int = 2000, confidence: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap of combined/base / prod(single_i/base), every group resampled on its own."""
    groups = [np.sort(stats._finite(g)) for g in (base, *singles, combined)]
    if any(g.size == 0 for g in groups):
        return math.nan, math.nan
    rng = np.random.default_rng(stats._seed(*groups, tag="interaction"))
    meds = [stats._bootstrap_medians(g, n_boot, rng) for g in groups]
    with np.errstate(all="ignore"):
        mb = meds[0]
        ratio = meds[-1] / mb
        for ms in meds[1:-1]:
            ratio = ratio / (ms / mb)
        return stats._percentile_ci(ratio, confidence)


def ablation_result(a: Analysis, structure: dict) -> list[AblationResult]:
    """Per workload: each setting's contribution alone, all together, and whether they interact."""
    abl = structure["ablation"]
    idx = {label: i for i, label in enumerate(a.labels)}
    labels = [abl["baseline"]] + [s["variant"] for s in abl["settings"]] + [abl["combined"]]
    if any(lab not in idx for lab in labels):
        return []
    out = []
    for w in a.workloads:
        row = w.primary()
        if row is None:
            continue
        rss = w.row("peak_rss_mb")
        hib = row.higher_is_better
        base = row.cells[idx[abl["baseline"]]]
        others = [row.cells[idx[lab]] for lab in labels[1:]]
        comps = stats.adjust([stats.compare(base.values, c.values, hib, alpha=a.alpha, min_effect=a.min_effect)
                              for c in others], alpha=a.alpha, min_effect=a.min_effect)
        effects = []
        for name, lab, cell, comp in zip([s["setting"] for s in abl["settings"]] + ["all together"],
                                         labels[1:], others, comps):
            mem = stats.compare(rss.cells[idx[abl["baseline"]]].values, rss.cells[idx[lab]].values, False) \
                if rss else None
            effects.append(Effect(name, lab, cell.summary, comp, mem))
        singles, combined = effects[:-1], effects[-1]
        expected = math.prod(e.comparison.ratio for e in singles)
        inter = combined.comparison.ratio / expected if expected else math.nan
        lo, hi = _interaction_ci(base.values, [c.values for c in others[:-1]], others[-1].values)
        verdict, text = _interaction_words(inter, lo, hi, hib, row.name)
        out.append(AblationResult(w.name, row.name, row.unit, hib, abl["baseline"], base.summary, singles,
                                  combined, expected, inter, lo, hi, verdict, text))
    return out


def _interaction_words(inter: float, lo: float, hi: float, hib: bool, metric: str) -> tuple[str, str]:
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "undetermined", "interaction undetermined (too few successful runs for an interval)"
    ci = f"{inter:.3f} [{lo:.3f}, {hi:.3f}]"
    if lo <= 1 <= hi:
        return "none", (f"no interaction: together = product of the single effects within the noise "
                        f"(combined / product {ci})")
    better = (inter > 1) == hib
    if better:
        return "synergy", (f"synergy: together they do better on {metric} than the product of the single "
                           f"effects (combined / product {ci})")
    return "antagonism", (f"they overlap or conflict: together they do worse on {metric} than the product of the "
                          f"single effects (combined / product {ci})")


def ablations(a: Analysis, sweeps: list[dict]) -> list[AblationResult]:
    return [r for s in sweeps if "ablation" in s for r in ablation_result(a, s)]
