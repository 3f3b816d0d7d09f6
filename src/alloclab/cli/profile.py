"""`alloclab profile`: where the CPU goes under each allocator, next to the timed comparison.

The command first runs a normal experiment (a few timed, verified runs per variant, with RSS
over time and perf stat counters where the machine has them), then profiles each variant with
perf record and stores the profile summaries with that experiment. The timed runs are the
unprofiled baseline the sampling overhead is measured against.
"""

from __future__ import annotations

import statistics
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.text import Text
from rich.table import Table

from alloclab.cli.app import (DbOption, MetricOption, NoVerifyOption, SeedOption, ShellOption, app, console, err,
    run_experiment, show, timeout_option)
from alloclab.errors import AlloclabError
from alloclab.measure.perfstat import DEFAULT_FREQUENCY
from alloclab.store.db import Store

# profile, callgrind and the runner load psutil, pyelftools and the service machinery: imported in
# the functions that use them, so that registering these commands keeps `alloclab` starting fast.
if TYPE_CHECKING:
    from alloclab.catalog.variants import Variant
    from alloclab.measure.profile import summary
    from alloclab.stats.results import Results

SPARK = " ▁▂▃▄▅▆▇█"
SPARK_WIDTH = 48


@contextmanager
def _bar(total: int):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True) as bar:
        task = bar.add_task("profiling", total=total)
        yield lambda text: bar.update(task, advance=1, description=text[:60])


@app.command("profile", context_settings={"allow_interspersed_args": False})
def profile_command(
    command: list[str] = typer.Argument(..., metavar="-- CMD [ARGS]...", help="The program to run, after --."),
    allocator: list[str] = typer.Option([], "-a", "--allocator", show_default="every installed allocator", help="Variant NAME[:VAR=VALUE,...][@LABEL]; repeat."),
    timed_runs: int = typer.Option(3, "--runs", help="Measured (unprofiled, timed) runs per variant first: the comparison table and the baseline of the sampling overhead."),
    runs: int = typer.Option(3, "--profile-runs", help="Profiled runs per variant (the spread of the shares)."),
    # Before --runs meant measured runs in every command: the measured runs' old name, kept working.
    timed_runs_alias: Optional[int] = typer.Option(None, "--timed-runs", hidden=True),
    frequency: int = typer.Option(DEFAULT_FREQUENCY, "--frequency", "-F", help="Samples per second."),
    call_graph: bool = typer.Option(False, "--call-graph", "-g", help="Record call graphs (DWARF unwinding): tells page faults, brk, mmap, munmap and madvise apart by their kernel entry, and which were entered from allocator code."),
    instructions: bool = typer.Option(False, "--instructions", help="Also run each variant once under valgrind's callgrind: exact instruction counts, total and inside the allocator (threads serialized)."),
    metric: list[str] = MetricOption,
    timeout: Optional[float] = timeout_option(None),
    seed: int = SeedOption,
    shell: bool = ShellOption,
    no_verify: bool = NoVerifyOption,
    db: Path = DbOption,
) -> None:
    """Profile CMD under each allocator variant: the allocator's share of CPU, kernel memory work, overhead."""
    from alloclab.measure import callgrind
    from alloclab.measure.profile import perf, record, summary
    from alloclab.measure.runner import Settings
    from alloclab.catalog.variants import parse_variants
    from alloclab.stats.results import build_results
    from alloclab.measure.targets import CommandTarget, workloads_for

    # Everything that can be refused is checked before the first run.
    access = perf.perf_access()
    perf.check_frequency(frequency)
    timed_runs = timed_runs_alias if timed_runs_alias is not None else timed_runs
    if runs < 1 or timed_runs < 1:
        raise AlloclabError(f"--runs and --profile-runs must be at least 1 (got {timed_runs} and {runs}): the "
                            f"measured runs are the baseline the sampling overhead is measured against.")
    if instructions:
        callgrind.valgrind()
    [workload] = workloads_for(CommandTarget(command, metric=metric, shell=shell)).workloads
    variants = parse_variants(allocator)
    store = Store(db)
    err.print(f"Storing results in {store.path.resolve()}", highlight=False)
    if access.note:
        err.print(Text.assemble(("note:", "yellow"), f" {access.note}"), highlight=False)
    settings = Settings(runs=timed_runs, warmup=1, timeout_s=timeout, seed=seed, verify=not no_verify,
                        kind="profile", title=" ".join(command))
    exp_id = run_experiment(store, [workload], variants, settings)
    exp = store.load(exp_id)
    with _bar(runs * len(variants) + (len(variants) if instructions else 0)) as advance:
        summaries = record.profile_experiment(store, exp, [workload], variants, runs=runs, frequency=frequency,
                                              call_graph=call_graph, timeout_s=timeout, advance=advance)
        if instructions:
            callgrind.attach_instructions(summaries, [workload], variants, timeout_s=timeout, advance=advance)
            summary.store_profiles(store, exp_id, summaries)
    show(build_results(exp), store.path)
    render_profiles(console, summaries)
    render_rss(store, exp_id)


def render_rss(store: Store, exp_id: int, workload_idx: int = 0) -> None:
    """RSS over time of one timed run per variant (the one with the median peak), on one time axis."""
    from alloclab.measure.profile import summary

    series = summary.rss_over_time(store.load(exp_id), workload_idx)
    picked = {}
    for label, runs in series.items():
        runs = sorted((r for r in runs if r), key=lambda r: max(kb for _, kb in r))
        if runs:
            picked[label] = runs[len(runs) // 2]
    if not picked:
        return
    t_end = max(r[-1][0] for r in picked.values()) or 1.0
    top = max(kb for r in picked.values() for _, kb in r) or 1
    t = Table(title=f"RSS over time (one timed run per variant, 0-{t_end:.2f} s, full height = {top / 1024:.0f} MiB)")
    for col in ("variant", "peak MiB", "samples", "RSS"):
        t.add_column(col)
    for label, points in picked.items():
        t.add_row(Text(label), f"{max(kb for _, kb in points) / 1024:.1f}", str(len(points)),
                  sparkline(points, t_end, top))
    console.print(t)


def sparkline(points: list[tuple[float, int]], t_end: float, top: int, width: int = SPARK_WIDTH) -> str:
    """The largest RSS in each time slot, as a bar; blank after the run ended."""
    slots: list[int | None] = [None] * width
    for t, kb in points:
        i = min(width - 1, int(t / t_end * width))
        slots[i] = max(slots[i] or 0, kb)
    last = None
    out = []
    end_slot = min(width - 1, int(points[-1][0] / t_end * width))
    for i, kb in enumerate(slots):
        kb = kb if kb is not None else (last if i <= end_slot else None)
        last = kb
        out.append(" " if kb is None else SPARK[max(1, round(kb / top * (len(SPARK) - 1)))])
    return "".join(out)


# --- showing profiles -----------------------------------------------------------------------------

def _big(n: float) -> str:
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.2f}{suffix}"
    return f"{n:.0f}"


def render_profiles(console, summaries: list[summary.ProfileSummary]) -> None:
    """The profiles of one experiment: a headline per workload, a table, the overhead, notes."""
    from alloclab.measure import machine
    from alloclab.measure.profile import perf, summary

    if not summaries:
        return
    if not any(s.counters for s in summaries) and not summaries[0].event.startswith("cycles"):
        # Said once: the profile had to sample a timer, and perf stat had nothing to count.
        has_counters, why = machine.perf_counters()
        why = why if not has_counters else "none were found when this was profiled"
        console.print(Text.assemble(("Hardware counters:", "yellow"), f" not measured on this machine ({why}); "
                                    f"cycles, instructions, IPC and cache misses are left out and profiles sample "
                                    f"{summaries[0].event} instead of cycles."), highlight=False)
    by_workload: dict[int, list[summary.ProfileSummary]] = {}
    for s in summaries:
        by_workload.setdefault(s.workload_idx, []).append(s)
    for group in by_workload.values():
        first = group[0]
        graph = f", call graphs ({perf.CALL_GRAPH})" if first.call_graph else ""
        console.print(Text.assemble("\n", ("Where the CPU goes", "bold"), f": {first.workload}  (perf record -e "
                                    f"{first.event} -F {first.frequency_hz}{graph}; median of "
                                    f"{max(len(s.ok_runs) for s in group)} profiled runs, min-max in brackets)"),
                      highlight=False)
        console.print(f"Allocator share of CPU: {summary.headline(group)}", highlight=False)
        with_kernel = [s.allocator_with_kernel() for s in group]
        if all(with_kernel):
            console.print("With the kernel work entered from allocator code (faults, brk/mmap/madvise, lock "
                          "waits): " + " -> ".join(f"{s.variant} {summary.spread_text(w)}"
                                                   for s, w in zip(group, with_kernel)), highlight=False)
        console.print(_profile_table(group))
        console.print(_overhead_verdict(group), highlight=False)
        if any(s.instructions for s in group):
            console.print("callgrind counts are noise-free instruction counts of one run under valgrind; "
                          "valgrind runs threads one at a time, so lock contention does not show.",
                          highlight=False)
    notes = list(dict.fromkeys(n for s in summaries for n in s.notes))
    for n in notes:
        console.print(Text.assemble(("note:", "yellow"), f" {n}"), highlight=False)


def _profile_table(group: list[summary.ProfileSummary]) -> Table:
    """One row per variant; counter and callgrind columns only where something was counted."""
    from alloclab.measure.profile import summary

    t = Table(show_lines=False)
    cols = ["variant", "allocator", "allocator CPU s/run", "kernel mm", "rest", "samples/run",
            "top allocator symbols", "profiled vs plain"]
    if any(s.counters for s in group):
        cols[-1:-1] = ["IPC", "cycles", "instructions", "cache misses"]
    if any(s.instructions for s in group):
        cols[-1:-1] = ["callgrind instr", "in allocator"]
    for c in cols:
        t.add_column(c, overflow="fold")
    for s in group:
        secs = s.allocator_seconds()
        row = [s.variant, summary.spread_text(s.allocator), "-" if secs is None else f"{secs:.3f}",
               _kernel_text(s), _rest_text(s),
               str(int(statistics.median([r.samples for r in s.ok_runs]))) if s.ok_runs else "0",
               _top_text(s) or "-",
               _overhead_text(s)]
        if "IPC" in cols:
            c = s.counters or {}
            row[-1:-1] = [f"{c['ipc']:.2f}" if "ipc" in c else "-", _big(c["cycles"]) if "cycles" in c else "-",
                          _big(c["instructions"]) if "instructions" in c else "-",
                          _big(c["cache_misses"]) if "cache_misses" in c else "-"]
        if "callgrind instr" in cols:
            ins = s.instructions or {}
            row[-1:-1] = [_big(ins["total"]) if "total" in ins else "-",
                          f"{_big(ins['allocator'])} ({summary.pct(ins['allocator'] / ins['total'])})"
                          if ins.get("total") else "-"]
        t.add_row(*map(Text, row))   # the names and symbols as given, whatever console prints them
    return t


def _top_text(s: summary.ProfileSummary, n: int = 3) -> str:
    """The top allocator symbols; the library is named only where it is not the variant's own."""
    from alloclab.measure.profile import summary

    own = f" [{Path(s.library).resolve().name if s.library else 'libc.so.6'}]"
    return ", ".join(f"{name.removesuffix(own)} {summary.pct(share)}" for name, share in s.top_symbols(n)
                     if share >= 0.001)


def _kernel_text(s: summary.ProfileSummary) -> str:
    from alloclab.measure.profile import summary

    if not s.kernel_visible:
        return "not sampled"
    text = summary.spread_text(s.kernel_mm)
    kinds = [f"{k} {summary.pct(v)}" for k, v in s.kernel_kinds().items() if v >= 0.001]
    if kinds:
        text += "\n" + ", ".join(kinds)
    from_alloc = s.kernel_from_allocator()
    if from_alloc is not None:
        text += f"\nentered from allocator code {summary.pct(from_alloc)}"
    return text


def _rest_text(s: summary.ProfileSummary) -> str:
    from alloclab.measure.profile import summary

    text = summary.spread_text(s.rest())
    locks = s.kernel_other_from_allocator()
    if locks:
        text += f"\nof which kernel entered from allocator code (lock waits) {summary.pct(locks)}"
    return text


def _signed(x: float) -> str:
    return f"{'+' if x >= 0 else ''}{100 * x:.1f}%"


def _overhead_text(s: summary.ProfileSummary) -> str:
    parts = []
    if s.throughput_overhead() is not None:
        o = s.throughput_overhead()
        # Negative: the profiled runs came out faster, which is noise (see _overhead_verdict).
        parts.append(f"{s.metric} {_signed(o)} slower" if o >= 0 else f"{s.metric} {-100 * o:.1f}% faster")
    if s.wall_overhead() is not None:
        wall = f"wall {_signed(s.wall_overhead())}"
        if s.sampling_overhead() is not None:
            wall += f"\n{_signed(s.sampling_overhead())} less perf start/stop"
        parts.append(wall)
    return "\n".join(parts) or "-"


def _overhead_verdict(group: list[summary.ProfileSummary]) -> str:
    from alloclab.measure.profile import summary

    values = [o for o in (s.overhead() for s in group) if o is not None]
    if not values:
        return "Sampling overhead: not measured (no unprofiled run succeeded)."
    lo, hi = min(values), max(values)
    first = group[0]
    measure = (f"the program's own {first.metric}" if first.throughput_overhead() is not None else
               "wall time less perf's own start/stop" if first.sampling_overhead() is not None else "wall time")
    # A profiled run cannot be faster than a plain one: a negative figure is run-to-run noise,
    # and noise that large hides any overhead of the same size.
    worst = max(abs(lo), abs(hi))
    verdict = (f"within {summary.TIMING_OK:.0%}: profiled runs may also be timed" if worst <= summary.TIMING_OK else
               f"beyond {summary.TIMING_OK:.0%}: time unprofiled runs, and read profiles as shares, not speed")
    noise = (f" Some profiled runs came out faster than plain ones ({_signed(lo)}): that much is run-to-run "
             f"noise here; add runs to measure the overhead itself." if lo < -summary.TIMING_OK else "")
    fixed = (f" perf record itself adds {first.perf_fixed_s:.2f} s of start/stop to every run's wall time."
             if first.perf_fixed_s is not None else "")
    return (f"Sampling overhead ({measure}, profiled vs unprofiled runs of the same variant): "
            f"{_signed(lo) if lo == hi else f'{_signed(lo)} to {_signed(hi)} across variants'}, "
            f"{verdict}.{noise}{fixed}")


def profile_after(store: Store, r: Results, workloads, variants: list[Variant], *, runs: int,
                  call_graph: bool = False, frequency: int = DEFAULT_FREQUENCY,
                  timeout_s: float | None = None) -> None:
    """`--profile` on compare/suite/run: profile the experiment just measured and analysed, and show it."""
    from alloclab.measure.profile import record

    with _bar(runs * len(variants) * len(workloads)) as advance:
        summaries = record.profile_experiment(store, r.experiment, workloads, variants, runs=runs,
                                              frequency=frequency, call_graph=call_graph, timeout_s=timeout_s,
                                              advance=advance)
    render_profiles(console, summaries)
    # What the profile means for the answer: an undecided comparison bounded by the allocator's share.
    # The profiles are the experiment's new data; its runs, and so the Results, are unchanged.
    from alloclab.report.bounds import bound_answers

    r.experiment.profiles.update({(s.workload_idx, s.variant_idx): s.to_dict() for s in summaries})
    for line in bound_answers(r.analysis):
        console.print(line, highlight=False)


def check_profiling(frequency: int = DEFAULT_FREQUENCY) -> None:
    """Refuse --profile before any run when perf cannot sample here; say why once."""
    from alloclab.measure.profile import perf

    access = perf.perf_access()
    perf.check_frequency(frequency)
    if access.note:
        err.print(Text.assemble(("note:", "yellow"), f" {access.note}"), highlight=False)
