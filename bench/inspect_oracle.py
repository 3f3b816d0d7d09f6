#!/usr/bin/env python3
"""`alloclab inspect` against glibc's own malloc_info, arena by arena, on the four heap states of
tests/programs/inspectee.c (top kept, free pinned inside, thread arenas holding free memory, a
control), both ways of finding main_arena (debug symbols, content): each figure as walked and as
malloc_info printed it, their difference, the longest stop and the heartbeat's worst gap, and the
rules that fired. The test (tests/test_inspect_oracle_e2e.py) asserts 1%; this prints the figures.

Usage: python bench/inspect_oracle.py [--mib 16]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

PROGRAM = Path(__file__).resolve().parent.parent / "tests" / "programs" / "inspectee.c"


def malloc_info(xml: str) -> list[dict]:
    out = []
    for body in re.findall(r'<heap nr="\d+">(.*?)</heap>', xml, re.S):
        g = lambda pat: re.search(pat, body)   # noqa: E731
        out.append({"fast": int(g(r'type="fast" count="\d+" size="(\d+)"')[1]),
                    "rest": int(g(r'type="rest" count="\d+" size="(\d+)"')[1]),
                    "system": int(g(r'<system type="current" size="(\d+)"')[1])})
    return out


def diff(a: int, b: int) -> str:
    return "exact" if a == b else f"{100 * (a - b) / b:+.4f}%" if b else f"{a - b:+d} B"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", default="16")
    a = ap.parse_args()
    print(f"{datetime.now(timezone.utc).isoformat(timespec='seconds')}: inspect against malloc_info, {a.mib} MiB")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        exe = tmp / "inspectee"
        subprocess.run(["cc", "-O2", "-pthread", "-o", str(exe), str(PROGRAM)], check=True)
        for mode in ("top", "pinned", "arenas", "control"):
            for way in ("--symbols", "--no-symbols"):
                info = tmp / f"{mode}.xml"
                p = subprocess.Popen([str(exe), mode, str(info), a.mib], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                assert p.stderr.readline() == b"paused\n"
                r = subprocess.run([sys.executable, "-m", "alloclab.cli", "inspect", str(p.pid), "-f", "json", way,
                                    "--db", str(tmp / "o.db")], capture_output=True, text=True)
                _, err = p.communicate(b"go\n")
                ins = json.loads(r.stdout)["inspections"][0]
                snap = ins["snapshot"]
                gap = re.search(rb"worst gap while paused: ([\d.]+ ms; held: [\d.]+)", err).group(1).decode()
                print(f"{mode} {way}: {snap['pauses']} stops, longest {snap['pause_max_ms']} ms, heartbeat "
                      f"{gap} ms; fired: {', '.join(f['rule'] for f in ins['answer']['fired']) or 'none'}")
                for k, (w, o) in enumerate(zip(snap["arenas"], malloc_info(info.read_text()))):
                    print(f"  arena {k}: system {w['walked']:,} vs {o['system']:,} ({diff(w['walked'], o['system'])}); "
                          f"fast {w['fast']:,} vs {o['fast']:,} ({diff(w['fast'], o['fast'])}); top+bins "
                          f"{w['top'] + w['free']:,} vs rest {o['rest']:,} ({diff(w['top'] + w['free'], o['rest'])})")


if __name__ == "__main__":
    main()
