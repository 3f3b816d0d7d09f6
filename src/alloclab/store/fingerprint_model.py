"""The allocation fingerprint of a cell as typed values: what measure/fingerprint.py summarizes from
the cell's untimed run, what the store keeps (as JSON, one row per cell), and what stats, tune and
the reports read.

In: measure's summary, or a stored row's JSON (`Fingerprint.from_dict`, which fills in what an older
alloclab did not write). Out: `to_dict()`, the stored JSON, with the same keys in the same order as
measure has always written them. Two tables stay name -> count dicts, since their names are data the
reports and rules iterate over: the calls by kind (malloc, free, ...) and the system calls by name
(brk, mmap, ...). Series and histograms are stored as JSON lists and read as named tuples.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import NamedTuple


class Plain:
    """A flat dataclass read from a JSON object: keys it does not know (a newer alloclab's) are left
    out, keys it misses (an older one's) take their defaults."""

    @classmethod
    def from_dict(cls, d: dict):
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    @classmethod
    def of(cls, value):
        """From a stored object, or as is; an absent (or empty) section stays None."""
        if not value:
            return None
        return value if isinstance(value, cls) else cls.from_dict(value)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class SizeClass(NamedTuple):
    """One power-of-two class of requested sizes: [2^(size_class-1), 2^size_class); class 0 is size 0."""
    size_class: int
    label: str
    calls: int
    bytes: int


class MemPoint(NamedTuple):
    """The whole tree at one instant of the run, in KiB: live (usable) bytes, RSS, anonymous RSS."""
    t_s: float
    live_kb: int
    rss_kb: int
    anon_kb: int


class OwnPoint(NamedTuple):
    """The allocator's own figures at one instant (KiB); None where no process reported them."""
    t_s: float
    allocated_kb: int | None
    held_kb: int | None


@dataclass
class Sampled(Plain):
    """The blocks followed from allocation to free (1 in `sample_every` by address)."""
    allocs: int = 0
    frees: int = 0
    cross_thread: int = 0
    cross_unknown: int = 0
    dropped: int = 0


@dataclass
class Lifetime(Plain):
    """The sampled blocks' lifetimes: shares of all sampled blocks, and counts by decade from 1 us."""
    sampled: int = 0
    short_lt_1ms: float | None = None
    medium_1ms_1s: float | None = None
    long_ge_1s: float | None = None
    live_at_exit: float | None = None
    freed_decades_from_1us: list[int] = field(default_factory=list)
    live_at_exit_decades_from_1us: list[int] = field(default_factory=list)


@dataclass
class Memory(Plain):
    """Live bytes against anonymous RSS where the program held the most live, and at the end (KiB);
    overhead = anonymous RSS - live. Every figure None when not read."""
    peak_live_kb: int | None = None
    anon_at_peak_live_kb: int | None = None
    overhead_at_peak_kb: int | None = None
    peak_anon_kb: int | None = None
    peak_rss_kb: int | None = None
    end_anon_kb: int | None = None
    end_live_kb: int | None = None
    overhead_at_end_kb: int | None = None
    end_t_s: float | None = None
    # Given back between exit()'s start and the last reading, by an allocator's exit cleanup (the
    # mimalloc crate's): the end figures are then those read as exit began.
    exit_cleanup_kb: int | None = None


@dataclass
class AllocatorAt(Plain):
    """The allocator's own count of allocated and held bytes beside our live bytes, at one instant (KiB)."""
    live_kb: int | None = None
    allocated_kb: int | None = None
    held_kb: int | None = None


@dataclass
class AllocatorFigures(Plain):
    """What the allocator says about itself (launcher/fingerprint.c reads it in each process)."""
    source: str = ""
    allocated_is: str | None = None
    held_is: str | None = None
    series: list[OwnPoint] = field(default_factory=list)
    at_peak_live: AllocatorAt | None = None   # both None where the run read no memory series
    at_end: AllocatorAt | None = None

    def __post_init__(self) -> None:
        self.series = [OwnPoint(*pt) for pt in self.series]
        self.at_peak_live, self.at_end = AllocatorAt.of(self.at_peak_live), AllocatorAt.of(self.at_end)

    def to_dict(self) -> dict:
        return {"source": self.source, "allocated_is": self.allocated_is, "held_is": self.held_is,
                "series": [list(pt) for pt in self.series],
                **({"at_peak_live": self.at_peak_live.to_dict(), "at_end": self.at_end.to_dict()}
                   if self.at_peak_live is not None and self.at_end is not None else {})}


# The parts of the anonymous RSS at a reading, in the order the reports show them
# (measure/fingerprint_books.py says what each is).
PARTS = ("live", "free_top", "free_inside", "caches", "decaying", "metadata", "held", "other")


@dataclass
class MemorySplit(Plain):
    """The anonymous RSS at one reading of the fingerprint run, in resident parts (bytes): where the
    memory sits inside the allocator, beside what is not the allocator's. A part the allocator's
    books cannot give is absent from `parts`."""
    at: str = ""                     # "peak", "end", "after flush"
    t_s: float | None = None         # on the memory series' clock
    anon: int = 0                    # the anonymous RSS there (smaps, read with the books)
    parts: dict[str, int] = field(default_factory=dict)
    other_parts: dict[str, int] = field(default_factory=dict)   # stacks, libraries, interposer, own_maps
    unexplained: int = 0             # anon less every part
    books: dict[str, int] = field(default_factory=dict)         # the figures read there, by name
    beyond_resident: int = 0         # what the books count beyond the resident pages (address space)

    def part(self, name: str) -> int | None:
        return self.parts.get(name)

    @property
    def free(self) -> int:
        """What the allocator holds beyond the live bytes and its own metadata: free, cached, decaying."""
        return sum(self.parts.get(k, 0) for k in ("free_top", "free_inside", "caches", "decaying", "held"))


@dataclass
class Books(Plain):
    """The allocator's own books in the fingerprint run (measure/fingerprint_books.py): the tree's
    figures by name at each reading kept, and the split of the anonymous RSS at the peak, the end
    and each memory phase."""
    interface: str = ""              # malloc_info | mallctl | property | mi_process_info | none
    source: str = ""                 # in words: "glibc malloc_info"
    spent_s: float = 0.0             # time the helper threads spent reading them
    names: list[str] = field(default_factory=list)
    rows: list[list] = field(default_factory=list)   # [t_s, figure per name]; -1 where unknown
    splits: list[MemorySplit] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.splits = [MemorySplit.of(s) for s in self.splits]

    def at(self, where: str) -> MemorySplit | None:
        return next((s for s in self.splits if s.at == where), None)

    def to_dict(self) -> dict:
        return {"interface": self.interface, "source": self.source, "spent_s": self.spent_s, "names": self.names,
                "rows": self.rows, "splits": [s.to_dict() for s in self.splits]}


@dataclass
class SyscallBytes(Plain):
    """The bytes the memory system calls moved (perf's arguments; none from strace)."""
    brk_grown: int = 0
    brk_shrunk: int = 0
    mmap_anon: int = 0
    mmap_file: int = 0
    munmap: int = 0
    madvise_released: int = 0
    madvise_other: int = 0
    mprotect: int = 0


@dataclass
class PerWork(Plain):
    """Allocation calls and requested bytes per unit of the primary metric's work
    (measure/fingerprint_work.py)."""
    work: str = ""
    metric: str = ""
    rate: float | None = None
    window_s: float | None = None
    calls: float | None = None
    bytes: float | None = None
    calls_in_window: int | None = None
    median_of: int = 0          # steady intervals whose median calls and bytes are; 0: the whole window


@dataclass
class Phase(Plain):
    """Live bytes against anonymous RSS at the end of a service's memory phase (KiB), and the
    allocator's own figures there where it reports them (stored beside ours, flat)."""
    name: str = ""
    t_end: float | None = None
    live_kb: int | None = None
    anon_kb: int | None = None
    overhead_kb: int | None = None
    rss_kb: int | None = None
    own: AllocatorAt | None = None

    @classmethod
    def from_dict(cls, d: dict) -> Phase:
        ph = super().from_dict(d)
        if "allocated_kb" in d or "held_kb" in d:
            ph.own = AllocatorAt.from_dict(d)
        return ph

    def to_dict(self) -> dict:
        return {"name": self.name, "t_end": self.t_end, "live_kb": self.live_kb, "anon_kb": self.anon_kb,
                "overhead_kb": self.overhead_kb, "rss_kb": self.rss_kb,
                **({"allocated_kb": self.own.allocated_kb, "held_kb": self.own.held_kb} if self.own else {})}


@dataclass
class Fingerprint(Plain):
    """One cell's fingerprint (measure/fingerprint.py's module docstring says what each figure is);
    a run that failed has only `error`."""
    error: str | None = None
    processes: int = 0
    process_list: list[dict] = field(default_factory=list)   # as written; only stored and exported
    calls: dict[str, int] = field(default_factory=dict)      # by kind: malloc, free, realloc, ...
    allocs: int = 0
    frees: int = 0
    wall_s: float | None = None
    calls_per_s: float | None = None
    allocs_per_s: float | None = None
    bytes: int = 0
    usable_bytes: int = 0
    hist: list[SizeClass] = field(default_factory=list)
    big_threshold: int = 128 * 1024
    big_calls: int = 0
    big_bytes: int = 0
    big_call_share: float | None = None
    big_byte_share: float | None = None
    realloc: int = 0
    aligned: int = 0
    threads: int = 0
    # The CPUs the program may use (its affinity, the cgroup's quota: measure/inspect/cpus.py), and how
    # that was told; None in a fingerprint stored before, read as the host's count.
    cpus: int | None = None
    cpus_how: str = ""
    sample_every: int = 0
    sampled: Sampled = field(default_factory=Sampled)
    cross_thread_share: float | None = None
    lifetime: Lifetime = field(default_factory=Lifetime)
    live_is: str = ""
    series: list[MemPoint] = field(default_factory=list)
    series_t0_monotonic_s: float | None = None   # CLOCK_MONOTONIC at the series' time 0
    memory: Memory | None = None                 # None where no process wrote a series
    allocator: AllocatorFigures | None = None    # None where the allocator reports nothing
    books: Books | None = None                   # None where no process read them (an older interposer)
    syscalls: dict[str, int] | None = None       # by name: brk, mmap, ...; None where not counted
    syscall_bytes: SyscallBytes | None = None
    syscalls_how: str = ""
    per_work: PerWork | None = None
    phases: list[Phase] = field(default_factory=list)
    status: str | None = None                    # the run's: set with run_peak_rss_kb by run_cell
    run_error: str | None = None
    run_peak_rss_kb: int | None = None
    minflt: int | None = None                    # the run's minor page faults (the launcher's rusage)
    run_stderr: str | None = None                # the tail of a failed run's stderr

    def __post_init__(self) -> None:
        # Parts read from JSON (lists and objects) become their types here, once; typed ones pass.
        self.hist = [SizeClass(*h) for h in self.hist]
        self.series = [MemPoint(*pt[:4]) for pt in self.series]
        self.sampled = Sampled.of(self.sampled) or Sampled()
        self.lifetime = Lifetime.of(self.lifetime) or Lifetime()
        self.memory = Memory.of(self.memory)
        self.allocator = AllocatorFigures.of(self.allocator)
        self.books = Books.of(self.books)
        self.syscall_bytes = SyscallBytes.of(self.syscall_bytes)
        self.per_work = PerWork.of(self.per_work)
        self.phases = [Phase.of(ph) for ph in self.phases]

    @property
    def failed(self) -> bool:
        return self.error is not None

    def to_dict(self) -> dict:
        """The stored JSON: measure's keys in measure's order; the sections a run may lack (memory,
        allocator, per_work, phases, the run's own status) are left out where it lacks them."""
        if self.failed:
            return {"error": self.error, **{k: v for k, v in (("status", self.status), ("run_error", self.run_error),
                                                             ("run_stderr", self.run_stderr)) if v}}
        return {
            "processes": self.processes, "process_list": self.process_list, "calls": self.calls,
            "allocs": self.allocs, "frees": self.frees, "wall_s": self.wall_s, "calls_per_s": self.calls_per_s,
            "allocs_per_s": self.allocs_per_s, "bytes": self.bytes, "usable_bytes": self.usable_bytes,
            "hist": [list(h) for h in self.hist], "big_threshold": self.big_threshold,
            "big_calls": self.big_calls, "big_bytes": self.big_bytes, "big_call_share": self.big_call_share,
            "big_byte_share": self.big_byte_share, "realloc": self.realloc, "aligned": self.aligned,
            "threads": self.threads, **({"cpus": self.cpus, "cpus_how": self.cpus_how} if self.cpus else {}),
            "sample_every": self.sample_every, "sampled": self.sampled.to_dict(),
            "cross_thread_share": self.cross_thread_share, "lifetime": self.lifetime.to_dict(),
            "live_is": self.live_is, "series": [list(pt) for pt in self.series],
            "series_t0_monotonic_s": self.series_t0_monotonic_s,
            **({"memory": self.memory.to_dict()} if self.memory is not None else {}),
            **({"allocator": self.allocator.to_dict()} if self.allocator is not None else {}),
            **({"books": self.books.to_dict()} if self.books is not None else {}),
            "syscalls": self.syscalls,
            "syscall_bytes": self.syscall_bytes.to_dict() if self.syscall_bytes is not None else None,
            "syscalls_how": self.syscalls_how,
            **({"per_work": self.per_work.to_dict()} if self.per_work is not None else {}),
            **({"phases": [ph.to_dict() for ph in self.phases]} if self.phases else {}),
            **({"status": self.status} if self.status is not None else {}),
            **({"run_error": self.run_error} if self.run_error else {}),
            **({"run_peak_rss_kb": self.run_peak_rss_kb} if self.status is not None else {}),
            **({"run_stderr": self.run_stderr} if self.run_stderr else {}),
            **({"minflt": self.minflt} if self.minflt is not None else {}),
        }
