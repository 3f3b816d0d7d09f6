"""What the tests of `alloclab inspect` share: a program paused in a known heap state
(tests/programs/inspectee.c), glibc's own malloc_info() of that state, and the CLI's JSON answer."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Paused:
    proc: subprocess.Popen
    info: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def go(self, timeout: float = 60) -> tuple[bytes, str, int]:
        """Lets it continue: its stdout, its stderr, its exit status."""
        out, err = self.proc.communicate(b"go\n", timeout=timeout)
        return out, err.decode(), self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def pause(program: Path, mode: str, info: Path, *args: str, env: dict | None = None) -> Paused:
    """Starts the program and waits until it says it paused (its heap built, malloc_info written)."""
    return pause_argv([str(program), mode, str(info), *args], info, env)


def pause_argv(argv: list[str], info: Path | None = None, env: dict | None = None) -> Paused:
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    line = p.stderr.readline()
    if line != b"paused\n":
        p.kill()
        p.wait()
        raise AssertionError(f"{argv} did not pause: {line!r}")
    return Paused(p, info)


def plain_run(program: Path, mode: str, info: Path, *args: str) -> bytes:
    """Its stdout when nothing inspects it."""
    p = pause(program, mode, info, *args)
    out, _, rc = p.go()
    assert rc == 0
    return out


def worst_gap_ms(stderr: str) -> float:
    """The heartbeat's longest beat while the program paused, less its waits for a CPU: the longest
    time it was held stopped (inspectee.c)."""
    m = re.search(r"heartbeat worst gap while paused: [\d.]+ ms; held: ([\d.]+) ms", stderr)
    assert m, stderr
    return float(m.group(1))


def malloc_info(path: Path) -> tuple[list[dict], tuple[int, int]]:
    """Per arena (main first, then the ring's order): fast and rest bytes and counts, system bytes;
    and the mapped chunks' count and bytes."""
    xml = path.read_text()
    out = []
    for body in re.findall(r'<heap nr="\d+">(.*?)</heap>', xml, re.S):
        fast = re.search(r'<total type="fast" count="(\d+)" size="(\d+)"/>', body)
        rest = re.search(r'<total type="rest" count="(\d+)" size="(\d+)"/>', body)
        system = re.search(r'<system type="current" size="(\d+)"/>', body)
        out.append({"fast": int(fast[2]), "fast_count": int(fast[1]), "rest": int(rest[2]),
                    "rest_count": int(rest[1]), "system": int(system[1])})
    m = re.search(r'<total type="mmap" count="(\d+)" size="(\d+)"/>', xml)
    return out, (int(m[1]), int(m[2]))


def inspection(proc: subprocess.CompletedProcess) -> list[dict]:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)["inspections"]


def close(walked: float, oracle: float, share: float = 0.01) -> bool:
    return abs(walked - oracle) <= share * max(abs(oracle), 1)
