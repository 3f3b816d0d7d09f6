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

Reading back is the statistics' job: stats/sweep.py gives the curves and the ablation's
contributions; cli/sweep.py renders both.

Parameter sweeps (--param NAME=A,B,C) are expanded by plan/param_sweep.py with the same forms;
their reading back (curves, ablations) is in stats/sweep.py.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from dataclasses import dataclass


from alloclab.catalog.allocators import load_catalog
from alloclab.errors import AlloclabError
from alloclab.catalog.variants import Setting, VariantSpec, expand_size, parse_settings, split_written

MAX_POINTS = 64          # per swept slot or parameter
MAX_CELLS = 128          # per spec (product of its slots) or per --param product

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


def _short(key: str, text: str) -> str:
    return Setting(key, text, text).short


def _expand_one(spec: str) -> tuple[list[VariantSpec], list[dict]]:
    spec = spec.strip()
    name, settings_text, label = split_written(spec)
    where = f"variant '{spec}'"
    if "{" not in settings_text and "}" not in settings_text and ".." not in settings_text:
        return [VariantSpec.parse(spec)], []
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
        point = VariantSpec(name, tuple(parse_settings(concrete, text)))
        if label:
            point_label = label + " " + ",".join(_short(s.tunable, s.texts[c]) for s, c in zip(slots, combo))
        else:
            point_label = point.label
        labels[combo] = point_label
        specs.append(dataclasses.replace(point, given_label=point_label, text=f"{concrete}@{point_label}"))
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


def expand_variant_specs(specs: list[str]) -> tuple[list[VariantSpec], list[dict]]:
    """Concrete specs (each swept point with a readable @label) and the sweep structures."""
    out, sweeps, seen = [], [], {}
    for spec in specs:
        concrete, found = _expand_one(spec)
        for c in concrete:
            if c.given_label is not None:
                if c.given_label in seen:
                    raise AlloclabError(f"Variants '{seen[c.given_label]}' and '{spec}' both give a variant labelled "
                                        f"'{c.given_label}'. Drop the repeated point or give one spec its own @LABEL.")
                seen[c.given_label] = spec
        out += concrete
        sweeps += found
    return out, sweeps


# --- ablation -------------------------------------------------------------------------------

def ablation_specs(spec: str) -> tuple[list[VariantSpec], dict]:
    """Baseline, each setting on its own, all together; and the {"ablation": ...} structure."""
    spec = spec.strip()
    name, settings_text, label = split_written(spec)
    if "{" in settings_text or ".." in settings_text:
        raise AlloclabError(f"--ablate '{spec}' contains a sweep; ablation takes fixed settings, e.g. "
                            f"--ablate '{load_catalog().examples['settings']}'. Sweep with -a instead.")
    pairs = tuple(parse_settings(spec, settings_text))
    if len(pairs) < 2:
        raise AlloclabError(f"--ablate '{spec}' needs at least two settings to take apart, e.g. "
                            f"'{load_catalog().examples['settings']}'; to measure one setting, use -a.")
    base = VariantSpec(name).base
    settings = [f"{k}={v}" for k, v in pairs]
    single_labels = [f"{base} {_short(k, v)}" for k, v in pairs]
    combined_label = label or VariantSpec(name, pairs).label
    if len(set(single_labels)) < len(single_labels):
        raise AlloclabError(f"--ablate '{spec}' names the same setting twice; give each setting once.")
    specs = [VariantSpec(name, text=name)] \
        + [VariantSpec(name, (pair,), lab, f"{name}:{s}@{lab}") for pair, s, lab in zip(pairs, settings, single_labels)] \
        + [VariantSpec(name, pairs, combined_label, f"{name}:{','.join(settings)}@{combined_label}")]
    return specs, {"ablation": {"baseline": base, "combined": combined_label, "spec": spec,
                                "settings": [{"setting": s, "variant": lab}
                                             for s, lab in zip(settings, single_labels)]}}


def plan_variants(allocator_specs: list[str], ablate: str | None = None) -> tuple[list[VariantSpec], list[dict]]:
    """What -a and --ablate give together: concrete specs, each read once here (repeats dropped),
    and every sweep."""
    specs, sweeps = expand_variant_specs(allocator_specs)
    if ablate:
        more, structure = ablation_specs(ablate)
        texts = {s.text for s in specs}
        specs += [s for s in more if s.text not in texts and s.text.rsplit("@", 1)[0] not in texts]
        sweeps.append(structure)
    return specs, sweeps


def sweep_config(sweeps: list[dict]) -> dict:
    """The keys to merge into the experiment's config: every sweep, and the first on its own."""
    return {"sweeps": sweeps, "sweep": sweeps[0]} if sweeps else {}


# --- workload parameters ----------------------------------------------------------------------
