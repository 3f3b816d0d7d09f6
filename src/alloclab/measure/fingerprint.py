"""The allocation fingerprint: what the program asks of the allocator, and what each allocator holds
beyond it, from one untimed run per cell (workload x variant), beside the verification run and
never mixed into the timed ones.

In that run, launcher/fingerprint.c is preloaded BEFORE the variant's allocator (it counts every
call and forwards it to the next definition) and writes one file per process; the memory system
calls of the whole tree are counted at the same time (measure/fingerprint_syscalls.py: perf record on
the syscall tracepoints, with the bytes each call moved, or `strace -f -c` where those are not
available). `summary_of` merges the processes' files into one Fingerprint (store/fingerprint_model.py),
stored with the experiment as JSON (store.set_fingerprint) and shown by report/fingerprint.py:

* the demand: allocation calls per second of the run, a power-of-two size histogram (calls and
  bytes), the share at or above 128 KiB (glibc's default mmap and trim thresholds), realloc and
  aligned-allocation counts, the threads that allocate, sampled cross-thread frees and lifetimes;
* live bytes (usable sizes: malloc_usable_size of the allocator, so size-class rounding counts as
  live) beside the anonymous RSS of the same processes, sampled together every 20 ms: the
  allocator's overhead = anonymous RSS - live bytes, at the peak and at the end. Anonymous RSS is
  RSS less file-backed and shared memory; it also holds the program's stacks and the
  interposer's own tables (a few MiB at most), so the overhead is an upper bound.
"""

from __future__ import annotations

import functools
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from alloclab.measure.fingerprint_memory import (  # noqa: F401 (phase_memory: imported from here)
    _merged_series, allocator_figures, before_exit_cleanup, phase_memory, phases_at, sample_times)
from alloclab.measure.fingerprint_books import books_of
from alloclab.measure.inspect.cpus import program_cpus
from alloclab.measure.fingerprint_work import ALLOC_KINDS, ProcessFile, work_of
from alloclab.measure.fingerprint_syscalls import (SYSCALL_FILE, SharedRecorder, forget_probe, parse_syscalls,
    syscall_counter, syscall_wrapper)
from alloclab.catalog.allocators import load_catalog
from alloclab.store.fingerprint_model import Fingerprint, Lifetime, Memory, MemPoint, Sampled, SizeClass
from alloclab.workloads import build as cbuild

FP_DIR_VAR = "ALLOCLAB_FP_DIR"
BIG = 128 * 1024
FREE_KINDS = ("free", "delete")
ALIGNED_KINDS = ("memalign", "posix_memalign", "aligned_alloc", "valloc")
# Lifetime decades from 1 us (see fingerprint.c): short < 1 ms <= medium < 1 s <= long.
SHORT, MEDIUM = range(0, 4), range(4, 7)
# An untimed run is slower than a timed one (the interposer; perf's recorders start and stop): a
# command's --timeout T gives its fingerprint run 4T + 10 s, at most 120 s, and never less than T.
TIMEOUT_FLOOR_S = 120


@functools.cache
def interposer() -> Path:
    """The interposer, compiled on first use and cached by source hash like our other C."""
    return cbuild.build("alloclab-fingerprint", [cbuild.package_file("measure", "launcher", "fingerprint.c"),
                                                 cbuild.package_file("measure", "launcher", "books.c")],
                        flags=["-shared", "-fPIC", "-fexceptions", *load_catalog().c_defines()], libs=["-ldl"])


def preload_env(variant_env: dict[str, str], fp_dir: Path, readable_in: Path | None = None) -> dict[str, str]:
    """The variant's settings with the interposer first in LD_PRELOAD and the output directory.
    `readable_in`: a directory the program's user can read, where a copy of the interposer goes
    (a recipe's run_as user cannot reach alloclab's cache under a private home such as /root)."""
    lib = interposer()
    if readable_in is not None:
        copy = readable_in / lib.name
        if not copy.exists():
            shutil.copyfile(lib, copy)
            copy.chmod(0o755)
        lib = copy
    preload = " ".join([str(lib), *variant_env.get("LD_PRELOAD", "").split()])
    return variant_env | {"LD_PRELOAD": preload, FP_DIR_VAR: str(fp_dir)} | books_env()


@functools.cache
def books_env() -> dict[str, str]:
    """The names the interposer reads through each interface keyed by name (catalog/allocators.toml)."""
    catalog = load_catalog()
    out = {}
    for a in catalog.allocators.values():
        if a.books is not None and a.books.roles:
            out[f"ALLOCLAB_FP_BOOKS_{a.books.interface.upper()}"] = ",".join(a.books.names())
    return out


# --- merging the per-process files -------------------------------------------------------------------

def read_processes(fp_dir: Path) -> list[ProcessFile]:
    out = []
    for f in sorted(fp_dir.glob("fp-*.json")):
        try:
            out.append(ProcessFile.from_dict(json.loads(f.read_text())))
        except (OSError, ValueError, TypeError, AttributeError):
            continue   # a process killed while renaming leaves nothing half-written; skip anything odd
    return out


def class_label(c: int) -> str:
    """Power-of-two class c holds sizes in [2^(c-1), 2^c); class 0 is size 0."""
    if c == 0:
        return "0"
    return f"{_size(1 << (c - 1))}-{_size((1 << c) - 1)}"


def _size(n: int) -> str:
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n}"


def summarize(procs: list[ProcessFile | dict], wall_s: float | None, syscalls: dict[str, int] | None = None,
              syscall_note: str = "", syscall_bytes: dict[str, int] | None = None) -> dict:
    """summary_of's Fingerprint as stored."""
    return summary_of(procs, wall_s, syscalls, syscall_note, syscall_bytes).to_dict()


def summary_of(procs: list[ProcessFile | dict], wall_s: float | None, syscalls: dict[str, int] | None = None,
               syscall_note: str = "", syscall_bytes: dict[str, int] | None = None) -> Fingerprint:
    """One Fingerprint for the whole process tree of a fingerprint run."""
    procs = [ProcessFile.of(p) for p in procs]
    calls = _calls(procs)
    allocs = sum(calls[k] for k in ALLOC_KINDS)
    frees = sum(calls[k] for k in FREE_KINDS)
    nbytes, big_calls, big_bytes = (sum(p.bytes for p in procs), sum(p.big_calls for p in procs),
                                    sum(p.big_bytes for p in procs))
    samp = _sampled(procs)
    known = samp.frees - samp.cross_unknown
    series6 = _merged_series(procs)
    series = [MemPoint(*pt[:4]) for pt in series6]
    starts = [p.start_ns + p.series[0][0] * 1_000_000 for p in procs if p.series]
    out = Fingerprint(
        processes=len(procs),
        process_list=[{"pid": p.pid, "ppid": p.ppid, "cmdline": p.cmdline[:80], "allocs": p.alloc_calls,
                       "final": bool(p.final), "live_kb": max(p.live, 0) // 1024, "anon_kb": p.anon_kb}
                      for p in procs],
        calls=calls, allocs=allocs, frees=frees, wall_s=wall_s,
        calls_per_s=(allocs + frees) / wall_s if wall_s else None,
        allocs_per_s=allocs / wall_s if wall_s else None,
        bytes=nbytes, usable_bytes=sum(p.usable_bytes for p in procs),
        hist=_hist(procs), big_threshold=BIG, big_calls=big_calls, big_bytes=big_bytes,
        big_call_share=big_calls / allocs if allocs else None,
        big_byte_share=big_bytes / nbytes if nbytes else None,
        realloc=calls["realloc"],
        aligned=sum(calls[k] for k in ALIGNED_KINDS),
        threads=sum(p.threads for p in procs),
        **dict(zip(("cpus", "cpus_how"), program_cpus([p.cpus_allowed for p in procs]))),
        sample_every=max((p.sample_every for p in procs), default=0),
        sampled=samp,
        cross_thread_share=samp.cross_thread / known if known > 0 else None,
        lifetime=_lifetime(procs),
        live_is="usable bytes (malloc_usable_size of the allocator in use)",
        series=series,
        # CLOCK_MONOTONIC at the series' time 0 (time.perf_counter's clock on Linux).
        series_t0_monotonic_s=min(starts) / 1e9 if starts else None,
        memory=_memory(series, procs) if series else None,
        syscalls=syscalls, syscall_bytes=syscall_bytes, syscalls_how=syscall_note,
    )
    sources = sorted({p.allocator_stats.source for p in procs if p.allocator_stats.source != "none"})
    if sources and any(pt[4] is not None or pt[5] is not None for pt in series6):
        out.allocator = allocator_figures(series6, sources, out.memory)
    return out


def tree_books(fp: Fingerprint, procs: list[ProcessFile]):
    """The allocator's books of the tree, split at the peak of anonymous RSS, the end and each phase."""
    peak = max(fp.series, key=lambda pt: pt.anon_kb).t_s if fp.series else None
    t0 = int(fp.series_t0_monotonic_s * 1e9) if fp.series_t0_monotonic_s is not None else None
    return books_of(procs, t0, peak, [(ph.name, ph.t_end) for ph in fp.phases if ph.t_end is not None])


def _calls(procs: list[ProcessFile]) -> dict[str, int]:
    """The processes' calls added up, by kind (every kind named, at 0 where none was made)."""
    calls = {k: 0 for k in (*ALLOC_KINDS, *FREE_KINDS, "free_null", "failed")}
    for p in procs:
        for k, v in p.calls.items():
            calls[k] = calls.get(k, 0) + v
    return calls


def _hist(procs: list[ProcessFile]) -> list[SizeClass]:
    """The processes' size histograms added up."""
    hist: dict[int, list[int]] = {}
    for c, n, b in (row for p in procs for row in p.hist):
        hist[c] = [a + d for a, d in zip(hist.get(c, [0, 0]), (n, b))]
    return [SizeClass(c, class_label(c), n, b) for c, (n, b) in sorted(hist.items())]


def _sampled(procs: list[ProcessFile]) -> Sampled:
    ss = [p.sampled for p in procs]
    return Sampled(allocs=sum(s.allocs for s in ss), frees=sum(s.frees for s in ss),
                   cross_thread=sum(s.cross_thread for s in ss), cross_unknown=sum(s.cross_unknown for s in ss),
                   dropped=sum(s.dropped for s in ss))


def _lifetime(procs: list[ProcessFile]) -> Lifetime:
    """The sampled blocks' lifetimes (freed, and still live at exit) by decade from 1 us, summed."""
    life, still = [0] * 9, [0] * 9
    for p in procs:
        life = [a + b for a, b in zip(life, p.sampled.lifetime_decades_from_1us)]
        still = [a + b for a, b in zip(still, p.sampled.still_live_decades_from_1us)]
    short = sum(life[i] for i in SHORT)
    medium = sum(life[i] for i in MEDIUM)
    total = sum(life) + sum(still)

    def share(n: int) -> float | None:
        return n / total if total else None

    return Lifetime(sampled=total, short_lt_1ms=share(short), medium_1ms_1s=share(medium),
                    long_ge_1s=share(sum(life) - short - medium), live_at_exit=share(sum(still)),
                    freed_decades_from_1us=life, live_at_exit_decades_from_1us=still)


def _memory(series: list[MemPoint], procs: list[ProcessFile]) -> Memory:
    """Overhead where the program needs the most (the first reading of its largest live bytes), and
    at the end of the run."""
    peak = max(series, key=lambda s: s.live_kb)
    end = series[-1]
    # Each process also looks at its live bytes every 1024 allocations of a thread: a short
    # program's peak falls between two 20 ms samples.
    fine = max((p.peak_live // 1024 for p in procs), default=0)
    return Memory(peak_live_kb=max(peak.live_kb, fine), anon_at_peak_live_kb=peak.anon_kb,
                  overhead_at_peak_kb=peak.anon_kb - peak.live_kb,
                  peak_anon_kb=max(s.anon_kb for s in series), peak_rss_kb=max(s.rss_kb for s in series),
                  end_anon_kb=end.anon_kb, end_live_kb=end.live_kb, overhead_at_end_kb=end.anon_kb - end.live_kb,
                  end_t_s=end.t_s)


# --- the untimed runs --------------------------------------------------------------------------------

def run_all(exp, root: Path) -> None:
    """Untimed, before the first block of a runner.Runner: one fingerprint run per cell, stored.
    A command's runs share one recorder of their system calls (SharedRecorder), so their counts
    are stored once the last has run (or the runs stopped); a run that the shared recorder's
    launcher failed runs again with a recorder of its own, as do the runs after it."""
    from alloclab.measure import verify
    from alloclab.measure.executors import CommandExecutor

    recorder = None
    if syscall_counter()[0] == "perf" and any(isinstance(w.executor, CommandExecutor) for w in exp.workloads):
        recorder = SharedRecorder.start(root / "fingerprint-syscalls.data", root / "fingerprint-probe")
        if recorder is None:
            forget_probe()   # perf said yes to the probe kept, and no now
    waiting: list[tuple[object, _Ran]] = []   # (cell, its run) whose calls the shared recording holds
    try:
        for c in exp.cells:
            w = exp.workloads[c.workload_idx]
            # The variant as the cell runs it: a program linked against another allocator gets the
            # forwarding preload under "glibc" (measure/forward.py); without it, redis-server's
            # "glibc" fingerprint ran its linked jemalloc.
            v = exp._variant(c.workload_idx, c.variant_idx)
            exp.progress.note(f"allocation fingerprint (untimed run): {w.name[:40]} | {v.label}")
            env, _ = exp._cell_env(c.workload_idx, c.variant_idx)
            args = (w.executor, env, v.env, root / f"fingerprint-{c.workload_idx}-{c.variant_idx}")
            kw = {"timeout_s": exp.settings.timeout_s, "mapped_marker": verify.mapped_marker(v)}
            shared = recorder if recorder is not None and recorder.alive() and isinstance(w.executor, CommandExecutor) else None
            exp.hooks.prepare(lambda: f"before the fingerprint run of {w.name} | {v.label}")
            ran = _run(*args, **kw, recorder=shared)
            if shared is not None and not shared.alive():
                exp.hooks.prepare(lambda: f"before the fingerprint run of {w.name} | {v.label}, again")
                ran = _run(*args, **kw)   # the launcher (or perf) went away under it
            elif shared is not None and isinstance(ran, _Ran):
                shared.ran(ran.result.pid, (c.workload_idx, c.variant_idx))
                waiting.append((c, ran))
                continue
            exp.store.set_fingerprint(exp.exp_id, c.workload_idx, c.variant_idx,
                                      ran if isinstance(ran, dict) else _summary(ran, _own_counts(ran)))
    finally:
        if recorder is not None:
            recorder.stop()
            counts = recorder.parsed() if waiting else {}
            for c, ran in waiting:
                try:
                    data = _summary(ran, counts.get((c.workload_idx, c.variant_idx)))
                except Exception as exc:   # noqa: BLE001 - one run's summary must not lose the others'
                    data = {"error": f"the fingerprint could not be summarized: {exc}"}
                exp.store.set_fingerprint(exp.exp_id, c.workload_idx, c.variant_idx, data)


def fingerprint_timeout(timeout_s: float | None) -> float | None:
    """The limit of a command's fingerprint run under --timeout `timeout_s` (None: none)."""
    return max(timeout_s, min(TIMEOUT_FLOOR_S, 4 * timeout_s + 10)) if timeout_s else None


def _execute(executor, env: dict[str, str], fp_env: dict[str, str], workdir: Path, timeout_s: float | None,
             mapped_marker: str | None, wrapper: list[str] | None, recorder: SharedRecorder | None = None):
    """The untimed run itself, with the interposer (and the system-call counter where it can wrap
    the program, or the shared recorder's launcher starting it): (the RunResult, whether the
    counter ran)."""
    from alloclab.measure.executors import CommandExecutor
    from alloclab.measure.run import run_once

    if isinstance(executor, CommandExecutor):
        # The counter runs without the variant's settings; `env` hands them to the program alone.
        clean = {k: v for k, v in env.items() if k not in fp_env}
        argv = list(executor.argv)
        if wrapper:
            argv = [*wrapper, "env", *[f"{k}={v}" for k, v in fp_env.items()], *argv]
            run_env = clean
        else:
            run_env = clean | fp_env
        timeout = fingerprint_timeout(timeout_s)
        return run_once(argv, run_env, workdir / "run", timeout_s=timeout, cwd=executor.cwd,
                        mapped_marker=mapped_marker, launcher=recorder.launcher if recorder else None), True
    if hasattr(executor, "session") and getattr(executor.session.ef, "service", None):
        return executor.execute(env | fp_env, fp_env, workdir / "run", timeout_s=timeout_s,
                                mapped_marker=mapped_marker, perf_file=None,
                                server_wrap=(lambda d: syscall_wrapper(d / SYSCALL_FILE)) if wrapper else None), True
    return executor.execute(env | fp_env, fp_env, workdir / "run", timeout_s=timeout_s,
                            mapped_marker=mapped_marker, perf_file=None), False


@dataclass
class _Ran:
    """A fingerprint run done, before its system calls are read: what the summary needs."""
    result: object
    procs: list
    tool: str | None
    how: str
    files: tuple[Path, Path]   # where a counter of its own wrote: the interposer's folder, the wrapper's
    load: object


def _run(executor, env: dict[str, str], variant_env: dict[str, str], workdir: Path, *, timeout_s: float | None,
         mapped_marker: str | None, recorder: SharedRecorder | None = None) -> _Ran | dict:
    """One fingerprint run: the run and what its processes wrote, or {"error": ...} if it failed."""
    fp_dir = workdir / "fp"
    fp_dir.mkdir(parents=True, exist_ok=True)
    (workdir / "run").mkdir(exist_ok=True)   # executors write their files there, as in a timed run
    sys_file = workdir / SYSCALL_FILE
    session = getattr(executor, "session", None)
    run_as = bool(session is not None and getattr(session.identity, "wrapper", None))
    fp_env = preload_env(variant_env, fp_dir, session.workdir if run_as else None)
    wrapper = None if recorder is not None else syscall_wrapper(sys_file)
    tool, how = syscall_counter()
    try:
        result, counted = _execute(executor, env, fp_env, workdir, timeout_s, mapped_marker, wrapper, recorder)
    except Exception as exc:   # noqa: BLE001 - the fingerprint must never stop an experiment
        return {"error": f"the fingerprint run could not run: {exc}"}
    if not counted:
        tool, how = None, "not counted for this kind of workload (a command of an experiment file)"
    procs = read_processes(fp_dir)
    if not procs:
        return {"error": f"the fingerprint run wrote nothing ({result.status}"
                         f"{': ' + result.error if result.error else ''}); the program may be static, setuid, "
                         f"or clear its environment (or died before its first write)",
                **_failure(result)}
    return _Ran(result, procs, tool, how, (fp_dir / SYSCALL_FILE, sys_file), getattr(executor, "load", None))


def _own_counts(ran: _Ran):
    """The counts of a run that had a counter of its own."""
    if ran.tool is None:
        return None
    return parse_syscalls(ran.files[0]) or parse_syscalls(ran.files[1])


def _summary(ran: _Ran, parsed) -> dict:
    """The run summarized as stored (Fingerprint.to_dict), with its system calls (`parsed`:
    parse_syscalls' counts, bytes and note; None where there are none)."""
    syscalls = moved = None
    how = ran.how
    if ran.tool is not None:
        if parsed is None:
            how = f"{how}: it wrote no counts"
        else:
            syscalls, moved, note = parsed
            how = f"{how}; {note}" if note else how
    result = ran.result
    out = summary_of(ran.procs, result.wall_s, syscalls, how, moved)
    out.phases = phases_at(out.series, result.stdout, out.allocator.series if out.allocator else None,
                           out.series_t0_monotonic_s, sample_times(ran.procs, out.series_t0_monotonic_s))
    out.books = tree_books(out, ran.procs)
    before_exit_cleanup(out, ran.procs)
    if ran.load is not None:
        out.per_work = work_of(ran.procs, result.values, ran.load.metrics)
    out.status, out.run_error, out.run_peak_rss_kb = result.status, result.error or None, result.peak_rss_kb
    # Regrowth, where the memory system calls say only what was given back: a thread arena grows
    # with mprotect, unseen, and each page it regrows faults in again.
    out.minflt = result.minflt
    out.run_stderr = _failure(result).get("run_stderr")
    return out.to_dict()


def _failure(result) -> dict:
    """A failed run's status, its error and the tail of its stderr (glibc says there what it found:
    "free(): double free detected in tcache 2"); nothing for a run that went well."""
    if result.status == "ok":
        return {}
    tail = "\n".join((result.stderr or "").strip().splitlines()[-5:])
    return {"status": result.status, "run_error": result.error or None, "run_stderr": tail or None}


def run_cell(executor, env: dict[str, str], variant_env: dict[str, str], workdir: Path, *,
             timeout_s: float | None, mapped_marker: str | None) -> dict:
    """One fingerprint run of a workload under a variant, with a counter of its own, summarized as
    stored (Fingerprint.to_dict); {"error": ...} if it failed."""
    ran = _run(executor, env, variant_env, workdir, timeout_s=timeout_s, mapped_marker=mapped_marker)
    return ran if isinstance(ran, dict) else _summary(ran, _own_counts(ran))
