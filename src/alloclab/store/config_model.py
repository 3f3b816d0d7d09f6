"""How an experiment was measured (`experiments.config`) and where (`experiments.machine`), as
typed records: ExperimentConfig and MachineRecord.

In: the JSON objects the runner, the fleet client and tune write. Out: attributes the statistics,
tune and the reports read. The writers keep building plain dicts: that is the JSON they store, and
`to_dict()` gives it back key for key, in the stored order, so an exported or merged experiment
is the same bytes. Keys a record does not name (a newer writer's) stay in `extra`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from alloclab.store.fingerprint_model import Plain


class _Stored:
    """A record read from one stored JSON object: its named keys as attributes, the rest in `extra`,
    and the order they were stored in."""

    _order: tuple[str, ...]
    extra: dict

    @classmethod
    def of(cls, data):
        if isinstance(data, cls):
            return data
        d = dict(data or {})
        named = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        obj = cls(**{k: v for k, v in d.items() if k in named},
                  extra={k: v for k, v in d.items() if k not in named})
        obj._order = tuple(d)
        return obj

    def to_dict(self) -> dict:
        """The stored object: the keys read, in their order, then any named attribute set since."""
        order = getattr(self, "_order", ())
        out: dict[str, Any] = {}
        for k in order:
            out[k] = self.extra[k] if k in self.extra else getattr(self, k)
        defaults = type(self)()
        for f in dataclasses.fields(self):
            k = f.name
            if k != "extra" and k not in out and getattr(self, k) != getattr(defaults, k):
                out[k] = getattr(self, k)
        for k, v in self.extra.items():
            out.setdefault(k, v)
        return out

    def get(self, key: str, default=None):
        """A key by its stored name: for the few readers that walk keys (the diff of two experiments)."""
        return self.to_dict().get(key, default)


@dataclass(frozen=True)
class Candidate(Plain):
    """A setting tune proposed (tune/prescribe.py), as the race stores it in `config.tune`."""

    spec: str
    rule: str
    expect: str            # faster | less memory
    mechanism: str         # what the fingerprint read, in words
    why: str               # how the settings act on it
    refused: str | None = None   # why the installed allocator cannot take it (never raced)
    metric: str | None = None    # where a memory rule's effect shows (end_anon_mb, rss_after_PHASE_mb)


@dataclass
class ExperimentConfig(_Stored):
    """How the runs were scheduled and when the experiment stopped; tune's, a sweep's and a fleet's
    own records as the JSON they stored."""

    runs: int | None = None              # measured runs per variant planned (the first look's, until decided)
    warmup: int = 0
    seed: int | None = None
    verify: bool = True
    schedule: str | None = None
    until_decided: bool = False
    until_precise: float | None = None
    budget_s: float | None = None
    max_runs: int | None = None
    timeout_s: float | None = None
    margin: float | None = None          # the equivalence margin the runner judged with
    design: dict | None = None           # plan.design.Design.to_config()
    stopped: str | None = None           # decided, bounded, budget, max-runs, interrupted
    runs_done: int | None = None
    dropped: list = field(default_factory=list)   # [workload, variant, leader, runs]: tune's racing rule
    fingerprint_s: float | None = None
    removed_env: dict = field(default_factory=dict)
    env_padding: str | None = None
    perf_counters: bool | None = None
    first_look_sized: str | None = None
    fleet: dict | None = None            # fleet/client.py's FleetRecord
    sweeps: list | None = None           # plan/sweep.py's sweep_config
    sweep: dict | None = None
    tune: dict | None = None             # cli/tune.py's diagnosis, candidates and readings
    extra: dict = field(default_factory=dict)

    def with_(self, **changes) -> "ExperimentConfig":
        """A copy with these keys changed (stored order kept): a host's share of a fleet experiment."""
        return ExperimentConfig.of(self.to_dict() | changes)

    def tune_candidates(self) -> list[Candidate]:
        """A tune race's candidates, then those the installed allocators refused (never raced)."""
        t = self.tune or {}
        return [Candidate.from_dict(d) for key in ("candidates", "refused") for d in t.get(key) or []]

    def stored_sweeps(self) -> list[dict]:
        return list(self.sweeps or ([self.sweep] if self.sweep else []))


@dataclass
class MachineRecord(_Stored):
    """The host an experiment ran on (measure/machine.py's snapshot; a fleet's combined one)."""

    host: str | None = None
    cpu_model: str | None = None
    cores: int | None = None
    usable_cores: int | None = None
    memory_total_mb: float | None = None
    kernel: str | None = None
    os: str | None = None
    thp: str | None = None
    thp_defrag: str | None = None
    governor: str | None = None
    glibc: str | None = None
    perf_counters: bool | None = None
    perf_counters_note: str | None = None
    perf_event_paranoid: int | None = None
    load_start: list | None = None
    date: str | None = None
    alloclab: str | None = None
    python: str | None = None
    allocators: dict = field(default_factory=dict)   # label -> version
    hosts: dict | None = None                       # a fleet's: host -> its own snapshot
    extra: dict = field(default_factory=dict)
