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
class TuneRecord(_Stored):
    """A tune race's own record (tune/session.py writes it): where its diagnosis and screen are,
    what the rules read and proposed, what the screen left out, and the run cap the race took."""

    diagnosis_experiment: int | None = None
    screen_experiment: int | None = None
    screened_out: list = field(default_factory=list)   # tune/screen.py: what the screen left out, with its estimates
    fired: list = field(default_factory=list)
    silent: list = field(default_factory=list)
    candidates: list = field(default_factory=list)     # Candidate, raced
    refused: list = field(default_factory=list)        # Candidate, refused by the installed allocators
    readings: dict = field(default_factory=dict)       # allocator -> reading name -> value
    run_cap: list | None = None                        # [the options' cap, the race's] where tune raised it
    baseline: dict | None = None                       # tune/baseline.py: what the program runs, where not glibc
    failures: list = field(default_factory=list)       # tune/diagnose_run.py: fingerprints that failed, and why
    question: list = field(default_factory=list)       # a file's own variants (specs): raced as the own fixes are
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.candidates = [Candidate.of(c) for c in self.candidates]
        self.refused = [Candidate.of(c) for c in self.refused]

    def to_dict(self) -> dict:
        out = super().to_dict()
        for key in ("candidates", "refused"):
            if key in out:
                out[key] = [c.to_dict() if isinstance(c, Candidate) else c for c in out[key]]
        return out


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
    tune: TuneRecord | None = None       # a tune race's record (tune/session.py)
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.tune = TuneRecord.of(self.tune) if self.tune else None

    def to_dict(self) -> dict:
        out = super().to_dict()
        if isinstance(out.get("tune"), TuneRecord):
            out["tune"] = out["tune"].to_dict()
        return out

    def with_(self, **changes) -> "ExperimentConfig":
        """A copy with these keys changed (stored order kept): a host's share of a fleet experiment."""
        return ExperimentConfig.of(self.to_dict() | changes)

    def tune_candidates(self) -> list[Candidate]:
        """A tune race's candidates, then those the installed allocators refused (never raced)."""
        return [*self.tune.candidates, *self.tune.refused] if self.tune else []

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
