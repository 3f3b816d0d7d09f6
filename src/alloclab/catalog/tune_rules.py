"""tune's rules as data (tune_rules.toml): from a mechanism the fingerprint reads to the settings
worth racing, each with its reason and the direction it is expected to move."""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass, field
from importlib import resources

from alloclab.errors import AlloclabError

OPERATORS = (">=", "<=", ">", "<")
EXPECTS = ("faster", "less memory")
ROUNDINGS = ("pow2", "int")
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def number(value) -> float:
    """4, 0.5, '4M' (powers of 1024)."""
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip()
    if text and text[-1].upper() in _UNITS:
        return float(text[:-1]) * _UNITS[text[-1].upper()]
    return float(text)


@dataclass(frozen=True)
class Condition:
    reading: str
    op: str
    threshold: float

    def holds(self, value: float | None) -> bool:
        if value is None:
            return False
        return {">=": value >= self.threshold, "<=": value <= self.threshold,
                ">": value > self.threshold, "<": value < self.threshold}[self.op]


@dataclass(frozen=True)
class ValueRule:
    """A setting's value from a reading: reading x times, rounded, then bounded."""
    name: str
    reading: str
    times: float = 1.0
    round: str = "pow2"
    min: float | None = None
    max: float | None = None


@dataclass(frozen=True)
class Rule:
    name: str
    reads: str                       # the allocator whose fingerprint it reads
    when: tuple[Condition, ...]
    mechanism: str
    expect: str                      # faster | less memory
    tries: tuple[str, ...]
    why: str
    values: tuple[ValueRule, ...] = ()
    versions: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    rate_only: bool = False          # reads only the allocation rate: a CPU-share bound can rule it out
    # A memory rule: the reading of what its setting gives back. It fires only where the allocator,
    # less that, would hold less than the default by at least min_gain of the default's memory and
    # min_gain_bytes (a jemalloc decay that returns only what glibc never kept is no proposal).
    returns: str | None = None
    min_gain: float = 0.1
    min_gain_bytes: float = 8 * (1 << 20)


def _bound(value) -> float | None:
    return None if value is None else number(value)


def _value(name: str, table: dict) -> ValueRule:
    """One value of a rule's [rule.values]: `name = { from = reading, times, round, min, max }`, only
    `from` required."""
    match table:
        case {"from": str(reading)}:
            return ValueRule(name, reading, float(table.get("times", 1)), table.get("round", "pow2"),
                             _bound(table.get("min")), _bound(table.get("max")))
    raise ValueError(f"value '{name}' names no reading to come from")


def _flag(value) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"rate_only is true or false, not {value!r}")
    return value


FIELDS = {"name", "reads", "when", "mechanism", "expect", "try", "why", "values", "versions", "rate_only", "returns",
          "min_gain", "min_gain_bytes"}


def _rule(d: dict) -> Rule:
    name = d.get("name", "?")
    if unknown := sorted(set(d) - FIELDS):
        # A misspelt optional field would otherwise be dropped without a word.
        raise AlloclabError(f"tune_rules.toml: rule '{name}' has unknown fields {unknown}; a rule's fields are "
                            f"{sorted(FIELDS)} (see the file's header).")
    try:
        # The required fields, each of its TOML type; values and versions are optional.
        match d:
            case {"reads": str(reads), "when": list(when), "mechanism": str(mechanism), "expect": str(expect),
                  "try": list(tries), "why": str(why)}:
                rule = Rule(name, reads, tuple(Condition(r, op, number(t)) for r, op, t in when), mechanism, expect,
                            tuple(tries), why, tuple(_value(k, v) for k, v in d.get("values", {}).items()),
                            dict(d.get("versions", {})), _flag(d.get("rate_only", False)), d.get("returns"),
                            number(d.get("min_gain", 0.1)), number(d.get("min_gain_bytes", "8M")))
            case _:
                raise ValueError("a field is missing or not of its type")
    except (KeyError, TypeError, ValueError) as exc:
        raise AlloclabError(f"tune_rules.toml: rule '{name}' is malformed ({exc!r}); each rule needs name, reads, "
                            f"when, mechanism, expect, try and why (see the file's header).") from None
    bad = ([c.op for c in rule.when if c.op not in OPERATORS] + ([rule.expect] if rule.expect not in EXPECTS else [])
           + [v.round for v in rule.values if v.round not in ROUNDINGS])
    if bad:
        raise AlloclabError(f"tune_rules.toml: rule '{name}' has {bad}: operators are {OPERATORS}, expect one of "
                            f"{EXPECTS}, round one of {ROUNDINGS}.")
    return rule


@functools.cache
def load_rules() -> tuple[Rule, ...]:
    text = resources.files("alloclab.catalog").joinpath("tune_rules.toml").read_text()
    return tuple(_rule(d) for d in tomllib.loads(text)["rule"])
