#!/usr/bin/env python3
"""How long `alloclab inspect` takes on a large glibc heap, and how long it stops the process.

The target: a process with 1 GiB of glibc heap in 100-byte blocks (tests/programs/inspectee.c,
mode "blocks") is inspected within 5 s, with no pause above 100 ms. Each repetition starts the
program, waits until its heap is built, runs the real CLI (`alloclab inspect PID -f json`, a fresh
interpreter: its start is part of the figure) and lets the program go; it reports the command's
wall time, the reading's own time (the snapshot's read_s), alloclab's stops of that snapshot (how
many, their median and the longest), and the longest gap the program's heartbeat thread (a 1 ms
sleep in a loop) saw while it was read, whole and less its waits for a CPU (the time it was held);
at the end, over every snapshot, the median and the longest of the snapshots' median stops and of
their longest (the 100 ms target is on the longest). Printed with
the date, the host and its load: figures taken beside other work are noisy, and say so.

Usage: python bench/inspect_speed.py [--mib 1024] [--repeat 3] [--no-symbols]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROGRAM = HERE.parent / "tests" / "programs" / "inspectee.c"


def one(exe: Path, mib: int, tmp: Path, symbols: bool) -> dict:
    p = subprocess.Popen([str(exe), "blocks", str(tmp / "info.xml"), str(mib)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert p.stderr.readline() == b"paused\n"
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "alloclab.cli", "inspect", str(p.pid), "-f", "json",
                            "--db", str(tmp / "bench.db"), *([] if symbols else ["--no-symbols"])],
                           capture_output=True, text=True, timeout=600)
        wall = time.perf_counter() - t
        if r.returncode:
            raise SystemExit(r.stdout + r.stderr)
        snap = json.loads(r.stdout)["inspections"][0]["snapshot"]
    finally:
        out, err = p.communicate(b"go\n", timeout=120)
    m = re.search(rb"worst gap while paused: ([\d.]+) ms; held: ([\d.]+) ms", err)
    gap, held = float(m.group(1)), float(m.group(2))
    return {"wall_s": wall, "read_s": snap["read_s"], "pause_max_ms": snap["pause_max_ms"],
            "pause_median_ms": snap["pause_median_ms"], "pauses": snap["pauses"],
            "heartbeat_gap_ms": gap, "heartbeat_held_ms": held, "live_mib": snap["split"]["parts"]["live"] / 2**20,
            "blocks": int(re.search(rb"blocks: (\d+)", out).group(1))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-symbols", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="alloclab-bench-") as d:
        tmp = Path(d)
        exe = tmp / "inspectee"
        subprocess.run(["cc", "-O2", "-pthread", "-o", str(exe), str(PROGRAM)], check=True)
        print(f"{datetime.now(timezone.utc).isoformat(timespec='seconds')} {platform.node()} "
              f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}: inspect of {a.mib} MiB of 100-byte blocks"
              f"{' (main_arena by content)' if a.no_symbols else ''}")
        got = []
        for k in range(a.repeat):
            f = one(exe, a.mib, tmp, not a.no_symbols)
            got.append(f)
            print(f"  #{k + 1}: {f['wall_s']:.2f} s the command ({f['read_s']:.2f} s reading), "
                  f"{f['pauses']} stops, median {f['pause_median_ms']:.1f} ms, longest {f['pause_max_ms']:.1f} ms; "
                  f"heartbeat's worst gap "
                  f"{f['heartbeat_gap_ms']:.1f} ms, held {f['heartbeat_held_ms']:.1f} ms; {f['blocks']:,} blocks, live {f['live_mib']:.0f} MiB")
        med = [f["pause_median_ms"] for f in got]
        top = [f["pause_max_ms"] for f in got]
        print(f"  stops per snapshot, over {len(got)} snapshots: median stop {statistics.median(med):.1f} ms "
              f"(at most {max(med):.1f}), longest stop {statistics.median(top):.1f} ms median, {max(top):.1f} ms max "
              f"({'within' if max(top) < 100 else 'above'} the 100 ms target)")
        print(f"  load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
