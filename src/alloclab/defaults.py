"""The one source of every default setting: the CLI's options, the runner and the statistics read
their defaults here, so that a default changed here changes everywhere (help text included).

Nothing here imports anything: `alloclab --help` reads it at start.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

MARGIN = 0.02          # equivalence margin (--min-effect): within ±2%, two variants count as equivalent
ALPHA = 0.05           # family-wise error rate of the comparisons of one metric of one workload
WARMUP = 1             # warm-up blocks, discarded (the first also verifies the allocator)
SEED = 1               # seed of the randomized run order
PROFILE_RUNS = 3       # profiled runs per variant with --profile


@dataclass(frozen=True)
class CommandDefaults:
    """How long compare, suite and run measure unless told: they differ because their runs do
    (a command of a second, built-in workloads of a fraction of one, a server of a minute)."""

    first_look: int          # runs per variant before the first look (and with --runs, none of these)
    max_runs: int            # --max-runs
    budget: str              # --budget
    timeout_s: float | None  # --timeout
    warmup: int = WARMUP     # --warmup
    early_look: int | None = None   # a race's look before the first (plan/design.py)


COMPARE = CommandDefaults(first_look=10, max_runs=300, budget="10m", timeout_s=None)
SUITE = CommandDefaults(first_look=8, max_runs=80, budget="3m", timeout_s=120.0)
# An experiment file's own [experiment] runs, max_runs and budget come before these.
RUN = CommandDefaults(first_look=5, max_runs=30, budget="25m", timeout_s=None)
# tune's race looks first at 5 runs (a file's first look where it is earlier), then at 8, 12, 18, ...
# over the blocks its budget reaches (plan/design.py Design.race): a candidate decided at once, or far
# from the leader, leaves at the first look.
TUNE = dataclasses.replace(COMPARE, early_look=5)


def refusal(*, runs: int | None = None, warmup: int | None = None, max_runs: int | None = None,
            timeout_s: float | None = None) -> str | None:
    """Why these counts cannot be measured with, or None: the one check behind the CLI's options,
    the runner's Settings and the profiler (each raises it as its own error)."""
    if runs is not None and runs < 1:
        return (f"--runs must be at least 1 (got {runs}): it is the number of measured runs per variant; "
                f"leave it out to add runs until the comparisons are decided.")
    if warmup is not None and warmup < 0:
        return f"--warmup cannot be negative (got {warmup}): give 0 for no warm-up block."
    if max_runs is not None and max_runs < 2:
        return f"--max-runs must be at least 2 to decide anything (got {max_runs})."
    if timeout_s is not None and not timeout_s > 0:
        return (f"--timeout must be a positive number of seconds (got {timeout_s:g}): it is the time after "
                f"which a run is killed. Give e.g. --timeout 60, or leave it out for no limit.")
    return None


def percent_text(fraction: float) -> str:
    """0.02 -> '2%': a default as the help text and the option parser write it."""
    return f"{fraction * 100:g}%"


def seconds(text: str) -> float:
    """'90s', '20m', '1h30m' or a plain number of seconds (--budget, a file's budget)."""
    from alloclab.errors import AlloclabError
    t = text.strip().lower()
    parts = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?", t)
    if not t or not parts or not any(parts.groups()):
        raise AlloclabError(f"Cannot read '{text}' as a duration; write e.g. 90s, 20m or 1h.")
    h, m, sec = (float(g) if g else 0.0 for g in parts.groups())
    total = h * 3600 + m * 60 + sec
    if total <= 0:
        raise AlloclabError(f"The budget must be longer than 0 (got '{text}'); write e.g. 90s, 20m or 1h.")
    return total
