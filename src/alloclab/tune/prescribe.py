"""From readings to candidates: each rule of catalog/tune_rules.toml whose conditions hold in its
allocator's reading proposes settings, with values computed from the same reading.

In: Readings per allocator (tune/diagnosis.py), the installed plain allocators and their versions.
Out: Candidates (a variant spec, the rule, its expected direction, the mechanism and the reason,
in words with the measured figures), and the rules that stayed silent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from alloclab.catalog.allocators import BASELINE
from alloclab.catalog.tune_rules import Rule, ValueRule, load_rules
from alloclab.store.config_model import Candidate
from alloclab.tune.diagnosis import Reading, value_text


@dataclass(frozen=True)
class Prescription:
    candidates: list[Candidate]
    fired: list[str]       # rules whose conditions held
    silent: list[str]      # rules read and not fired (their allocator's reading was there)
    rate_only: bool = False   # every rule that fired read only the allocation rate


def compute_value(v: ValueRule, reading: Reading) -> int | None:
    x = reading.get(v.reading)
    if x is None:
        return None
    x *= v.times
    if v.round == "pow2":
        x = float(2 ** math.ceil(math.log2(x))) if x > 1 else 1.0
    x = float(round(x))
    if v.min is not None:
        x = max(x, v.min)
    if v.max is not None:
        x = min(x, v.max)
    return int(x)


def setting_text(n: int) -> str:
    """A size as a variant spec writes it: 64M rather than 67108864 (the catalog expands it)."""
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def fill(text: str, reading: Reading, values: dict[str, str]) -> str:
    """A rule's sentence with the reading's figures and the computed values in its {braces}."""
    names = {k: value_text(k, x) for k, x in reading.values.items()}
    names |= reading.words | {"per": reading.per, "held_where": reading.held_where, "rest_where": reading.rest_where}
    names |= values
    out = text
    for key, val in names.items():
        out = out.replace("{" + key + "}", str(val))
    return out


def _values(rule: Rule, reading: Reading) -> dict[str, str] | None:
    out = {}
    for v in rule.values:
        n = compute_value(v, reading)
        if n is None:
            return None
        out[v.name] = setting_text(n) if v.round == "pow2" else str(n)
    return out


def _spec_for(rule: Rule, spec: str, versions: dict[str, str]) -> str:
    version = versions.get(rule.reads, "")
    for prefix, other in rule.versions.items():
        if version.startswith(prefix):
            return other
    return spec


def gives_enough(rule: Rule, reading: Reading, default: Reading | None) -> bool:
    """A memory rule's expected gain: the allocator's memory at rest less what the setting returns,
    against the default's there."""
    if rule.returns is None:
        return True
    returned, anon = reading.get(rule.returns), reading.get("rest_anon")
    base = default.get("rest_anon") if default is not None else None
    if returned is None or anon is None or not base:
        return False
    gain = base - (anon - returned)
    return gain >= rule.min_gain * base and gain >= rule.min_gain_bytes


def prescribe(readings: dict[str, Reading], allocators: list[str], versions: dict[str, str] | None = None,
              rules: tuple[Rule, ...] | None = None, check=None, baseline: str = BASELINE,
              default: Reading | None = None, beside: bool = True) -> Prescription:
    """Candidates from the rules that fire. `allocators`: the plain allocators to race when a rule
    names {allocators} (the installed ones other than the baseline); `check(spec)` returns why the
    installed allocator refuses a spec (None when it takes it); `baseline`: the allocator whose
    reading is the default's (glibc, or the allocator the program links); `default`: what a memory
    rule's gain is weighed against (that baseline's reading where not given; an inspected process
    is its own); `beside`: whether the allocators as installed race beside whatever fired (a race's
    question; an inspection names each rule's own setting)."""
    rules = rules if rules is not None else load_rules()
    versions = versions or {}
    out: list[Candidate] = []
    fired, silent, rate_only = [], [], True
    seen: set[str] = set()
    cause: tuple[Rule, str, str | None] | None = None   # the first mechanism of the default that makes it slower
    held: tuple[Rule, str, str | None] | None = None    # else the first that holds the default's memory
    for rule in rules:
        reading = readings.get(rule.reads)
        if reading is None:
            continue
        if not all(c.holds(reading.get(c.reading)) for c in rule.when) or \
                not gives_enough(rule, reading, default or readings.get(baseline)):
            silent.append(rule.name)
            continue
        values = _values(rule, reading)
        if values is None:
            silent.append(rule.name)
            continue
        fired.append(rule.name)
        rate_only = rate_only and rule.rate_only
        mechanism, why = fill(rule.mechanism, reading, values), fill(rule.why, reading, values)
        metric = reading.rest_metric if rule.expect == "less memory" and rule.returns else None
        # The plain allocators race against the default's own mechanism: one that another allocator's
        # fingerprint shows (jemalloc's purge churn) is not what they would fix in the default.
        if cause is None and rule.expect == "faster" and not rule.rate_only and rule.reads == baseline:
            cause = rule, mechanism, None
        if held is None and rule.expect == "less memory" and rule.reads == baseline:
            held = rule, mechanism, metric
        for template in rule.tries:
            if template == "{allocators}" and rule.rate_only and cause is not None:
                # The allocators race against the mechanism that was found, in its words: the
                # allocation rate alone is not why they may be faster.
                out += _plain_against(cause, [spec for spec in allocators if spec not in seen], check)
                seen.update(allocators)
                continue
            specs = allocators if template == "{allocators}" else [fill(_spec_for(rule, template, versions), reading, values)]
            for spec in specs:
                if spec in seen:
                    continue
                seen.add(spec)
                out.append(Candidate(spec, rule.name, rule.expect, mechanism, why, check(spec) if check else None,
                                     metric))
    # Another allocator may fix a mechanism that one of glibc's settings fixes: once any rule
    # fired, the plain allocators race too.
    if fired and beside:
        rest = [spec for spec in allocators if spec not in seen]
        against = cause or held
        out += (_plain_against(against, rest, check) if against is not None
                else plain_candidates(rest, "another allocator's policy may avoid it", check))
    return Prescription(out, fired, silent, rate_only=bool(fired) and rate_only)


def _plain_against(cause: tuple[Rule, str, str | None], specs: list[str], check=None) -> list[Candidate]:
    """The allocators as installed, raced against a mechanism the diagnosis found, in its words: one
    that makes the program slower, or one that holds the default's memory (raced where it shows)."""
    rule, mechanism, metric = cause
    return [Candidate(spec, rule.name, rule.expect, mechanism, "another allocator's policy (its caches, and when it "
                      "gives memory back) may avoid it", check(spec) if check else None, metric) for spec in specs]


def plain_candidates(specs: list[str], mechanism: str, check=None, rule: str = "allocator-bound") -> list[Candidate]:
    """The installed allocators with their defaults, raced for speed."""
    return [Candidate(spec, rule, "faster", mechanism, "the allocator as installed, with its defaults",
                      check(spec) if check else None) for spec in specs]
