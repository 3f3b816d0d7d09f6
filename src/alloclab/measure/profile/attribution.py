"""Which CPU time is the allocator's: `perf script` output parsed into samples, and one run's
samples into shares of CPU time per category, kind and symbol (RunProfile).

What counts as allocator code is data (the tables below): the variant's shared object, and
glibc's malloc family inside libc. Kernel samples are memory management when they serve a page
fault, brk, mmap, munmap, madvise, mremap or mprotect: with call graphs that is read from the
kernel stack (the outermost recognised entry point wins), without them from the leaf symbol
alone, which is an approximation (a spinlock taken during a fault is then "kernel other").
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from alloclab.catalog.allocators import BASELINE, load_catalog

# --- what is allocator code ------------------------------------------------------------------

# glibc's malloc lives inside libc, so there it is told apart by symbol: the catalog's code_symbols.
_SYSTEM = load_catalog().get(BASELINE)
GLIBC_DSOS = _SYSTEM.code_libraries
GLIBC_MALLOC_FAMILY = _SYSTEM.code_symbols

# The allocator entry points a program calls (through its PLT): the same under every allocator, and
# the system allocator's release call, which any program may call.
ALLOCATOR_API = frozenset({
    "malloc", "free", "calloc", "realloc", "reallocarray", "memalign", "posix_memalign", "aligned_alloc",
    "valloc", "pvalloc", "malloc_usable_size", _SYSTEM.release_function, "_Znwm", "_Znam", "_ZdlPv", "_ZdaPv", "_ZdlPvm",
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
CLOCK_EVENTS = ("cpu-clock", "task-clock")  # software timers whose sample period is nanoseconds


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
            comm, pid, _tid, period, _event, rest = m.groups()
            current = Sample(comm, int(pid), int(period), [])
            f = _FRAME.match(rest or "")
            if f:
                current.frames.append(_frame(f))
            continue
        f = _FRAME.match(text)
        if f and current is not None:
            current.frames.append(_frame(f))
    if current and current.frames:
        yield current


def _frame(m: re.Match) -> Frame:
    ip, sym, dso = m.groups()
    return Frame(int(ip, 16), sym.strip() or "[unknown]", dso.strip() or "[unknown]")


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
