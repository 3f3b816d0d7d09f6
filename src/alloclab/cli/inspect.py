"""`alloclab inspect PID`: where a running process's memory goes, read from outside, and which
setting would give it back. Thin: options, the loop of samples, storing and printing; the reading
is measure/inspect/, the answer tune/inspection.py, the words report/inspect.py."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from alloclab.cli.app import DbOption, app, console, err
from alloclab.cli.outputs import emit, plain_text
from alloclab.errors import AlloclabError

FORMATS = ("terminal", "json", "html")


def attach_warning() -> str:
    """What --attach does, naming the allocators whose books it calls for (the catalog's, one per interface)."""
    from alloclab.catalog.allocators import load_catalog
    from alloclab.measure.inspect.attach import CALLS
    first = {}
    for a in load_catalog().allocators.values():
        if a.books is not None and a.books.interface in CALLS and not a.bundled:
            first.setdefault(a.books.interface, a)
    names = [a.name for a in first.values()]
    who = ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else "".join(names)
    return (f"--attach: for {who} without a channel of the program's own, alloclab calls the allocator's "
            f"statistics function inside the process ({', '.join(a.books.entry for a in first.values())}). It "
            "stops every thread for a few milliseconds, calls only when no thread is inside the allocator, writes "
            "the call's arguments below one thread's stack pointer, runs the allocator's code on that thread, and "
            "then puts back its registers and those bytes. Use it where a short stop and a call into the allocator "
            "are acceptable.")


def _targets(pids: list[int], children: bool) -> list[tuple[int, list[int]]]:
    """Each PID, and with --children every process below it: (pid, its own children)."""
    from alloclab.measure.inspect import procfs, refusals
    out, seen = [], set()
    for pid in pids:
        try:
            below = procfs.children(pid) if children else []
        except procfs.ProcessGone:
            raise refusals.no_such_process(pid) from None
        for p in [pid, *below]:
            if p not in seen:
                seen.add(p)
                out.append((p, below if p == pid else []))
    return out


@app.command(name="inspect")
def inspect_command(
    pids: list[int] = typer.Argument(..., metavar="PID...", help="The processes to read (their ids)."),
    children: bool = typer.Option(False, "--children", help="Every process below each PID too (a server's tree), each with its PSS beside its RSS."),
    watch: Optional[float] = typer.Option(None, "--watch", metavar="SECONDS", help="Read again every SECONDS, until Ctrl-C or --count."),
    count: Optional[int] = typer.Option(None, "--count", help="With --watch: stop after this many samples."),
    fmt: str = typer.Option("terminal", "--format", "-f", help="terminal, json or html (a page with the parts over time; give it a file with -o)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the answer to FILE (default: stdout)."),
    symbols: bool = typer.Option(True, "--symbols/--no-symbols", help="Find glibc's main_arena and mp_ from the debug symbols where installed (libc6-dbg); --no-symbols finds them by content."),
    pagemap: bool = typer.Option(True, "--pagemap/--no-pagemap", help="Residency from /proc/PID/pagemap; --no-pagemap takes each mapping's share of smaps."),
    attach: bool = typer.Option(False, "--attach", help="jemalloc, tcmalloc, mimalloc without a channel of the program's own: call the allocator's statistics function inside the process (ptrace; every thread stopped outside the allocator, everything put back)."),
    db: Path = DbOption,
) -> None:
    """Where a running process's memory goes, read from outside without a restart, and which setting
    would give it back.

    glibc's heaps are walked through /proc/PID/mem (ptrace attach rights: the same user, or
    CAP_SYS_PTRACE), stopping the process for at most a few tens of milliseconds at a time and
    writing nothing into it; jemalloc through the program's own channel (redis' MEMORY MALLOC-STATS),
    others from smaps, or with --attach by a call to the allocator's statistics inside the process. The answer names the memory rules of tune that fire, their settings, and the
    command that races them. With --watch, a line a sample and which part grew, first sample to last;
    -f html -o FILE draws the parts over time. Stored like an experiment: `alloclab report ID`,
    `alloclab diff A B`."""
    from alloclab.measure.inspect.snapshot import Options, inspect
    from alloclab.store.db import Store
    from alloclab.store.inspect_model import Inspection
    from alloclab.tune.inspection import answer

    if fmt not in FORMATS:
        raise AlloclabError(f"Unknown inspect format '{fmt}'; choose {', '.join(FORMATS[:-1])} or {FORMATS[-1]}.")
    if watch is not None and watch <= 0:
        raise AlloclabError(f"--watch takes the seconds between samples, more than 0 (got {watch}).")
    if count is not None and count < 1:
        raise AlloclabError(f"--count takes the number of samples, at least 1 (got {count}).")
    from alloclab.cli.outputs import check_outputs
    check_outputs(output=output)
    if attach:
        err.print(attach_warning(), style="yellow", highlight=False)
    options = Options(symbols=symbols, pagemap=pagemap, attach=attach,
                      note=lambda words: err.print(words, style="yellow", highlight=False))
    samples = count if count is not None else (None if watch else 1)
    screen = console if fmt == "terminal" and output is None else err   # where the terminal's lines go
    store: Store | None = None
    exp = None
    items: list[Inspection] = []
    t0 = time.monotonic()
    taken = 0
    try:
        while samples is None or taken < samples:
            due = t0 + taken * (watch or 0)
            if taken:
                time.sleep(max(0.0, due - time.monotonic()))
            batch = []
            targets = _targets(pids, children)
            for pid, below in targets:
                try:
                    snap = inspect(pid, options, t0)
                except AlloclabError as exc:
                    if pid in pids:
                        raise
                    err.print(f"child {pid}: {exc}", style="yellow", highlight=False)   # a child that went meanwhile
                    continue
                batch.append(Inspection(snap, answer(snap), below))
            if store is None:
                store, exp = _open(db, pids, children, watch)
            for ins in batch:
                store.add_inspection(exp, len(items), ins)
                items.append(ins)
            if watch is not None:   # a line a sample while watching; the answer and what grew at the end
                from alloclab.report.inspect import sample_line
                for ins in batch:
                    screen.print(sample_line(ins), highlight=False, soft_wrap=True)
            elif fmt == "terminal" and output is None:
                from alloclab.report.inspect import render_terminal
                render_terminal(batch, console)
            taken += 1
    except KeyboardInterrupt:
        if not items:
            raise
    finally:
        if store is not None:
            store.finish(exp, "complete" if items else "failed")
    if watch is not None and items:
        _watched(items, exp, fmt, output, screen)
    _write(items, exp, fmt, output, watch)
    if store is not None:
        screen.print(f"Inspection stored in {db} (experiment {exp}).", highlight=False)


def _open(db: Path, pids: list[int], children: bool, watch: float | None):
    from alloclab.measure import machine
    from alloclab.store.db import Store
    store = Store(db)
    exp = store.new_experiment("inspect", "inspect " + " ".join(map(str, pids)),
                               {"pids": pids, "children": children, "watch": watch}, machine.snapshot())
    return store, exp


def _watched(items, exp, fmt: str, output: Path | None, screen) -> None:
    """After a watch: on the terminal's own output the answer at each process's last sample, and on
    the terminal whatever the format, which part grew."""
    from alloclab.report.inspect import render_growth, render_terminal
    from alloclab.store.inspect_model import growth
    if fmt == "terminal" and output is None:
        last = {ins.snapshot.pid: ins for ins in items}
        console.print()
        render_terminal(list(last.values()), console)
    render_growth(growth(items), screen, exp)


def _write(items, exp, fmt: str, output: Path | None, watch: float | None) -> None:
    from alloclab.report.inspect import render_json, render_terminal
    if fmt == "json":
        text = render_json(items, exp)
    elif fmt == "html":
        from alloclab.report.inspect_html import render_html
        text = render_html(items, exp, watch)
    elif output is not None:
        text = plain_text(lambda c: render_terminal(items, c, exp))
    else:
        return
    emit(text, output, "Inspection")
