"""One run as the store keeps it: typed while it is written, a row once stored.

In: a measure.run.RunResult and what was read from it. Out: the row Store.load gives back.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from alloclab.store.model import Run

OUTPUT_KEYS = ("stdout", "stderr", "rss_series", "processes")   # in Store.load's runs, not in memory
_now: list = [None, ""]


def now() -> str:
    """UTC to the second; formatted once a second (a run of a short command is far shorter)."""
    second = int(time.time())
    if _now[0] != second:
        _now[:] = [second, datetime.fromtimestamp(second, timezone.utc).isoformat(timespec="seconds")]
    return _now[1]


@dataclass
class RunRecord:
    """One run as stored (a row of `runs` with its metrics)."""

    workload_idx: int
    variant_idx: int
    block: int
    position: int
    warmup: bool
    status: str
    wall_s: float | None
    metrics: dict[str, float]
    extra: dict
    exit_code: int | None = None
    signal: int | None = None
    error: str | None = None
    stdout: str = ""
    stderr: str = ""
    rss_series: list = field(default_factory=list)
    processes: list[dict] = field(default_factory=list)
    started: str = ""

    @classmethod
    def of(cls, workload_idx: int, variant_idx: int, block: int, position: int, warmup: bool, result,
           metrics: dict[str, float | None], extra: dict) -> "RunRecord":
        """From a measure.run.RunResult; metrics without a value are not stored."""
        return cls(workload_idx, variant_idx, block, position, bool(warmup), result.status, result.wall_s,
                   {k: float(v) for k, v in metrics.items() if v is not None}, extra,
                   result.exit_code, result.signal, result.error, result.stdout, result.stderr,
                   list(result.rss_series or []), [p.__dict__ for p in result.processes or []], now())

    def row(self, run_id: int, exp_id: int) -> Run:
        """As Store.load gives the run, less its output (stdout, stderr, RSS series, processes):
        the statistics never read those, and a long experiment would hold them all in memory."""
        return Run(self.workload_idx, self.variant_idx, self.block, self.position, bool(self.warmup), self.status,
                   self.wall_s, self.metrics, self.extra, self.exit_code, self.signal, self.error, self.started,
                   run_id, exp_id)
