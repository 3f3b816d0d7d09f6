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


def _rule(d: dict) -> Rule:
    name = d.get("name", "?")
    try:
        when = tuple(Condition(r, op, number(t)) for r, op, t in d["when"])
        values = tuple(ValueRule(k, v["from"], float(v.get("times", 1)), v.get("round", "pow2"),
                                 number(v["min"]) if "min" in v else None, number(v["max"]) if "max" in v else None)
                       for k, v in d.get("values", {}).items())
        rule = Rule(name, d["reads"], when, d["mechanism"], d["expect"], tuple(d["try"]), d["why"], values,
                    dict(d.get("versions", {})))
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
