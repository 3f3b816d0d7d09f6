"""A variant's allocator settings checked against the catalog before anything runs.

A name that looks like an allocator setting but that the variant's allocator does not read,
and a value the allocator would misread, clamp or ignore, are refused here with what the
catalog knows; anything else is plain environment and passes through unchanged."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from alloclab.catalog import allocators as cat
from alloclab.errors import AlloclabError

_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([KMGT])i?B?$", re.IGNORECASE)
# Names allocators read: a variable of this shape in a variant is meant for the allocator.
_BOOLS = {"true": "true", "false": "false"}


def expand_size(value: str) -> str:
    """'64M' -> '67108864'; anything else unchanged (K/M/G/T are powers of 1024)."""
    m = _SIZE.match(value.strip())
    if not m:
        return value
    power = "KMGT".index(m.group(2).upper()) + 1
    return str(int(float(m.group(1)) * 1024**power))


@dataclass(frozen=True)
class TunableSetting:
    """One setting as the allocator will read it: what was asked, and in which form it is handed over."""
    tunable: cat.Tunable
    written: str
    value: str


def looks_like_setting(key: str, catalog: cat.Catalog) -> bool:
    return catalog.looks_like_setting(key)


def _owners(key: str, catalog: cat.Catalog) -> list[str]:
    return [a.name for a in catalog.allocators.values()
            if not a.same_as and (a.tunable(key) or key in a.shared_vars())]


def nearest(key: str, allocator: cat.Allocator) -> str | None:
    names = [t.name for t in allocator.tunables] + sorted(allocator.shared_vars())
    found = difflib.get_close_matches(key, names, n=1, cutoff=0.75)
    if not found:  # case differences (malloc_top_pad_) are typos too
        upper = {n.upper(): n for n in names}
        found = [upper[m] for m in difflib.get_close_matches(key.upper(), list(upper), n=1, cutoff=0.75)]
    return found[0] if found else None


def refuse_unknown(spec: str, key: str, allocator: cat.Allocator, catalog: cat.Catalog, inside: str | None = None) -> None:
    where = f" (inside {inside})" if inside else ""
    guess = nearest(key, allocator)
    others = [o for o in _owners(key, catalog) if o != allocator.name]
    known = ", ".join(t.name for t in allocator.tunables if (t.via == inside) or inside is None)
    raise AlloclabError(
        f"'{key}'{where} in variant '{spec}' looks like an allocator setting, but {allocator.name} does not "
        f"read it, so it would be silently ignored."
        + (f" Did you mean {guess}?" if guess else "")
        + (f" {key} is a setting of {', '.join(others)}, not of {allocator.name}." if others else "")
        + f" The settings of {allocator.name} alloclab knows: {known or 'none'}. Fix the name, or add the "
          f"setting to allocators.toml if your {allocator.name} reads it (`alloclab allocators` lists them).")


def misspelled(key: str, allocator: cat.Allocator) -> bool:
    """A name close to one of the allocator's settings is a typo of it, whatever its shape."""
    return nearest(key, allocator) is not None


def check_value(spec: str, allocator: cat.Allocator, tunable: cat.Tunable, written: str) -> str:
    """The value handed to the allocator (sizes in bytes), or a clear refusal."""
    text = written.strip()
    kind = tunable.kind

    def refuse(what: str) -> AlloclabError:
        return AlloclabError(
            f"'{tunable.name}={written}' in variant '{spec}': {what} {allocator.name} would misread or ignore it "
            f"without a word. {tunable.name} is {tunable.help}.")

    if kind == "size":
        value = expand_size(text)
        if not value.isdigit():
            raise refuse(f"'{written}' is not a size: write bytes, or a number with K, M, G or T "
                         f"(powers of 1024), e.g. 64M.")
    elif kind == "int":
        if not re.fullmatch(r"-?\d+", text):
            raise refuse(f"'{written}' is not a whole number (sizes with K/M/G are not accepted here).")
        value = text
    elif kind == "float":
        try:
            float(text)
        except ValueError:
            raise refuse(f"'{written}' is not a number.") from None
        value = text
    elif kind == "bool":
        if text.lower() not in _BOOLS:
            raise refuse(f"'{written}' is not true or false.")
        value = _BOOLS[text.lower()]
    elif kind == "choice":
        if text not in tunable.choices:
            raise refuse(f"'{written}' is not one of {', '.join(tunable.choices)}.")
        value = text
    else:
        value = text
    if kind in ("size", "int", "float"):
        number = float(value)
        low, high = tunable.min, tunable.max
        if (low is not None and number < low) or (high is not None and number > high):
            bounds = (f"between {_num(low)} and {_num(high)}" if low is not None and high is not None
                      else f"at least {_num(low)}" if low is not None else f"at most {_num(high)}")
            raise AlloclabError(
                f"'{tunable.name}={written}' in variant '{spec}' is out of range: {allocator.name} takes "
                f"{tunable.name} {bounds}"
                + (f" ({tunable.limit})" if tunable.limit else "")
                + f"; outside that it clamps or ignores the value. Give a value {bounds}.")
    return value


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def split_shared(spec: str, var: str, text: str, catalog: cat.Catalog) -> list[tuple[str, str]]:
    """MALLOC_CONF=narenas:2,dirty_decay_ms:0 -> [(narenas, 2), (dirty_decay_ms, 0)]."""
    fmt, sep = catalog.combine[var]
    between = fmt.replace("{key}", "").replace("{value}", "")
    pairs = []
    for item in (i for i in text.split(sep) if i):
        key, found, value = item.partition(between)
        if not found:
            raise AlloclabError(
                f"Cannot read '{item}' in {var}={text} of variant '{spec}': each entry is KEY{between}VALUE, "
                f"separated by '{sep}', e.g. {fmt.format(key='KEY', value='VALUE')}.")
        pairs.append((key.strip(), value.strip()))
    return pairs
