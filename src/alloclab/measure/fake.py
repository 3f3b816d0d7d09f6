"""An executor that runs nothing: each run "takes" the seconds its variant is given, so the runner's
scheduling and stopping rule can be tested (and its own cost measured) without processes or
timing noise, as hyperfine's mock executor turns "sleep 0.1" into 0.1 s.

In: a mean wall time per variant environment, a relative noise and a seed. Out: RunResults that
are the same for the same seed, and a FakeClock advanced by every run, for the runner's budget.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from alloclab.measure.run import RunResult


@dataclass
class FakeClock:
    """The runner's clock (Runner.clock): only fake runs move it."""

    now: float = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class FakeExecutor:
    # Mean wall seconds of a run, from the variant's own environment ({} for the baseline glibc)
    # and how many runs that environment had before this one.
    mean_s: Callable[[dict[str, str], int], float]
    noise: float = 0.0             # relative standard deviation of a run's wall time (seeded)
    seed: int = 0
    clock: FakeClock | None = None
    interrupt_at: int | None = None   # raise KeyboardInterrupt (Ctrl-C) at this call, 1-based
    prepare_error: Exception | None = None
    stdout: str = ""               # what every run "prints" (the store keeps a run's output)
    peak_kb: Callable[[dict[str, str]], int] = lambda env: 10_240   # peak RSS from the variant's environment
    calls: int = 0
    cleaned_up: bool = False
    _runs_of: dict = field(default_factory=dict, init=False, repr=False)
    _rng: random.Random = field(init=False, repr=False)
    # The runner's two questions about an executor (see measure.executors.CommandExecutor).
    accounts_all_cpu = True
    fresh_workdir = False

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def program(self) -> Path:
        # Not an ELF file: the static check notes that and reads nothing more.
        return Path(__file__)

    def prepare(self) -> None:
        if self.prepare_error is not None:
            raise self.prepare_error

    def execute(self, env, variant_env, workdir, *, timeout_s, mapped_marker, perf_file) -> RunResult:
        self.calls += 1
        if self.interrupt_at is not None and self.calls >= self.interrupt_at:
            raise KeyboardInterrupt
        key = tuple(sorted(variant_env.items()))
        n = self._runs_of[key] = self._runs_of.get(key, -1) + 1
        wall = max(1e-6, self.mean_s(variant_env, n) * (1 + self.noise * self._rng.gauss(0.0, 1.0)))
        if self.clock is not None:
            self.clock.now += wall
        kb = self.peak_kb(variant_env)
        return RunResult("ok", wall, exit_code=0, user_s=wall * 0.9, sys_s=wall * 0.1,
                         max_rss_kb=kb, peak_rss_kb=kb, final_rss_kb=kb, minflt=1000,
                         stdout=self.stdout)

    def cleanup(self) -> None:
        self.cleaned_up = True
