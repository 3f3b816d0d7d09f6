"""Read a variant's settings back from the running allocator: asked is not the same as in effect.

Ceph once tuned a tcmalloc thread cache that the gperftools of the day silently ignored. So
every setting a variant asks for is read back from the allocator itself, in an untimed run
before the measured ones, by the way the catalog names (allocators.toml, `readback`):
glibc's loader lists the tunables it parsed (`ld.so --list-tunables`, which maps the old
MALLOC_*_ variables too); a small probe preloaded beside jemalloc or gperftools asks
mallctl("opt.X") or MallocExtension_GetNumericProperty; mimalloc prints its options when
verbose. A setting not read back as asked makes the variant ineffective."""

from __future__ import annotations

import functools
import os
import re
import select
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from elftools.elf.elffile import ELFFile

from alloclab.workloads import build as cbuild
from alloclab.errors import AlloclabError
from alloclab.catalog.allocators import load_catalog
from alloclab.catalog.tunables import TunableSetting

IN_EFFECT, INEFFECTIVE, UNCONFIRMED = "in effect", "ineffective", "unconfirmed"
_TUNABLE_LINE = re.compile(r"^(\S+): (\S+) \(min: ", re.MULTILINE)
_PROBE_LINE = re.compile(r"^([^\t\n]+)\t(.*)$", re.MULTILINE)
TIMEOUT_S = 20


@dataclass(frozen=True)
class Readback:
    setting: TunableSetting
    status: str
    read_name: str | None = None
    read: str | None = None
    why: str = ""

    def line(self) -> str:
        """The verification line: what the allocator runs with, next to what was asked."""
        s = self.setting
        asked = f"asked {s.tunable.name}={s.written}" if self.read_name != s.tunable.name else f"asked {s.written}"
        if self.status == IN_EFFECT:
            return f"{self.read_name} = {self.read} ({asked}): in effect"
        if self.status == UNCONFIRMED:
            return f"{s.tunable.name}={s.written}: passed as asked, not confirmed ({self.why})"
        return self.why


@functools.cache
def probe() -> Path:
    # Dynamically linked on purpose: it must load the preloaded allocator like any program.
    return cbuild.build("alloclab-readback", [cbuild.package_file("measure", "launcher", "readback.c")],
                        flags=load_catalog().c_defines(), libs=["-ldl"])


@functools.cache
def loader() -> str:
    """The dynamic loader programs here run under (the PT_INTERP of /bin/sh)."""
    sh = shutil.which("sh") or "/bin/sh"
    with open(Path(sh).resolve(), "rb") as fh:
        for seg in ELFFile(fh).iter_segments():
            if seg["p_type"] == "PT_INTERP":
                return seg.get_interp_name()
    raise AlloclabError("Cannot find the dynamic loader (no PT_INTERP in /bin/sh) to read glibc's tunables back.")


class ProbeFailed(Exception):
    pass


def run(argv: list[str], env: dict[str, str]) -> tuple[str, str]:
    try:
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, errors="replace")
    except subprocess.TimeoutExpired:
        raise ProbeFailed(f"{Path(argv[0]).name} did not finish in {TIMEOUT_S} s") from None
    if p.returncode != 0:
        tail = " ".join(p.stderr.split())[-300:]
        raise ProbeFailed(f"{Path(argv[0]).name} {' '.join(argv[1:2])} exited with status {p.returncode}"
                          + (f": {tail}" if tail else ""))
    return p.stdout, p.stderr


def from_program(argv: list[str], env: dict[str, str], regex: str, quiet_s: float = 0.5) -> str:
    """What the program itself writes on stderr as it starts, where the allocator is built into it
    (a copy no probe holds prints its options at its own start): read until the options stop coming,
    then the program is stopped, its whole session, with nothing else of its run kept."""
    p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, start_new_session=True)
    out, seen, last = b"", False, time.monotonic()
    deadline = last + TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([p.stderr], [], [], 0.05)
            if ready:
                chunk = os.read(p.stderr.fileno(), 65536)
                if not chunk:
                    break
                out, last = out + chunk, time.monotonic()
                seen = seen or re.search(regex, out.decode(errors="replace")) is not None
            elif seen and time.monotonic() - last > quiet_s:
                break
    finally:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
        p.wait()
        p.stderr.close()
    return out.decode(errors="replace")


def _verbose(a, env: dict[str, str]) -> dict[str, str]:
    """env with the allocator's verbose switches, appended to a variable the variant already sets
    (jemalloc reads one _RJEM_MALLOC_CONF: its settings and confirm_conf:true both go in it)."""
    catalog, out = load_catalog(), dict(env)
    via_of = {name: via for via, name in a.env_names}
    for k, v in a.verbose_env:
        sep = catalog.combine.get(via_of.get(k, k), ("", ","))[1]
        out[k] = f"{out[k]}{sep}{v}" if out.get(k) else v
    return out


def started_version(allocator, argv: list[str], env: dict[str, str]) -> str:
    """The version a copy built into the program prints as it starts under its verbose switches
    (mimalloc 2.1.4 and later: "v3.3.2 (built on ..."), read from the program itself: "" where the
    catalog names no such line or the program printed none."""
    if not allocator.started_version or not argv:
        return ""
    try:
        errs = from_program(argv, _verbose(allocator, env), allocator.verbose_regex)
    except OSError:
        return ""
    found = re.search(allocator.started_version, errs)
    return found.group(1) if found else ""


def readings(variant, env: dict[str, str], argv: list[str] | None = None) -> tuple[dict[str, str], str]:
    """name -> value as the running allocator reports it, and what it said on stderr."""
    a = variant.allocator
    if a.bundled and a.readback == "verbose":
        errs = from_program(argv, _verbose(a, env), a.verbose_regex)
        return {a.verbose_key.format(m.group(1)): m.group(2) for m in re.finditer(a.verbose_regex, errs)}, errs
    if a.readback == "tunables":
        out, errs = run([loader(), "--list-tunables"], env)
        return {m.group(1): m.group(2) for m in _TUNABLE_LINE.finditer(out)}, errs
    if a.readback == "probe":
        queries = [q for s in variant.tunables for q in s.tunable.read]
        out, errs = run([str(probe()), *queries], env)
        return {m.group(1): m.group(2) for m in _PROBE_LINE.finditer(out)}, errs
    if a.readback == "verbose":
        out, errs = run([str(probe())], env | dict(a.verbose_env))
        words = dict(a.verbose_values)
        return {m.group(1): words.get(m.group(2), m.group(2)) for m in re.finditer(a.verbose_regex, out + errs)}, errs
    return {}, ""


def _key(read: str) -> str:
    """The name a probe query answers under (mallctl:opt.narenas -> opt.narenas)."""
    return read.split(":", 1)[1] if ":" in read else read


def _same(kind: str, asked: str, read: str) -> bool:
    try:
        if kind in ("size", "int"):
            return int(read, 0) == int(asked)
        if kind == "float":
            return float(read) == float(asked)
        if kind == "bool":
            return read.lower() in ("true", "1") if asked == "true" else read.lower() in ("false", "0")
    except ValueError:
        return False
    return read == asked


def _shown(kind: str, read: str) -> str:
    if kind in ("size", "int"):
        try:
            return str(int(read, 0))    # glibc lists hex: 0x4000000
        except ValueError:
            pass
    return read


def check(variant, env: dict[str, str], argv: list[str] | None = None) -> list[Readback]:
    """One Readback per setting the variant asked its allocator for. `argv`: the program, which alone
    can report the settings of an allocator built into it."""
    if not variant.tunables or variant.allocator is None:
        return []
    a = variant.allocator
    who = f"{a.name} {variant.version()}"
    if a.bundled and (a.readback != "verbose" or not argv):
        # No probe holds the copy: only the program it is built into could report its settings.
        return [Readback(s, UNCONFIRMED, why=f"the {a.bundled} built into the program reports its settings only "
                         f"from inside it") for s in variant.tunables]
    if not a.readback:
        return [Readback(s, UNCONFIRMED, why=f"the catalog names no way to read {a.name}'s settings back")
                for s in variant.tunables]
    try:
        found, errs = readings(variant, env, argv)
    except (ProbeFailed, OSError) as exc:
        return [Readback(s, UNCONFIRMED, why=f"reading {a.name}'s settings back failed: {exc}") for s in variant.tunables]
    if a.bundled and not found:
        return [Readback(s, UNCONFIRMED, why=f"the program printed none of its {a.bundled}'s options under "
                         f"{', '.join(f'{k}={v}' for k, v in a.verbose_env)}") for s in variant.tunables]
    out = []
    for s in variant.tunables:
        t = s.tunable
        complaint = next((line.strip() for line in errs.splitlines()
                          if "Invalid conf" in line and f"{t.name}:" in line), None)
        if complaint:
            out.append(Readback(s, INEFFECTIVE, why=f"{t.name}={s.written} not read by {who}: it said \"{complaint}\""))
            continue
        if not t.read:
            out.append(Readback(s, UNCONFIRMED, why=f"{a.name} has no way to report {t.name}"))
            continue
        name = next((_key(r) for r in t.read if _key(r) in found and not found[_key(r)].startswith("!")), None)
        if name is None:
            said = next((found[_key(r)][1:] for r in t.read if found.get(_key(r), "").startswith("!")), "")
            out.append(Readback(s, INEFFECTIVE, why=(
                f"{t.name}={s.written} not read by {who}: it reports no {_key(t.read[0])}"
                + (f" ({said})" if said else "") + "; this version does not have the setting")))
            continue
        read = _shown(t.kind, found[name])
        if _same(t.kind, s.value, found[name]):
            out.append(Readback(s, IN_EFFECT, name, read))
        else:
            out.append(Readback(s, INEFFECTIVE, name, read, why=(
                f"{t.name}={s.written} not read as asked by {who}: it runs with {name} = {read}, not "
                f"{s.value} (clamped or ignored)")))
    return out
