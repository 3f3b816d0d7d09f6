"""Allocators as data: the catalog file, where each library lives, and which version it is."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sysconfig
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from alloclab.errors import AlloclabError

BASELINE = "glibc"


@dataclass(frozen=True)
class Tunable:
    name: str
    help: str
    via: str | None = None  # the shared variable it lives in (MALLOC_CONF, GLIBC_TUNABLES)
    kind: str = "str"       # size | int | float | bool | choice | str (see allocators.toml)
    read: tuple[str, ...] = ()   # how the running allocator reports it (names per version)
    min: float | None = None
    max: float | None = None
    limit: str = ""         # why values outside [min, max] do not take effect
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class Allocator:
    name: str
    description: str
    libraries: tuple[str, ...]
    package: str
    release_call: str
    stats_call: str
    build_option: str
    prefixed_symbols: tuple[str, ...] = ()
    version_regex: str | None = None
    tunables: tuple[Tunable, ...] = ()
    readback: str | None = None          # tunables | probe | verbose (see allocators.toml)
    verbose_env: tuple[tuple[str, str], ...] = ()
    verbose_regex: str | None = None
    forward: str = ""      # the system allocator: source of its forwarding preload (allocators.toml)
    default: bool = True   # among the variants run when none is given
    same_as: str = ""      # the entry it copies (its settings are that one's, not named twice)
    race_in_tune: bool = True   # raced by `alloclab tune` as a plain allocator (not a near-copy of another)

    @property
    def is_system(self) -> bool:
        """The system allocator needs no preload: it is what libc already provides."""
        return not self.libraries

    def tunable(self, key: str) -> Tunable | None:
        return next((t for t in self.tunables if t.name == key), None)

    def shared_vars(self) -> set[str]:
        """The variables it reads keys out of (MALLOC_CONF for jemalloc, GLIBC_TUNABLES for glibc)."""
        return {t.via for t in self.tunables if t.via}


@dataclass(frozen=True)
class Catalog:
    allocators: dict[str, Allocator]
    combine: dict[str, tuple[str, str]] = field(default_factory=dict)

    def get(self, name: str) -> Allocator:
        try:
            return self.allocators[name]
        except KeyError:
            known = ", ".join(self.allocators)
            raise AlloclabError(
                f"Unknown allocator '{name}'. Known allocators are: {known}; any path to a "
                f"shared library (e.g. /usr/lib/libfoo.so) is accepted as a custom allocator. "
                f"Run `alloclab allocators` to see which are installed."
            ) from None

    def install_line(self, names: list[str] | None = None) -> str:
        packages = sorted({self.allocators[n].package for n in names or self.allocators
                           if not self.allocators[n].is_system})
        return "apt-get install -y " + " ".join(packages)


def _parse_tunables(raw: dict) -> tuple[Tunable, ...]:
    out = []
    for key, value in raw.items():
        if isinstance(value, str):
            out.append(Tunable(key, value))
            continue
        read = value.get("read", ())
        out.append(Tunable(key, value["help"], value.get("via"), value.get("kind", "str"),
                           (read,) if isinstance(read, str) else tuple(read),
                           value.get("min"), value.get("max"), value.get("limit", ""),
                           tuple(value.get("choices", ()))))
    return tuple(out)


@functools.cache
def load_catalog(path: str | None = None) -> Catalog:
    text = Path(path).read_bytes() if path else resources.files("alloclab.catalog").joinpath("allocators.toml").read_bytes()
    data = tomllib.loads(text.decode())
    allocators = {}
    for name, entry in data["allocators"].items():
        if "same_as" in entry:
            entry = {k: v for k, v in data["allocators"][entry["same_as"]].items() if k != "default"} | entry
        allocators[name] = Allocator(
            name=name,
            description=entry["description"],
            libraries=tuple(entry.get("libraries", ())),
            package=entry["package"],
            release_call=entry["release_call"],
            stats_call=entry["stats_call"],
            build_option=entry.get("build_option", ""),
            prefixed_symbols=tuple(entry.get("prefixed_symbols", ())),
            version_regex=entry.get("version_regex"),
            tunables=_parse_tunables(entry.get("tunables", {})),
            readback=entry.get("readback"),
            verbose_env=tuple(entry.get("verbose_env", {}).items()),
            verbose_regex=entry.get("verbose_regex"),
            forward=entry.get("forward", ""),
            default=entry.get("default", True),
            same_as=entry.get("same_as", ""),
            race_in_tune=entry.get("race_in_tune", True),
        )
    combine = {var: (fmt, sep) for var, (fmt, sep) in data.get("combine", {}).items()}
    return Catalog(allocators, combine)


# --- where libraries live -------------------------------------------------------------------

def library_dirs() -> list[Path]:
    multiarch = sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu"
    dirs = [f"/lib/{multiarch}", f"/usr/lib/{multiarch}", "/usr/local/lib", "/usr/lib64", "/lib64", "/usr/lib", "/lib"]
    extra = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    return [Path(d) for d in extra + dirs]


@functools.cache
def linker_cache() -> dict[str, str]:
    """soname -> path, from `ldconfig -p` (the dynamic linker's own view)."""
    for ldconfig in ("ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"):
        try:
            out = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=10).stdout
            break
        except (FileNotFoundError, subprocess.TimeoutExpired):
            continue
    else:
        return {}
    # ldconfig lists 32-bit libraries too; keep the ones this machine's programs load.
    arch_tag = "x86-64" if os.uname().machine == "x86_64" else ""
    cache: dict[str, str] = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) \(([^)]*)\) => (\S+)", line)
        if m and arch_tag in m.group(2):
            cache.setdefault(m.group(1), m.group(3))
    return cache


def find_library(soname: str) -> Path | None:
    hit = linker_cache().get(soname)
    if hit and Path(hit).exists():
        return Path(hit)
    for d in library_dirs():
        p = d / soname
        if p.exists():
            return p
    return None


def locate(allocator: Allocator) -> Path | None:
    """The library that provides this allocator, or None if it is not installed."""
    for soname in allocator.libraries:
        path = find_library(soname)
        if path:
            return path
    return None


def is_installed(allocator: Allocator) -> bool:
    return allocator.is_system or locate(allocator) is not None


# --- versions -------------------------------------------------------------------------------

def glibc_version() -> str:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").split()[-1]
    except (ValueError, OSError, AttributeError):
        return "unknown"


@functools.cache
def package_version(package: str) -> str | None:
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package],
                             capture_output=True, text=True, timeout=10)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


@functools.cache
def embedded_version(path: str, regex: str | None) -> str | None:
    """A version string embedded in the library's bytes (jemalloc and gperftools carry one)."""
    if not regex:
        return None
    try:
        m = re.search(regex.encode(), Path(path).resolve().read_bytes())
    except OSError:
        return None
    return m.group(1).decode() if m else None


def soname_version(path: str) -> str | None:
    m = re.search(r"\.so\.(\d+(?:\.\d+)*)$", Path(path).resolve().name)
    return m.group(1) if m else None


def library_version(path: str, regex: str | None = None) -> str | None:
    return embedded_version(path, regex) or soname_version(path)


def version_of(allocator: Allocator, path: Path | None) -> str:
    if allocator.is_system:
        return glibc_version()
    if path is None:
        return "not installed"
    return (embedded_version(str(path), allocator.version_regex) or package_version(allocator.package)
            or soname_version(str(path)) or "unknown")
