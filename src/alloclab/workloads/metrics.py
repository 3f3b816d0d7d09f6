"""What a run yields: the standard measures of every run, and metrics read from the output.

A metric is written `NAME=REGEX[:higher|lower]` (first capture group, else the whole match;
the last match in stdout+stderr wins, since programs print their summary last) or
`NAME=json:KEY.PATH[:higher|lower]` (read from the last JSON object line that has the key).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from alloclab.errors import AlloclabError


@dataclass(frozen=True)
class MetricDef:
    name: str
    unit: str
    higher_is_better: bool
    source: str = "run"        # run (standard measure) | regex | json
    pattern: str = ""
    primary: bool = False


# The measures every run has, in the order reports show them (lower is better for all).
STANDARD = (
    MetricDef("wall_s", "s", False),
    MetricDef("cpu_s", "s", False),
    MetricDef("user_s", "s", False),
    MetricDef("sys_s", "s", False),
    MetricDef("peak_rss_mb", "MiB", False),
    MetricDef("max_rss_mb", "MiB", False),
    MetricDef("final_rss_mb", "MiB", False),
    MetricDef("end_anon_mb", "MiB", False),     # anonymous RSS as the program exits (launcher/spawn.c)
    MetricDef("end_lazyfree_mb", "MiB", False),         # of it, freed with MADV_FREE, not yet reclaimed
    MetricDef("end_anon_nolazy_mb", "MiB", False),      # end_anon_mb less that: what the program still holds
    MetricDef("end_huge_mb", "MiB", False),             # of end_anon_mb, transparent huge pages (AnonHugePages)
    MetricDef("minflt", "faults", False),
    MetricDef("majflt", "faults", False),
    MetricDef("nvcsw", "switches", False),
    MetricDef("nivcsw", "switches", False),
)
HW_COUNTERS = (
    MetricDef("cycles", "cycles", False, "perf"),
    MetricDef("instructions", "instructions", False, "perf"),
    MetricDef("cache_misses", "misses", False, "perf"),
)


# Memory metrics: the one definition tune's race, its screen and its answer read.
PEAK_RSS = "peak_rss_mb"
END_ANON = "end_anon_mb"
PHASE_RSS = re.compile(r"^rss_after_(.+)_mb$")
# A metric of the user's, lower is better, whose name or unit says memory (anon_kb, rss_idle, heap_bytes).
_MEMORY_WORDS = re.compile(r"(^|[_.\-])(rss|pss|uss|anon|heap|mem|memory|kb|kib|mb|mib|gb|gib|bytes?)($|[_.\-])",
                           re.IGNORECASE)


def memory_goal(name: str, unit: str = "", higher_is_better: bool = False, source: str = "") -> str | None:
    """What a metric says of memory, as tune's answer names the goal: 'memory' (peak RSS), 'memory at
    its end', 'memory after PHASE', 'memory: NAME' (the user's); None where it is not memory."""
    if name == PEAK_RSS:
        return "memory"
    if name == END_ANON:
        return "memory at its end"
    if m := PHASE_RSS.match(name):
        return f"memory after {m.group(1)}"
    if source in ("regex", "json") and not higher_is_better and (_MEMORY_WORDS.search(name) or
                                                                  _MEMORY_WORDS.search(unit or "")):
        return f"memory: {name}"
    return None


def is_memory(row) -> bool:
    """A metric row (or MetricDef) that measures memory (memory_goal)."""
    return memory_goal(row.name, row.unit, row.higher_is_better, row.source) is not None


def parse_metric_option(text: str) -> MetricDef:
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest or not re.match(r"^[A-Za-z_][\w.-]*$", name):
        raise AlloclabError(
            f"Cannot read --metric '{text}': write NAME=REGEX[:higher|lower] (e.g. "
            f"'iops=IOPS:\\s*([\\d.]+):higher') or NAME=json:KEY[:higher|lower]."
        )
    higher = True
    m = re.search(r":(higher|lower)$", rest)
    if m:
        higher = m.group(1) == "higher"
        rest = rest[: m.start()]
    if rest.startswith("json:"):
        return MetricDef(name, "", higher, "json", rest[5:])
    try:
        re.compile(rest)
    except re.error as exc:
        raise AlloclabError(f"The regex of --metric '{name}' does not compile ({exc}): '{rest}'. "
                            f"Fix the pattern; put the number in a capture group.") from None
    return MetricDef(name, "", higher, "regex", rest)


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", "").replace("_", "").strip())
    except ValueError:
        return None


def _json_lookup(obj, path: str):
    for key in path.split("."):
        if isinstance(obj, dict) and key in obj:
            obj = obj[key]
        else:
            return None
    return obj


def extract(defn: MetricDef, text: str, values: dict | None = None) -> float | None:
    """The metric's value in this output, or None if it is not there. `values`: the figures an
    executor measured itself (RunResult.values), where an `alloclab.NAME` metric is taken as it is."""
    if values and defn.source == "json" and defn.pattern.startswith("alloclab."):
        value = _json_lookup({"alloclab": values}, defn.pattern)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    if defn.source == "regex":
        matches = list(re.finditer(defn.pattern, text, re.MULTILINE))
        for m in reversed(matches):
            value = _number(m.group(1) if m.groups() else m.group(0))
            if value is not None:
                return value
        return None
    if defn.source == "json":
        for line in reversed(text.splitlines()):
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                value = _json_lookup(json.loads(line), defn.pattern)
            except json.JSONDecodeError:
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                return float(value)
        return None
    return None


def output_tail(text: str, lines: int = 15) -> str:
    tail = text.strip().splitlines()[-lines:]
    return "\n".join("    " + line for line in tail) if tail else "    (no output)"
