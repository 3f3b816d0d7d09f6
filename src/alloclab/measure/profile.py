"""Where the CPU goes: sample a workload under each variant with `perf record` and attribute the
samples to allocator code, kernel memory management done for it, and the rest.

A profiled run is `perf record -e EVENT -F HZ [--call-graph dwarf] -o FILE -- env VAR=VAL... CMD`
run through measure.run_once (timeouts, Ctrl-C and teardown as for any run). The variant's
settings go through `env` so that perf itself is not preloaded. `perf script` then lists every
sample with its frames; each sample counts with its period as weight.

What counts as allocator code is data (the tables below): the variant's shared object, and
glibc's malloc family inside libc. Kernel samples are memory management when they serve a page
fault, brk, mmap, munmap, madvise, mremap or mprotect: with call graphs that is read from the
kernel stack (the outermost recognised entry point wins), without them from the leaf symbol
alone, which is an approximation (a spinlock taken during a fault is then "kernel other").
"""

from __future__ import annotations

import fnmatch
import functools
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

from alloclab.measure import machine
from alloclab.plan import schedule as plan
from alloclab.errors import AlloclabError, Interrupted
from alloclab.measure.run import RunInterrupted, RunResult, run_once
from alloclab.workloads.metrics import extract
from alloclab.measure.perfstat import DEFAULT_FREQUENCY  # noqa: F401  (defined there: the CLI reads it at start)
from alloclab.measure.service.executors import CommandModeExecutor, ServiceExecutor
from alloclab.catalog.variants import Variant
from alloclab.workloads.command import Workload

# --- what is allocator code ------------------------------------------------------------------

# glibc's malloc lives inside libc, so there it is told apart by symbol (globs, after the
# @VERSION and .constprop/.isra/.part suffixes are stripped).
GLIBC_DSOS = ("libc.so.6", "libc.so", "libc-*.so")
GLIBC_MALLOC_FAMILY = (
    "malloc", "free", "cfree", "calloc", "realloc", "reallocarray", "memalign", "posix_memalign",
    "__posix_memalign", "aligned_alloc", "valloc", "pvalloc", "malloc_usable_size", "__malloc_usable_size",
    "malloc_trim", "__malloc_trim", "mtrim", "malloc_consolidate", "sysmalloc", "sysmalloc_mmap*", "systrim",
    "heap_trim", "new_heap", "alloc_new_heap", "grow_heap", "shrink_heap", "unlink_chunk", "munmap_chunk",
    "mremap_chunk", "ptmalloc_init", "malloc_init", "malloc_printerr", "_mid_memalign",
    "checked_request2size", "_int_*", "tcache_*", "arena_*", "get_free_list", "reused_arena",
    "detach_arena", "__libc_malloc*", "__libc_free", "__libc_calloc", "__libc_realloc*",
    "__libc_memalign", "__libc_valloc", "__libc_pvalloc", "__GI___libc_malloc", "__GI___libc_free",
    "__GI___libc_realloc", "__GI___libc_calloc", "__GI___libc_memalign", "__malloc_*",
    "malloc_hook_ini", "realloc_hook_ini", "memalign_hook_ini", "__default_morecore", "__glibc_morecore",
)

# The allocator entry points a program calls (through its PLT): the same under every allocator.
ALLOCATOR_API = frozenset({
    "malloc", "free", "calloc", "realloc", "reallocarray", "memalign", "posix_memalign", "aligned_alloc",
    "valloc", "pvalloc", "malloc_usable_size", "malloc_trim", "_Znwm", "_Znam", "_ZdlPv", "_ZdaPv", "_ZdlPvm",
    "_ZdaPvm", "_ZnwmRKSt9nothrow_t", "_ZnamRKSt9nothrow_t", "_ZnwmSt11align_val_t", "_ZdlPvSt11align_val_t",
    "operator new", "operator delete", "operator new[]", "operator delete[]",
})

KERNEL_DSO_PREFIX = "[kernel"
KERNEL_IP_MIN = 0xFFFF800000000000

# With call graphs: kernel entry points that say which memory work a sample belongs to. The
# outermost one (closest to user space) wins, so a fault taken inside mmap(MAP_POPULATE) is mmap.
KERNEL_MM_ENTRIES = (
    ("brk", ("__x64_sys_brk", "__do_sys_brk", "__se_sys_brk")),
    ("mmap", ("__x64_sys_mmap", "ksys_mmap_pgoff", "vm_mmap_pgoff")),
    ("munmap", ("__x64_sys_munmap", "__vm_munmap")),
    ("madvise", ("__x64_sys_madvise", "do_madvise")),
    ("mremap", ("__x64_sys_mremap",)),
    ("mprotect", ("__x64_sys_mprotect", "do_mprotect_pkey")),
    ("page faults", ("asm_exc_page_fault", "exc_page_fault")),
)
# Faults on file-backed pages load code and data files, not heap: not allocator work.
FILE_FAULT_FRAMES = ("do_fault", "do_read_fault", "do_shared_fault", "do_cow_fault", "filemap_*")
# Faults and syscalls that neither belong to the heap: exit tears the whole address space down.
NOT_HEAP_ENTRIES = ("do_exit", "exit_mmap", "__x64_sys_exit_group", "__x64_sys_execve")

# Without call graphs only the leaf symbol is known: these leaves are memory management.
KERNEL_MM_LEAVES = (
    ("brk", ("__x64_sys_brk", "__do_sys_brk", "do_brk_flags", "check_brk_limits")),
    ("mmap", ("__x64_sys_mmap", "ksys_mmap_pgoff", "vm_mmap_pgoff", "do_mmap", "mmap_region", "__mmap_region",
              "get_unmapped_area", "__get_unmapped_area", "vm_unmapped_area", "unmapped_area*",
              "arch_get_unmapped_area*")),
    ("munmap", ("__x64_sys_munmap", "__vm_munmap", "do_vmi_munmap", "do_vmi_align_munmap", "vms_*",
                "unmap_*", "zap_*", "free_pgtables", "tlb_finish_mmu", "tlb_flush_mmu*", "release_pages",
                "folios_put_refs", "free_unref_*", "free_pages_and_swap_cache", "__tlb_batch_free_encoded_pages",
                "free_pcppages_bulk", "__free_one_page")),
    ("madvise", ("__x64_sys_madvise", "do_madvise", "madvise_*")),
    ("mremap", ("__x64_sys_mremap", "move_vma", "move_page_tables")),
    ("mprotect", ("__x64_sys_mprotect", "do_mprotect_pkey", "mprotect_fixup", "change_protection",
                  "change_pte_range")),
    ("page faults", ("asm_exc_page_fault", "exc_page_fault", "do_user_addr_fault", "handle_mm_fault",
                     "__handle_mm_fault", "do_anonymous_page", "do_huge_pmd_anonymous_page", "do_wp_page",
                     "wp_page_copy", "clear_page*", "clear_huge_page", "clear_subpage", "folio_zero_user",
                     "lock_vma_under_rcu", "vma_alloc_folio*", "alloc_anon_folio", "alloc_pages*",
                     "__alloc_pages*", "__alloc_frozen_pages*", "get_page_from_freelist", "rmqueue*",
                     "__rmqueue*", "__mem_cgroup_charge", "charge_memcg", "mem_cgroup_commit_charge",
                     "memcg*_commit_charge", "folio_add_lru*", "folio_add_new_anon_rmap",
                     "__folio_batch_add_and_move", "lru_add*", "pte_mkwrite", "set_pte_range", "__pte_alloc",
                     "pte_alloc*", "__pte_offset_map*", "___pte_offset_map", "__folio_mod_stat",
                     "__folio_throttle_swaprate", "get_mem_cgroup_from_mm", "count_memcg_events",
                     "__count_memcg_events", "mem_cgroup_from_task", "__lruvec_stat_mod_folio",
                     "__mod_memcg_lruvec_state")),
)

CATEGORIES = ("allocator", "kernel_mm", "kernel_other", "user_other")

# The call-graph unwinder. Frame pointers stop at the first libc frame (Debian builds glibc
# without them), which hides who asked for a brk or took a fault; DWARF unwinding sees through.
CALL_GRAPH = "dwarf"
TIMING_OK = 0.02             # profiled runs slower than this may not stand in for timed runs
CLOCK_EVENTS = ("cpu-clock", "task-clock")  # software timers whose sample period is nanoseconds
LOW_COVERAGE = 0.6           # samples standing for less of the program's CPU time than this get a note
FEW_SAMPLES = 200            # below this a share moves by whole percents from noise alone
UNRESOLVED_NOTE = 0.2        # a DSO with this fraction of samples lacking symbols gets a note
PARANOID_FILE = "/proc/sys/kernel/perf_event_paranoid"
PERF_INSTALL = "apt-get install -y linux-perf"
CAP_SYS_ADMIN, CAP_PERFMON = 21, 38


def clean_symbol(sym: str) -> str:
    """`cfree@GLIBC_2.2.5` -> `cfree`; `unlink_chunk.constprop.0` -> `unlink_chunk`."""
    sym = sym.split("@", 1)[0]
    return re.sub(r"\.(?:constprop|isra|part|cold|lto_priv|localalias)(?:\.\d+)?", "", sym)


def _matches(name: str, globs: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, g) for g in globs)


@functools.cache
def _is_glibc_malloc(sym: str) -> bool:
    return _matches(clean_symbol(sym), GLIBC_MALLOC_FAMILY)


@functools.cache
def _realpath(path: str) -> str:
    return os.path.realpath(path)


def _is_glibc(dso: str) -> bool:
    return _matches(os.path.basename(dso), GLIBC_DSOS)


@dataclass(frozen=True)
class Frame:
    ip: int
    sym: str
    dso: str

    @property
    def kernel(self) -> bool:
        return self.dso.startswith(KERNEL_DSO_PREFIX) or self.ip >= KERNEL_IP_MIN

    @property
    def resolved(self) -> bool:
        return self.sym != "[unknown]" and not self.sym.startswith("0x")


@dataclass
class Sample:
    comm: str
    pid: int
    period: int
    frames: list[Frame]   # leaf first


@dataclass(frozen=True)
class Attribution:
    """Says which frames are allocator code for one variant."""

    library: str | None = None   # the variant's shared object (resolved), None for glibc

    def is_allocator(self, frame: Frame) -> bool:
        if frame.kernel:
            return False
        if self.library and frame.dso.startswith("/") and _realpath(frame.dso) == _realpath(self.library):
            return True
        if frame.sym.endswith("@plt"):
            # The PLT stub a program jumps through to reach malloc is part of calling the
            # allocator, whichever library answers (5% of a batched hand-off's CPU under tcmalloc).
            return clean_symbol(frame.sym) in ALLOCATOR_API
        return _is_glibc(frame.dso) and frame.resolved and _is_glibc_malloc(frame.sym)

    def classify(self, sample: Sample) -> tuple[str, str | None, bool]:
        """(category, kernel memory kind, whether the kernel work was entered from allocator code)."""
        leaf = sample.frames[0]
        if not leaf.kernel:
            return ("allocator" if self.is_allocator(leaf) else "user_other"), None, False
        # One frame: no call graph (or it could not be unwound), so the leaf alone must tell.
        kernel = [f for f in sample.frames if f.kernel]
        kind = _leaf_kind(leaf.sym) if len(sample.frames) == 1 else _chain_kind(kernel)
        user = [f for f in sample.frames if not f.kernel]
        from_allocator = any(self.is_allocator(f) for f in user)
        # Kernel work outside memory management entered from allocator code is mostly its locks:
        # futex waits and the context switches they cost (glibc's arena mutexes, tcmalloc's spin
        # locks falling back to sleeping).
        return ("kernel_other" if kind is None else "kernel_mm"), kind, from_allocator


def _leaf_kind(sym: str) -> str | None:
    name = clean_symbol(sym)
    for kind, globs in KERNEL_MM_LEAVES:
        if _matches(name, globs):
            return kind
    return None


def _chain_kind(kernel_frames: list[Frame]) -> str | None:
    names = [clean_symbol(f.sym) for f in kernel_frames]
    if any(_matches(n, NOT_HEAP_ENTRIES) for n in names):
        return None
    for name in reversed(names):              # outermost first
        for kind, entries in KERNEL_MM_ENTRIES:
            if name in entries:
                if kind == "page faults" and any(_matches(n, FILE_FAULT_FRAMES) for n in names):
                    return None
                return kind
    return None


# --- perf script output --------------------------------------------------------------------------

_HEADER = re.compile(r"^(?P<comm>\S.*?)\s+(?P<pid>-?\d+)/(?P<tid>-?\d+)\s+(?P<period>\d+)\s+(?P<event>\S+):(?:\s+(?P<rest>.*))?$")
_FRAME = re.compile(r"^\s*(?P<ip>[0-9a-fA-F]+)\s+(?P<sym>.*?)\s+\((?P<dso>[^()]*)\)\s*$")
SCRIPT_FIELDS = "comm,pid,tid,period,event,ip,sym,dso"


def parse_perf_script(lines: Iterable[str]) -> Iterator[Sample]:
    """Samples from `perf script -F comm,pid,tid,period,event,ip,sym,dso` (with or without -g)."""
    current: Sample | None = None
    for line in lines:
        text = line.strip()
        if not text:
            continue
        m = _HEADER.match(text)
        if m:
            if current and current.frames:
                yield current
            current = Sample(m["comm"], int(m["pid"]), int(m["period"]), [])
            f = _FRAME.match(m["rest"] or "")
            if f:
                current.frames.append(_frame(f))
            continue
        f = _FRAME.match(text)
        if f and current is not None:
            current.frames.append(_frame(f))
    if current and current.frames:
        yield current


def _frame(m: re.Match) -> Frame:
    return Frame(int(m["ip"], 16), m["sym"].strip() or "[unknown]", m["dso"].strip() or "[unknown]")


# --- one run's attribution -------------------------------------------------------------------------

@dataclass
class RunProfile:
    status: str
    wall_s: float
    samples: int = 0
    shares: dict[str, float] = field(default_factory=dict)            # CATEGORIES -> fraction
    kernel_mm_kinds: dict[str, float] = field(default_factory=dict)   # page faults, brk, ... -> fraction
    kernel_mm_from_allocator: float | None = None                     # call graphs only
    allocator_symbols: dict[str, float] = field(default_factory=dict)  # "sym [dso]" -> fraction
    unresolved: dict[str, list[float]] = field(default_factory=dict)   # dso -> [its share, fraction unresolved]
    error: str | None = None
    metric: float | None = None        # the workload's own throughput metric, read from this run
    commands: dict[str, float] = field(default_factory=dict)          # process name (comm) -> fraction
    sampled_s: float | None = None     # CPU time the samples stand for (clock events: periods in ns)
    kernel_other_from_allocator: float | None = None                  # call graphs only: lock waits etc.


def attribute(samples: Iterable[Sample], attribution: Attribution, call_graph: bool,
              status: str = "ok", wall_s: float = 0.0, clock_event: bool = False) -> RunProfile:
    """Shares of the sampled CPU time (weighted by period) per category, kind and symbol."""
    total = 0
    count = 0
    cats = dict.fromkeys(CATEGORIES, 0)
    kinds: dict[str, int] = {}
    from_alloc = 0
    other_from_alloc = 0
    syms: dict[str, int] = {}
    by_dso: dict[str, list[int]] = {}
    comms: dict[str, int] = {}
    for s in samples:
        w = s.period or 1
        total += w
        count += 1
        comms[s.comm] = comms.get(s.comm, 0) + w
        cat, kind, entered_from_alloc = attribution.classify(s)
        cats[cat] += w
        if kind:
            kinds[kind] = kinds.get(kind, 0) + w
            from_alloc += w if entered_from_alloc else 0
        elif cat == "kernel_other" and entered_from_alloc:
            other_from_alloc += w
        leaf = s.frames[0]
        if cat == "allocator":
            plt = "@plt" if leaf.sym.endswith("@plt") else ""   # not the program's own malloc
            key = f"{clean_symbol(leaf.sym)}{plt} [{os.path.basename(leaf.dso)}]"
            syms[key] = syms.get(key, 0) + w
        if not leaf.kernel:
            seen = by_dso.setdefault(leaf.dso, [0, 0])
            seen[0] += w
            seen[1] += 0 if leaf.resolved else w
    if not total:
        return RunProfile(status, wall_s, error="perf recorded no samples")
    frac = lambda v: v / total  # noqa: E731
    return RunProfile(
        status=status, wall_s=wall_s, samples=count,
        shares={k: frac(v) for k, v in cats.items()},
        kernel_mm_kinds={k: frac(v) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])},
        kernel_mm_from_allocator=frac(from_alloc) if call_graph else None,
        kernel_other_from_allocator=frac(other_from_alloc) if call_graph else None,
        allocator_symbols={k: frac(v) for k, v in sorted(syms.items(), key=lambda kv: -kv[1])[:20]},
        unresolved={d: [frac(w), bad / w] for d, (w, bad) in by_dso.items() if bad},
        commands={k: frac(v) for k, v in sorted(comms.items(), key=lambda kv: -kv[1])[:10]},
        sampled_s=total / 1e9 if clock_event else None,
    )


def is_clock_event(event: str) -> bool:
    return event.split(":", 1)[0] in CLOCK_EVENTS


# --- the summary of one variant ------------------------------------------------------------------

@dataclass
class ProfileSummary:
    workload: str
    variant: str                  # the variant's label
    variant_idx: int
    library: str | None
    event: str
    frequency_hz: int
    call_graph: bool
    kernel_visible: bool          # False when perf may only sample user space (perf_event_paranoid)
    runs: list[RunProfile] = field(default_factory=list)
    plain: list[dict] = field(default_factory=list)   # unprofiled runs, same variant: {wall_s, METRIC}
    metric: str | None = None         # the workload's metric the throughput overhead is read from
    metric_higher: bool = True
    perf_fixed_s: float | None = None  # perf record's own start and stop, timed on `true`
    workload_idx: int = 0
    notes: list[str] = field(default_factory=list)
    counters: dict | None = None        # perf stat medians (cycles, instructions, cache_misses, ipc)
    instructions: dict | None = None    # callgrind: total, allocator, top

    @property
    def ok_runs(self) -> list[RunProfile]:
        return [r for r in self.runs if r.status == "ok" and r.samples]

    def spread(self, category: str) -> tuple[float, float, float] | None:
        values = [r.shares.get(category, 0.0) for r in self.ok_runs]
        if not values:
            return None
        return statistics.median(values), min(values), max(values)

    @property
    def allocator(self) -> tuple[float, float, float] | None:
        return self.spread("allocator")

    @property
    def kernel_mm(self) -> tuple[float, float, float] | None:
        return self.spread("kernel_mm") if self.kernel_visible else None

    def rest(self) -> tuple[float, float, float] | None:
        values = [1 - r.shares.get("allocator", 0) - (r.shares.get("kernel_mm", 0) if self.kernel_visible else 0)
                  for r in self.ok_runs]
        return (statistics.median(values), min(values), max(values)) if values else None

    def allocator_seconds(self) -> float | None:
        """CPU seconds per run spent in the allocator: its share times the unprofiled runs' CPU time.
        Unlike the share, this compares across variants whose runs take different times."""
        cpu = [p["cpu_s"] for p in self.plain if p.get("cpu_s")]
        share = self.allocator
        return share[0] * statistics.median(cpu) if cpu and share else None

    def mean_of(self, pick: Callable[[RunProfile], dict[str, float]]) -> dict[str, float]:
        runs = self.ok_runs
        out: dict[str, float] = {}
        for r in runs:
            for k, v in pick(r).items():
                out[k] = out.get(k, 0.0) + v / len(runs)
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def top_symbols(self, n: int = 5) -> list[tuple[str, float]]:
        return list(self.mean_of(lambda r: r.allocator_symbols).items())[:n]

    def kernel_kinds(self) -> dict[str, float]:
        return self.mean_of(lambda r: r.kernel_mm_kinds)

    def coverage(self) -> float | None:
        """CPU time the samples stand for over the CPU time of the unprofiled runs (medians)."""
        sampled = [r.sampled_s for r in self.ok_runs if r.sampled_s]
        cpu = [p["cpu_s"] for p in self.plain if p.get("cpu_s")]
        return statistics.median(sampled) / statistics.median(cpu) if sampled and cpu else None

    def kernel_from_allocator(self) -> float | None:
        values = [r.kernel_mm_from_allocator for r in self.ok_runs if r.kernel_mm_from_allocator is not None]
        return statistics.median(values) if values else None

    def kernel_other_from_allocator(self) -> float | None:
        values = [r.kernel_other_from_allocator for r in self.ok_runs
                  if r.kernel_other_from_allocator is not None]
        return statistics.median(values) if values else None

    def allocator_with_kernel(self) -> tuple[float, float, float] | None:
        """The allocator's code plus every kernel sample entered from it (memory work, lock waits):
        all the CPU the allocator is answerable for. Call graphs only."""
        values = [r.shares.get("allocator", 0) + r.kernel_mm_from_allocator + (r.kernel_other_from_allocator or 0)
                  for r in self.ok_runs if r.kernel_mm_from_allocator is not None]
        return (statistics.median(values), min(values), max(values)) if values else None

    def _medians(self, key: str) -> tuple[float, float] | None:
        prof = [v for v in (getattr(r, key) if key == "metric" else r.wall_s for r in self.ok_runs) if v]
        plain = [v for v in (p.get(self.metric if key == "metric" else "wall_s") for p in self.plain) if v]
        return (statistics.median(prof), statistics.median(plain)) if prof and plain else None

    def wall_overhead(self) -> float | None:
        """Profiled wall time over unprofiled wall time, minus one (medians, same variant)."""
        m = self._medians("wall_s")
        return m[0] / m[1] - 1 if m else None

    def sampling_overhead(self) -> float | None:
        """The same less perf's own start/stop, which does not slow the program down."""
        m = self._medians("wall_s")
        if not m or self.perf_fixed_s is None:
            return None
        return (m[0] - self.perf_fixed_s) / m[1] - 1

    def throughput_overhead(self) -> float | None:
        """How much slower the program itself said it ran while sampled (its own metric)."""
        m = self._medians("metric") if self.metric else None
        if not m:
            return None
        prof, plain = m
        return plain / prof - 1 if self.metric_higher else prof / plain - 1

    def overhead(self) -> float | None:
        """The best measure of the sampling's cost to the program that this profile has."""
        for o in (self.throughput_overhead(), self.sampling_overhead(), self.wall_overhead()):
            if o is not None:
                return o
        return None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "ProfileSummary":
        data = dict(data)
        data["runs"] = [RunProfile(**r) for r in data.get("runs", [])]
        return cls(**data)


# --- can perf sample here? -------------------------------------------------------------------------

@dataclass(frozen=True)
class PerfAccess:
    perf: str
    kernel_visible: bool
    note: str | None = None


def read_int(path: str = PARANOID_FILE) -> int | None:
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


def privileged() -> bool:
    """Root, or CAP_PERFMON / CAP_SYS_ADMIN: perf_event_paranoid does not apply."""
    if os.geteuid() == 0:
        return True
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                caps = int(line.split()[1], 16)
                return bool(caps & (1 << CAP_PERFMON) or caps & (1 << CAP_SYS_ADMIN))
    except (OSError, ValueError, IndexError):
        pass
    return False


def perf_access(paranoid: int | None = None, is_privileged: bool | None = None,
                which: Callable[[str], str | None] = shutil.which) -> PerfAccess:
    """Is perf installed and allowed to sample our own processes? alloclab changes no sysctl."""
    perf = which("perf")
    if not perf:
        raise AlloclabError(
            f"perf is not installed, so alloclab cannot sample where the CPU goes. Install it with "
            f"`{PERF_INSTALL}` (as root; on Ubuntu: apt-get install -y linux-tools-common "
            f"linux-tools-$(uname -r)), then run the command again.")
    paranoid = read_int(PARANOID_FILE) if paranoid is None else paranoid
    is_privileged = privileged() if is_privileged is None else is_privileged
    if is_privileged or paranoid is None or paranoid <= 1:
        return PerfAccess(perf, True)
    if paranoid == 2:
        return PerfAccess(perf, False, (
            "kernel.perf_event_paranoid is 2, which lets perf sample user space only: the kernel "
            "memory-management share (page faults, brk, mmap, munmap, madvise) is not measured. To "
            "include it, run as root or lower it yourself with `sysctl -w kernel.perf_event_paranoid=1` "
            "(as root); alloclab will not change it."))
    raise AlloclabError(
        f"kernel.perf_event_paranoid is {paranoid}, which forbids perf for unprivileged users, so "
        f"alloclab cannot profile. Run as root, or lower it yourself with `sysctl -w "
        f"kernel.perf_event_paranoid=1` (as root; 2 allows user-space samples only). alloclab will "
        f"not change this setting.")


def sampling_event(access: PerfAccess) -> str:
    """cycles where the machine has hardware counters, cpu-clock (a timer) where it has not."""
    event = "cycles" if machine.perf_counters()[0] else "cpu-clock"
    return event if access.kernel_visible else f"{event}:u"


def check_frequency(frequency: int) -> None:
    limit = read_int("/proc/sys/kernel/perf_event_max_sample_rate")
    if frequency < 1 or (limit and frequency > limit):
        raise AlloclabError(
            f"--frequency {frequency} is out of range: give 1 to {limit or 'the kernel limit'} samples per "
            f"second (kernel.perf_event_max_sample_rate); {DEFAULT_FREQUENCY} is the default.")


# --- running --------------------------------------------------------------------------------------

def wrap_perf_record(argv: list[str], env: dict[str, str], variant_env: dict[str, str], out: Path, *,
                     event: str, frequency: int, call_graph: bool,
                     perf: str = "perf") -> tuple[list[str], dict[str, str]]:
    """perf runs without the variant's settings; `env` hands them to the program alone."""
    clean = {k: v for k, v in env.items() if k not in variant_env}
    settings = [f"{k}={v}" for k, v in variant_env.items()]
    wrapped = [*perf_record_prefix(out, event=event, frequency=frequency, call_graph=call_graph, perf=perf),
               "env", *settings, *argv]
    return wrapped, clean


def perf_record_prefix(out: Path, *, event: str, frequency: int, call_graph: bool, perf: str = "perf") -> list[str]:
    """`perf record ... -o OUT --`, to put in front of the program."""
    graph = ["--call-graph", CALL_GRAPH] if call_graph else []
    # No BPF program symbols (reading them costs perf about a second per run) and no build-id
    # cache: the data is read back at once, and ~/.debug is not filled with copies of binaries.
    return [perf, "record", "-q", "--no-bpf-event", "--no-buildid", "--no-buildid-cache", "-e", event,
            "-F", str(frequency), *graph, "-o", str(out), "--"]


def perf_script(perf: str, data: Path, timeout_s: float = 600) -> list[str]:
    # perf refuses a file that neither we nor root own unless forced: a server run as another
    # user (run_as) writes its perf.data as that user.
    force = ["--force"] if data.stat().st_uid not in (os.geteuid(), 0) else []
    try:
        proc = subprocess.run([perf, "script", *force, "--no-inline", "-F", SCRIPT_FIELDS, "-i", str(data)],
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise AlloclabError(f"`perf script` took over {timeout_s:g} s on {data}; profile a shorter run or "
                            f"lower --frequency.") from None
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-3:]
        raise AlloclabError(f"`perf script` could not read {data}: {' / '.join(tail) or proc.returncode}. "
                            f"Check that perf matches the running kernel ({PERF_INSTALL}).")
    return proc.stdout.splitlines()


def command_of(workload: Workload) -> tuple[list[str], str | None]:
    argv = getattr(workload.executor, "argv", None)
    if argv is None:
        raise AlloclabError(
            f"Workload '{workload.name}' is not a plain command (its executor is "
            f"{type(workload.executor).__name__}); profiling supports commands, built-in workloads and "
            f"experiment files with a [service] (the server is profiled).")
    return list(argv), getattr(workload.executor, "cwd", None)


def is_service(workload: Workload) -> bool:
    return isinstance(workload.executor, ServiceExecutor)


def is_command_file(workload: Workload) -> bool:
    """A [[command]] of an experiment file: its argv exists once the file's setup has run."""
    return isinstance(workload.executor, CommandModeExecutor)


def check_profilable(workload: Workload) -> None:
    """Refuse, before any run, a workload that profiling cannot run."""
    if is_command_file(workload):
        if workload.executor.session.identity.wrapper:
            raise AlloclabError(f"Workload '{workload.name}' runs as {workload.executor.session.identity.user} "
                                f"(run_as): profiling a [[command]] as another user is not supported. Profile "
                                f"it without run_as, or as a [service].")
        return
    if not is_service(workload):
        command_of(workload)


def _perf_failed(result: RunResult, data: Path) -> bool:
    """perf itself failed (not the program, not a timeout): it exited with an error and no data."""
    return result.status == "failed" and (not data.exists() or data.stat().st_size == 0)


def _run_error(result: RunResult) -> str:
    lines = [ln for ln in result.stderr.strip().splitlines() if ln.strip()]
    return " / ".join(lines[-3:]) if lines else (result.error or result.status)


@dataclass
class _Cell:
    variant: Variant
    summary: ProfileSummary


def profile_workload(workload: Workload, variants: list[Variant], runs: int = 3,
                     frequency: int = DEFAULT_FREQUENCY, call_graph: bool = False, *,
                     baseline: dict[str, list[dict]] | None = None, timeout_s: float | None = None,
                     workload_idx: int = 0, seed: int = 1, base_env: dict[str, str] | None = None,
                     advance: Callable[[str], None] = lambda text: None,
                     access: PerfAccess | None = None) -> list[ProfileSummary]:
    """Profile `runs` runs of the workload under each variant, in shuffled interleaved blocks.

    baseline (label -> metrics of unprofiled runs, e.g. an experiment's measured runs, each with
    wall_s and the workload's metrics) is what the sampling overhead is measured against;
    without it an unprofiled run follows each profiled one. Raises Interrupted (with
    .summaries, the runs so far) on Ctrl-C.
    """
    if runs < 1:
        raise AlloclabError(f"--runs must be at least 1 for profiling (got {runs}).")
    check_frequency(frequency)
    access = access or perf_access()
    service = is_service(workload)
    if service and workload.executor.session.identity.uid not in (None, 0):
        # perf runs in front of the server as run_as, with that user's rights, not ours: with
        # perf_event_paranoid 2 it would silently drop kernel samples.
        access = perf_access(is_privileged=False)
    event = sampling_event(access)
    check_profilable(workload)
    command_file = is_command_file(workload)
    base_env = dict(os.environ) if base_env is None else base_env
    if command_file:
        # Setup (e.g. a private Ceph cluster) runs first; the command is then what it would be in a run.
        session = workload.executor.session
        session.prepare()
        argv, cwd = workload.executor.argv(), str(session.workdir)
        base_env = base_env | session.file_env
    else:
        argv, cwd = (None, None) if service else command_of(workload)
    workload.program()
    metric = next((m for m in workload.metrics if m.primary), workload.metrics[0] if workload.metrics else None)
    cells = []
    for i, v in enumerate(variants):
        s = ProfileSummary(workload=workload.name, variant=v.label, variant_idx=i,
                           library=str(v.library) if v.library else None, event=event,
                           frequency_hz=frequency, call_graph=call_graph, kernel_visible=access.kernel_visible,
                           workload_idx=workload_idx, metric=metric.name if metric else None,
                           metric_higher=metric.higher_is_better if metric else True)
        if access.note:
            s.notes.append(access.note)
        if baseline is not None:
            s.plain = [dict(b) for b in baseline.get(v.label, [])]
        cells.append(_Cell(v, s))
    jobs = plan.schedule(len(cells), runs, 0, seed, verify=False)
    root = Path(tempfile.mkdtemp(prefix="alloclab-profile-"))
    try:
        fixed = None if service else _perf_fixed_cost(access, event, frequency, call_graph, root / "fixed", base_env)
        for c in cells:
            # A client's wall time does not include perf starting and stopping with the server.
            c.summary.perf_fixed_s = None if service else fixed
        if service:
            workload.executor.prepare()
        for n, job in enumerate(jobs):
            cell = cells[job.cell]
            advance(f"profile {workload.name[:24]} | {cell.variant.label} ({job.block + 1}/{runs})")
            tmp = root / f"run-{n}"
            if service:
                _profile_service_run(cell, workload, metric, tmp, access, event, frequency, call_graph,
                                     timeout_s, base_env, plain=baseline is None)
                shutil.rmtree(tmp, ignore_errors=True)
                continue
            _profile_one(cell, argv, cwd, workload, metric, tmp, access, event, frequency, call_graph,
                         timeout_s, base_env)
            if baseline is None:
                plain = run_once(argv, cell.variant.apply(base_env) | workload.env, tmp / "plain",
                                 timeout_s=timeout_s, cwd=cwd)
                if plain.status == "ok":
                    values = {"wall_s": plain.wall_s, "cpu_s": plain.user_s + plain.sys_s}
                    if metric:
                        values[metric.name] = extract(metric, plain.stdout + "\n" + plain.stderr)
                    cell.summary.plain.append(values)
            shutil.rmtree(tmp, ignore_errors=True)
    except (KeyboardInterrupt, RunInterrupted):
        stop = Interrupted("Interrupted while profiling: every child process was stopped.")
        for c in cells:
            c.summary.notes.append(f"Profiling was interrupted (Ctrl-C) after {len(c.summary.runs)} profiled "
                                   f"run(s) of {c.variant.label}.")
        stop.summaries = [_finish(c.summary) for c in cells]
        raise stop from None
    finally:
        if service or command_file:
            workload.executor.cleanup()
        shutil.rmtree(root, ignore_errors=True)
    return [_finish(c.summary) for c in cells]


def _perf_fixed_cost(access: PerfAccess, event: str, frequency: int, call_graph: bool, tmp: Path,
                     base_env: dict, repeats: int = 3) -> float | None:
    """perf record's own start and stop, timed around `true`: wall time that is not overhead
    on the program, and that dominates the wall time of short runs."""
    walls = []
    for i in range(repeats):
        wrapped, env = wrap_perf_record(["true"], base_env, {}, tmp / f"true-{i}.data", event=event,
                                        frequency=frequency, call_graph=call_graph, perf=access.perf)
        r = run_once(wrapped, env, tmp / str(i))
        if r.status == "ok":
            walls.append(r.wall_s)
    return statistics.median(walls) if walls else None


def _profile_one(cell: _Cell, argv, cwd, workload: Workload, metric, tmp: Path, access: PerfAccess, event: str,
                 frequency: int, call_graph: bool, timeout_s: float | None, base_env: dict) -> None:
    v = cell.variant
    data = tmp / "perf.data"
    env = v.apply(base_env) | workload.env
    wrapped, clean = wrap_perf_record(argv, env, v.env, data, event=event, frequency=frequency,
                                      call_graph=call_graph, perf=access.perf)
    result = run_once(wrapped, clean, tmp, timeout_s=timeout_s, cwd=cwd)
    if result.status == "error" or _perf_failed(result, data):
        raise AlloclabError(
            f"perf record failed under {v.label}: {_run_error(result)}. If perf says it is not allowed, "
            f"see kernel.perf_event_paranoid (alloclab will not change it); if it is missing, "
            f"`{PERF_INSTALL}`.")
    _record_profile(cell, result, data, access, event, call_graph, metric)


def _record_profile(cell: _Cell, result: RunResult, data: Path | None, access: PerfAccess, event: str,
                    call_graph: bool, metric) -> None:
    """The run's attributed samples, or its failed status, into the variant's summary."""
    if result.status != "ok":
        cell.summary.runs.append(RunProfile(result.status, result.wall_s, error=result.error))
        return
    v = cell.variant
    samples = parse_perf_script(perf_script(access.perf, data))
    prof = attribute(samples, Attribution(str(v.library) if v.library else None), call_graph,
                     result.status, result.wall_s, clock_event=is_clock_event(event))
    if metric:
        prof.metric = extract(metric, result.stdout + "\n" + result.stderr)
    cell.summary.runs.append(prof)


def _profile_service_run(cell: _Cell, workload: Workload, metric, tmp: Path, access: PerfAccess, event: str,
                         frequency: int, call_graph: bool, timeout_s: float | None, base_env: dict, *,
                         plain: bool) -> None:
    """One service run with perf record in front of the server: the samples are the server's
    process tree (perf follows its children), never the load client's."""
    v = cell.variant
    env = v.apply(base_env) | workload.env
    written: list[Path] = []

    def wrap(server_dir: Path) -> list[str]:
        # The server's own directory: run_as may write there, where it may not write to ours.
        written.append(server_dir / "perf.data")
        return perf_record_prefix(written[-1], event=event, frequency=frequency, call_graph=call_graph,
                                  perf=access.perf)

    tmp.mkdir(parents=True, exist_ok=True)
    result = workload.executor.execute(env, v.env, tmp, timeout_s=timeout_s, mapped_marker=None, perf_file=None,
                                       server_wrap=wrap)
    data = written[-1] if written else None
    no_data = data is None or not data.exists() or data.stat().st_size == 0
    if result.status == "error" or (no_data and result.status != "timeout"):
        # The same server ran in the timed runs: with no perf data, perf itself is what failed.
        raise AlloclabError(
            f"perf record failed in front of the server under {v.label}: {result.error or result.status}"
            f" ({_run_error(result)}). If perf says it is not allowed, see kernel.perf_event_paranoid "
            f"(alloclab will not change it); if it is missing, `{PERF_INSTALL}`.")
    _record_profile(cell, result, data, access, event, call_graph, metric)
    if data is not None:
        data.unlink(missing_ok=True)  # can be large; the server's directory lives until the session ends
    if plain:
        (tmp / "plain").mkdir()
        r = workload.executor.execute(env, v.env, tmp / "plain", timeout_s=timeout_s, mapped_marker=None,
                                      perf_file=None)
        if r.status == "ok":
            values = {"wall_s": r.wall_s, "cpu_s": r.user_s + r.sys_s}
            if metric:
                values[metric.name] = extract(metric, r.stdout + "\n" + r.stderr)
            cell.summary.plain.append(values)


def _finish(s: ProfileSummary) -> ProfileSummary:
    """Notes that depend on all runs: failures, few samples, missing symbols."""
    failed = [r for r in s.runs if r.status != "ok" or not r.samples]
    if failed:
        s.notes.append(f"{len(failed)} of {len(s.runs)} profiled runs under {s.variant} gave no profile "
                       f"({failed[0].error or failed[0].status}).")
    ok = s.ok_runs
    if ok and min(r.samples for r in ok) < FEW_SAMPLES:
        s.notes.append(f"Fewer than {FEW_SAMPLES} samples in a run: shares move by whole percents from noise. "
                       f"Run the program longer or raise --frequency.")
    cover = s.coverage()
    if cover is not None and cover < LOW_COVERAGE:
        s.notes.append(
            f"Under {s.variant} the samples stand for {cover:.0%} of the CPU time the program uses unprofiled: "
            f"perf missed part of it (threads that live shorter than the sampling period, "
            f"{1e3 / s.frequency_hz:.1f} ms, are barely sampled), so the shares describe the longer-lived "
            f"threads. Raise --frequency.")
    worst: dict[str, list[float]] = {}
    for r in ok:
        for dso, (share, bad) in r.unresolved.items():
            if bad >= UNRESOLVED_NOTE and share >= 0.01:
                worst[dso] = max(worst.get(dso, [0, 0]), [share, bad])
    for dso, (share, bad) in sorted(worst.items()):
        name = os.path.basename(dso)
        if s.library and _realpath(dso) == _realpath(s.library):
            what = "all of it is still allocator time, but its top symbols show as [unknown]"
        elif _is_glibc(dso):
            what = ("glibc's malloc cannot be told from the rest of libc there, so the allocator share "
                    "is a lower bound")
        else:
            what = "its samples are attributed by shared object only"
        s.notes.append(f"{name} has no symbols for {bad:.0%} of its samples ({share:.1%} of CPU): {what}. "
                       f"Install its debug symbols or use an unstripped build to see functions.")
    return s


# --- storing --------------------------------------------------------------------------------------

PROFILE_SCHEMA = """
CREATE TABLE IF NOT EXISTS profiles (
    experiment_id INTEGER NOT NULL, workload_idx INTEGER NOT NULL, variant_idx INTEGER NOT NULL,
    summary TEXT NOT NULL, PRIMARY KEY (experiment_id, workload_idx, variant_idx));
"""


def store_profiles(store, exp_id: int, summaries: list[ProfileSummary]) -> None:
    store.db.executescript(PROFILE_SCHEMA)
    store.db.executemany("INSERT OR REPLACE INTO profiles VALUES (?,?,?,?)",
                         [(exp_id, s.workload_idx, s.variant_idx, json.dumps(s.to_dict())) for s in summaries])
    store.db.commit()


def load_profiles(store, exp_id: int) -> list[ProfileSummary]:
    store.db.executescript(PROFILE_SCHEMA)
    rows = store.db.execute("SELECT summary FROM profiles WHERE experiment_id=? ORDER BY workload_idx, variant_idx",
                            (exp_id,)).fetchall()
    return [ProfileSummary.from_dict(json.loads(r[0])) for r in rows]


# --- what the experiment's timed runs add: counters, RSS over time ------------------------------------

def counters_of(experiment, workload_idx: int, variant_idx: int) -> dict | None:
    """Medians of the perf stat counters of an experiment's measured runs, with IPC; None without."""
    runs = [r for r in experiment.cell_runs(workload_idx, variant_idx) if r["status"] == "ok"]
    values: dict[str, list[float]] = {}
    for r in runs:
        m = r["metrics"]
        for k in ("cycles", "instructions", "cache_misses"):
            if m.get(k):
                values.setdefault(k, []).append(m[k])
        if m.get("cycles") and m.get("instructions"):
            values.setdefault("ipc", []).append(m["instructions"] / m["cycles"])
    return {k: statistics.median(v) for k, v in values.items()} or None


def attach_counters(summaries: list[ProfileSummary], experiment) -> None:
    for s in summaries:
        s.counters = counters_of(experiment, s.workload_idx, s.variant_idx)


def rss_over_time(experiment, workload_idx: int = 0) -> dict[str, list[list[tuple[float, int]]]]:
    """Variant label -> one RSS series per measured run: [(seconds since start, KiB), ...]."""
    out: dict[str, list[list[tuple[float, int]]]] = {}
    for vi, v in enumerate(experiment.variants):
        series = []
        for r in experiment.cell_runs(workload_idx, vi):
            raw = r.get("rss_series")
            points = json.loads(raw) if isinstance(raw, str) else (raw or [])
            series.append([(float(t), int(kb)) for t, kb in points])
        out[v["label"]] = series
    return out


def profile_experiment(store, exp_id: int, workloads: list[Workload], variants: list[Variant], *,
                       runs: int = 3, frequency: int = DEFAULT_FREQUENCY, call_graph: bool = False,
                       timeout_s: float | None = None, advance: Callable[[str], None] = lambda text: None,
                       ) -> list[ProfileSummary]:
    """Profile every workload of a stored experiment and store the summaries with it.

    The experiment's measured runs are the unprofiled baseline for the overhead, and give the
    hardware counters where the machine has them. This is what `--profile` on compare/suite/run
    calls after the experiment.
    """
    exp = store.load(exp_id)
    labels = [v["label"] for v in exp.variants]
    if labels != [v.label for v in variants]:
        raise AlloclabError(f"The variants {[v.label for v in variants]} are not those of experiment {exp_id} "
                            f"({labels}); profile with the same -a options.")
    access = perf_access()
    summaries: list[ProfileSummary] = []
    try:
        for wi, w in enumerate(workloads):
            plain = {v.label: [r["metrics"] for r in exp.cell_runs(wi, vi) if r["status"] == "ok"]
                     for vi, v in enumerate(variants)}
            summaries += profile_workload(w, variants, runs, frequency, call_graph, baseline=plain,
                                          timeout_s=timeout_s, workload_idx=wi, advance=advance, access=access)
    except Interrupted as stop:
        partial = summaries + getattr(stop, "summaries", [])
        attach_counters(partial, exp)
        store_profiles(store, exp_id, partial)
        raise Interrupted(f"Interrupted while profiling: every child process was stopped; the experiment "
                          f"and the profiles so far are kept in {store.path} as experiment {exp_id}.") from None
    attach_counters(summaries, exp)
    store_profiles(store, exp_id, summaries)
    return summaries


# --- the headline ---------------------------------------------------------------------------------------

def pct(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f}%"


def spread_text(sp: tuple[float, float, float] | None) -> str:
    if sp is None:
        return "-"
    med, lo, hi = sp
    return f"{pct(med)} ({100 * lo:.1f}-{100 * hi:.1f})"


def headline(summaries: list[ProfileSummary]) -> str:
    """`glibc 8.1% (7.6-8.7) -> tcmalloc 1.2% (1.0-1.5)`: the allocator's share of CPU per variant."""
    return " -> ".join(f"{s.variant} {spread_text(s.allocator)}" for s in summaries)
