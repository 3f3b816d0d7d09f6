"""An inspection of a running process (`alloclab inspect PID`) as typed values: what measure/inspect
read (a Snapshot: the split of its anonymous RSS in the fingerprint's parts, glibc's arenas as the
walk found them, how each thing was read), and the answer tune/ gave from it. Stored as JSON, one
row per process and sample, in the `inspections` table of an experiment of kind "inspect". And what
a watch of it says (`growth`): which part grew from a process's first sample to its last."""

from __future__ import annotations

from dataclasses import dataclass, field

from alloclab.store.fingerprint_model import PARTS, MemorySplit, Plain


@dataclass
class ArenaFigures(Plain):
    """One glibc arena as the walk found it (bytes, and chunks where counted)."""
    address: int = 0
    main: bool = False
    threads: list[int] = field(default_factory=list)    # the threads whose arena it is (where read)
    heaps: int = 0
    system: int = 0              # its own count (malloc_state.system_mem)
    walked: int = 0              # the bytes its heaps span, as walked
    top: int = 0                 # the top chunk's size
    top_resident: int = 0
    free: int = 0                # free chunks between others (glibc's bins)
    free_count: int = 0
    fast: int = 0                # in its fastbins
    fast_count: int = 0
    tcache: int = 0              # in the threads' tcaches, of chunks in its heaps
    tcache_count: int = 0
    in_use: int = 0              # chunks in use as the heap shows them (the cached ones included)
    in_use_count: int = 0
    unread: int = 0


@dataclass
class Snapshot(Plain):
    """One process at one instant, read from outside."""
    pid: int = 0
    when: str = ""               # UTC, ISO
    t_s: float = 0.0             # seconds since the inspection's first sample (--watch)
    cmdline: list[str] = field(default_factory=list)
    exe: str = ""
    allocator: str = "unknown"   # glibc | jemalloc | tcmalloc | tcmalloc-minimal | mimalloc | unknown
    allocator_how: str = ""      # how that was told (a preload, a linked library, ...)
    source: str = ""             # what the split was read from: the heap walk, a channel, smaps alone
    libc: str = ""
    glibc: str | None = None
    located_by: str | None = None      # main_arena and mp_: debug symbols, or content
    tcache_by: str | None = None
    residency: str = ""          # pagemap | smaps
    stopped: bool = False        # whether its threads were stopped for the reads
    traced_by: int = 0           # a tracer it already had (then it was read running)
    pauses: int = 0
    pause_max_ms: float = 0.0
    pause_median_ms: float = 0.0
    pause_total_ms: float = 0.0
    read_s: float = 0.0
    unread: int = 0              # bytes the walk could not read or trust
    threads: int = 0
    cpus: int = 0                # the CPUs it may use (its affinity, its cgroup's quota); 0: not read
    cpus_how: str = ""
    arenas: list[ArenaFigures] = field(default_factory=list)
    mapped_count: int = 0
    mapped_bytes: int = 0
    mapped_resident: int = 0
    thresholds: dict[str, int] = field(default_factory=dict)    # mp_: trim, mmap, fixed, raised_by, top_pad
    # The heaps' chunks by power-of-two class of their size: class, free, free_bytes, free_min, used, used_bytes
    chunk_sizes: list[dict] = field(default_factory=list)
    split: MemorySplit | None = None
    booked: dict[str, int] = field(default_factory=dict)        # the parts as address space
    smaps: dict[str, int] = field(default_factory=dict)         # heap, anonymous maps, stacks, file-backed
    rollup: dict[str, int] = field(default_factory=dict)        # smaps_rollup: Rss, Pss, Anonymous, Swap
    rss: int = 0
    pss: int = 0
    channel: dict = field(default_factory=dict)                 # a program's own channel: what it said
    notes: list[str] = field(default_factory=list)              # in words: how, and what it could not

    def __post_init__(self) -> None:
        self.arenas = [ArenaFigures.of(a) for a in self.arenas]
        self.split = MemorySplit.of(self.split)

    def to_dict(self) -> dict:
        d = super().to_dict()
        d["split"] = self.split.to_dict() if self.split is not None else None
        d["arenas"] = [a.to_dict() for a in self.arenas]
        return d


@dataclass
class Setting(Plain):
    """A setting that would give the memory back, as a variant spec and how to apply it."""
    spec: str = ""
    env_line: str = ""
    systemd: str = ""


@dataclass
class Finding(Plain):
    rule: str = ""
    mechanism: str = ""
    why: str = ""
    expect: str = ""
    settings: list[Setting] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.settings = [Setting.of(s) for s in self.settings]


@dataclass
class Answer(Plain):
    """What the snapshot says to do: the rules that fired, what stayed silent, what the walk alone
    can say where glibc's thresholds could not be read, and the command that would race it."""
    fired: list[Finding] = field(default_factory=list)
    silent: list[str] = field(default_factory=list)
    said: list[str] = field(default_factory=list)
    race: str = ""

    def __post_init__(self) -> None:
        self.fired = [Finding.of(f) for f in self.fired]


@dataclass
class Inspection(Plain):
    """A snapshot with its answer: one row of the inspections table."""
    snapshot: Snapshot = field(default_factory=Snapshot)
    answer: Answer = field(default_factory=Answer)
    children: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.snapshot = Snapshot.of(self.snapshot) or Snapshot()
        self.answer = Answer.of(self.answer) or Answer()

    def to_dict(self) -> dict:
        return {"snapshot": self.snapshot.to_dict(), "answer": self.answer.to_dict(), "children": self.children}


# A part said to have grown over a watch grew by at least this much: below it, a few pages that a
# sample caught mid-allocation, not a trend.
GREW_AT_LEAST = 1 << 20


@dataclass
class Growth(Plain):
    """One process over a watch, its first sample against its last: each part's change (bytes), the
    part that grew most, and its share of the anonymous RSS's growth (None where that did not grow)."""
    pid: int = 0
    samples: int = 0
    t_s: float = 0.0             # from the first sample to the last
    anon_first: int = 0
    anon_last: int = 0
    parts: list[dict] = field(default_factory=list)     # part, first, last, change
    grew: str | None = None      # None: no part grew by GREW_AT_LEAST
    change: int = 0
    share: float | None = None

    @property
    def anon_change(self) -> int:
        return self.anon_last - self.anon_first


def growth(items: list[Inspection]) -> list[Growth]:
    """Each process sampled more than once, in the order it was first read."""
    by_pid: dict[int, list[Snapshot]] = {}
    for ins in items:
        if ins.snapshot.split is not None:
            by_pid.setdefault(ins.snapshot.pid, []).append(ins.snapshot)
    out = []
    for pid, snaps in by_pid.items():
        if len(snaps) < 2:
            continue
        a, b = snaps[0], snaps[-1]
        pa, pb = a.split.parts, b.split.parts
        rows = [{"part": k, "first": pa.get(k, 0), "last": pb.get(k, 0), "change": pb.get(k, 0) - pa.get(k, 0)}
                for k in PARTS if k in pa or k in pb]
        g = Growth(pid, len(snaps), round(b.t_s - a.t_s, 3), a.split.anon, b.split.anon, rows)
        top = max(rows, key=lambda r: r["change"], default=None)
        if top is not None and top["change"] >= GREW_AT_LEAST:
            g.grew, g.change = top["part"], top["change"]
            g.share = round(g.change / g.anon_change, 3) if g.anon_change > 0 else None
        out.append(g)
    return out
