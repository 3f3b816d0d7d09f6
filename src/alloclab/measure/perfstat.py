"""Hardware counters through `perf stat`, where the machine has them (see machine.perf_counters)."""

from __future__ import annotations

from pathlib import Path

EVENTS = {"cycles": "cycles", "instructions": "instructions", "cache-misses": "cache_misses"}
# perf record's samples per second (profile/). Off the round numbers, so sampling does not lock
# step with timers. Kept here, in a module without imports, for the CLI's option default.
DEFAULT_FREQUENCY = 999


def wrap_perf_stat(argv: list[str], env: dict[str, str], variant_env: dict[str, str],
                   out: Path) -> tuple[list[str], dict[str, str]]:
    """perf runs without the variant's settings; `env` hands them to the program alone."""
    clean = {k: v for k, v in env.items() if k not in variant_env}
    settings = [f"{k}={v}" for k, v in variant_env.items()]
    wrapped = ["perf", "stat", "-x,", "-o", str(out), "-e", ",".join(EVENTS), "--",
               "env", *settings, *argv]
    return wrapped, clean


def parse_perf_stat(path: Path) -> dict[str, float]:
    values: dict[str, float] = {}
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return values
    for line in lines:
        fields = line.split(",")
        if len(fields) < 3 or line.startswith("#"):
            continue
        event = fields[2].split(":")[0]
        if event in EVENTS:
            try:
                values[EVENTS[event]] = float(fields[0])
            except ValueError:
                pass  # <not counted> / <not supported>
    return values
