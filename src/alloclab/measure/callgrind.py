"""Deterministic instruction counts: one run per variant under valgrind's callgrind.

Sampling shares move from run to run; instruction counts do not. callgrind counts every
instruction the program executes, per function and shared object, so "instructions inside the
allocator" is exact for this input. The price: valgrind runs the program 20-100x slower and
serializes its threads, so lock contention and cache effects do not show.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from alloclab.catalog.elf import elf_facts
from alloclab.errors import AlloclabError
from alloclab.measure.run import RunInterrupted, run_once
from alloclab.measure.profile.attribution import Attribution, Frame, clean_symbol
from alloclab.measure.profile.record import command_of
from alloclab.measure.profile.summary import ProfileSummary
from alloclab.catalog.variants import Variant
from alloclab.workloads.command import Workload

VALGRIND_INSTALL = "apt-get install -y valgrind"
SLOWDOWN = 100   # a callgrind run may take this many times the --timeout of a normal run


@dataclass
class CallgrindCount:
    total: int
    allocator: int
    top: list[tuple[str, int]]   # allocator functions by instructions, "fn [object]"

    def as_dict(self) -> dict:
        return {"total": self.total, "allocator": self.allocator, "top": [list(t) for t in self.top]}


def _name(table: dict[str, str], value: str) -> str:
    """Callgrind's name compression: `(12) name` defines id 12, a later `(12)` refers to it."""
    value = value.strip()
    if value.startswith("("):
        end = value.find(")")
        key, rest = value[1:end], value[end + 1:].strip()
        if rest:
            table[key] = rest
            return rest
        return table.get(key, f"({key})")
    return value


def self_costs(path: Path) -> tuple[int, dict[tuple[str, str], int]]:
    """(the file's total Ir, self Ir per (object, function)) from one callgrind output file."""
    obs: dict[str, str] = {}
    fns: dict[str, str] = {}
    ob = fn = ""
    positions, ir_index = 1, 0
    total = 0
    costs: dict[tuple[str, str], int] = {}
    skip_call_cost = False
    with open(path, errors="replace") as fh:
        for line in fh:
            if not line.strip():
                continue
            head = line[0]
            if head.isdigit() or head in "+-*":
                if skip_call_cost:       # the line after calls= is the callee's inclusive cost
                    skip_call_cost = False
                    continue
                fields = line.split()
                i = positions + ir_index
                if len(fields) > i:
                    costs[(ob, fn)] = costs.get((ob, fn), 0) + int(fields[i])
                continue
            key, _, value = line.partition("=")
            if key == "ob":
                ob = _name(obs, value)
            elif key == "cob":
                _name(obs, value)
            elif key == "fn":
                fn = _name(fns, value)
            elif key == "cfn":
                _name(fns, value)
            elif key == "calls":
                skip_call_cost = True
            elif line.startswith("positions:"):
                positions = len(line.split()) - 1
            elif line.startswith("events:"):
                events = line.split()[1:]
                ir_index = events.index("Ir") if "Ir" in events else 0
            elif line.startswith(("summary:", "totals:")):
                total = max(total, int(line.split()[1 + ir_index]))
    return total, costs


UNKNOWN_OBJECT = "???"


def count(out_dir: Path, attribution: Attribution, top: int = 5) -> CallgrindCount:
    # gperftools puts malloc/free in their own ELF section (google_malloc), which valgrind does
    # not tie to the library: that code shows under object "???". A function of that name
    # defined by the variant's library is the library's.
    library_functions = (elf_facts(Path(attribution.library).resolve()).defined
                         if attribution.library else frozenset())
    total = 0
    alloc: dict[str, int] = {}
    for f in sorted(out_dir.glob("callgrind.out.*")):
        file_total, costs = self_costs(f)
        total += file_total
        for (ob, fn), ir in costs.items():
            if ob == UNKNOWN_OBJECT and clean_symbol(fn) in library_functions:
                ob = os.path.realpath(attribution.library)
            if attribution.is_allocator(Frame(0, fn or "[unknown]", ob)):
                key = f"{clean_symbol(fn)} [{os.path.basename(ob)}]"
                alloc[key] = alloc.get(key, 0) + ir
    ranked = sorted(alloc.items(), key=lambda kv: -kv[1])
    return CallgrindCount(total, sum(alloc.values()), ranked[:top])


def valgrind() -> str:
    found = shutil.which("valgrind")
    if not found:
        raise AlloclabError(f"--instructions needs valgrind, which is not installed. Install it with "
                            f"`{VALGRIND_INSTALL}` (as root), or leave out --instructions.")
    return found


def callgrind_variant(workload: Workload, variant: Variant, workdir: Path, *, timeout_s: float | None = None,
                      base_env: dict[str, str] | None = None) -> CallgrindCount:
    """One run of the workload under callgrind with the variant's settings (through `env`)."""
    argv, cwd = command_of(workload)
    out_dir = workdir / "callgrind"
    out_dir.mkdir(parents=True, exist_ok=True)
    env = variant.apply(dict(os.environ) if base_env is None else base_env) | workload.env
    clean = {k: v for k, v in env.items() if k not in variant.env}
    settings = [f"{k}={v}" for k, v in variant.env.items()]
    wrapped = [valgrind(), "--tool=callgrind", "--trace-children=yes",
               f"--callgrind-out-file={out_dir}/callgrind.out.%p", "--", "env", *settings, *argv]
    result = run_once(wrapped, clean, workdir, timeout_s=timeout_s * SLOWDOWN if timeout_s else None, cwd=cwd)
    if result.status != "ok":
        tail = " / ".join(result.stderr.strip().splitlines()[-3:])
        raise AlloclabError(f"The callgrind run under {variant.label} did not complete ({result.error or result.status}"
                            f"{': ' + tail if tail else ''}). Profile without --instructions, or check that the "
                            f"program runs under valgrind.")
    counted = count(out_dir, Attribution(str(variant.library) if variant.library else None))
    if not counted.total:
        raise AlloclabError(f"callgrind wrote no instruction counts under {variant.label} (in {out_dir}).")
    return counted


def attach_instructions(summaries: list[ProfileSummary], workloads: list[Workload], variants: list[Variant], *,
                        timeout_s: float | None = None, advance: Callable[[str], None] = lambda text: None) -> None:
    """Count instructions once per (workload, variant) and store them in the matching summary."""
    root = Path(tempfile.mkdtemp(prefix="alloclab-callgrind-"))
    try:
        for s in summaries:
            w, v = workloads[s.workload_idx], variants[s.variant_idx]
            advance(f"callgrind {w.name[:24]} | {v.label}")
            s.instructions = callgrind_variant(w, v, root / f"{s.workload_idx}-{s.variant_idx}",
                                               timeout_s=timeout_s).as_dict()
    except RunInterrupted:
        raise KeyboardInterrupt from None
    finally:
        shutil.rmtree(root, ignore_errors=True)
