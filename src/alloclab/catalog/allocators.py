"""Allocators as data: the catalog file, where each library lives, and which version it is."""

from __future__ import annotations

import dataclasses
import difflib
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

    @classmethod
    def from_toml(cls, name: str, entry: str | dict) -> "Tunable":
        """A tunable of allocators.toml: its help text alone, or a table whose keys are the fields."""
        if isinstance(entry, str):
            return cls(name, entry)
        t = cls(name=name, **entry)
        # `read` is one name or several; the lists are kept as tuples (the catalog is cached, shared).
        return dataclasses.replace(t, read=(t.read,) if isinstance(t.read, str) else tuple(t.read),
                                   choices=tuple(t.choices))


@dataclass(frozen=True)
class Books:
    """How the interposer reads the allocator's own accounting ([allocators.NAME.books]): through
    which interface, and, for an interface keyed by name (jemalloc's mallctl, gperftools'
    properties), which name plays each role in the split of its memory (measure/fingerprint_books.py).
    glibc's malloc_info and mimalloc's mi_process_info have fixed figures: no roles."""
    interface: str                                     # malloc_info | mallctl | property | mi_process_info
    roles: tuple[tuple[str, tuple[str, ...]], ...] = ()   # role -> the names summed for it
    entry: str = ""        # the function the books are read through (inspect --attach calls it)
    source: str = ""       # in words: "jemalloc mallctl"
    sampled_as: str = ""   # what the interposer names its per-sample reading (launcher/books.c)
    sampled: tuple[str | None, str | None] = (None, None)   # that reading's allocated and held bytes, in words

    @classmethod
    def from_toml(cls, entry: dict) -> "Books":
        entry = dict(entry)
        fixed = {k: entry.pop(k) for k in ("interface", "entry", "source", "sampled_as") if k in entry}
        sampled = tuple(x or None for x in entry.pop("sampled", ["", ""]))
        return cls(roles=tuple((role, (v,) if isinstance(v, str) else tuple(v)) for role, v in entry.items()),
                   sampled=sampled, **fixed)

    def names(self) -> list[str]:
        """Every name read, in the catalog's order (what the interposer is handed)."""
        return [n for _, names in self.roles for n in names]

    def role(self, name: str) -> tuple[str, ...]:
        return dict(self.roles).get(name, ())


@dataclass(frozen=True)
class Allocator:
    name: str
    description: str
    package: str
    release_call: str
    stats_call: str
    libraries: tuple[str, ...] = ()      # none: the system allocator
    build_option: str = ""
    build_for: tuple[tuple[str, str], ...] = ()   # (start of a program's name, its own build option)
    prefixed_symbols: tuple[str, ...] = ()
    version_regex: str | None = None
    version_library: str = ""   # the soname whose bytes carry the version, where not the preloaded one
    tunables: tuple[Tunable, ...] = ()
    readback: str | None = None          # tunables | probe | verbose (see allocators.toml)
    verbose_env: tuple[tuple[str, str], ...] = ()
    verbose_regex: str | None = None
    verbose_values: tuple[tuple[str, str], ...] = ()   # a printed word -> the value it stands for
    verbose_key: str = "{}"   # a printed name as the tunables' read name (jemalloc's "opt.{}")
    forward: str = ""      # the system allocator: source of its forwarding preload (allocators.toml)
    forward_shows: str = ""   # the setting (its read name) a forwarded probe shows in effect
    default: bool = True   # among the variants run when none is given
    same_as: str = ""      # the entry it copies (its settings are that one's, not named twice)
    race_in_tune: bool = True   # raced by `alloclab tune` as a plain allocator (not a near-copy of another)
    books: Books | None = None  # how its own accounting is read (allocators.toml)
    trims_with: tuple[str, ...] = ("brk",)   # the calls that give back heap it regrows in place
    # A copy of `bundled` built into programs (the Rust mimalloc crate, tikv-jemallocator): no preload
    # reaches it, only its own settings, read under `env_names` (MALLOC_CONF -> _RJEM_MALLOC_CONF).
    bundled: str = ""
    bundled_symbols: tuple[str, ...] = ()            # any of these defined in a program: this copy
    bundled_versions: tuple[tuple[str, str], ...] = ()   # a string compiled into the copy -> its version
    started_version: str = ""   # regex: the version the copy prints as it starts, verbose
    env_names: tuple[tuple[str, str], ...] = ()
    # The environment it reads: a name ending in _ or . starts a family, any other is one variable.
    env_prefixes: tuple[str, ...] = ()
    # Where its code shares a library with other code (glibc's malloc inside libc): the libraries, and
    # the functions that are its code there (globs), by which a profile tells its samples apart.
    code_libraries: tuple[str, ...] = ()
    code_symbols: tuple[str, ...] = ()

    @property
    def release_function(self) -> str:
        """The function of its release call (malloc_trim of malloc_trim(0))."""
        return self.release_call.split("(", 1)[0]

    @property
    def is_system(self) -> bool:
        """The system allocator needs no preload: it is what libc already provides."""
        return not self.libraries

    @classmethod
    def from_toml(cls, name: str, entry: dict) -> "Allocator":
        """An [allocators.NAME] table: its keys are the fields (a key it does not know is an error);
        its lists become tuples, its tunables Tunable entries."""
        a = cls(name=name, **entry)
        return dataclasses.replace(a, libraries=tuple(a.libraries), prefixed_symbols=tuple(a.prefixed_symbols),
                                   trims_with=tuple(a.trims_with), bundled_symbols=tuple(a.bundled_symbols),
                                   bundled_versions=tuple(tuple(x) for x in a.bundled_versions),
                                   env_names=tuple(dict(a.env_names).items()),
                                   env_prefixes=tuple(a.env_prefixes), code_libraries=tuple(a.code_libraries),
                                   code_symbols=tuple(a.code_symbols),
                                   tunables=tuple(Tunable.from_toml(k, v) for k, v in dict(a.tunables).items()),
                                   verbose_env=tuple(dict(a.verbose_env).items()),
                                   verbose_values=tuple(dict(a.verbose_values).items()),
                                   build_for=tuple(dict(a.build_for).items()),
                                   books=Books.from_toml(a.books) if isinstance(a.books, dict) else a.books)

    def tunable(self, key: str) -> Tunable | None:
        return next((t for t in self.tunables if t.name == key), None)

    def shared_vars(self) -> set[str]:
        """The variables it reads keys out of (MALLOC_CONF for jemalloc, GLIBC_TUNABLES for glibc)."""
        return {t.via for t in self.tunables if t.via}


def closest(word: str, names: list[str]) -> str | None:
    """The name a misspelt `word` most likely meant (`jemaloc`, `TCMALLOC`), for "did you mean":
    difflib's nearest at 0.75, then the same ignoring case, as a setting's name is guessed."""
    found = difflib.get_close_matches(word, names, n=1, cutoff=0.75)
    if not found:
        lower = {n.lower(): n for n in names}
        found = [lower[m] for m in difflib.get_close_matches(word.lower(), list(lower), n=1, cutoff=0.75)]
    return found[0] if found else None


@dataclass(frozen=True)
class Catalog:
    allocators: dict[str, Allocator]
    combine: dict[str, tuple[str, str]] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)   # variants the messages show ([examples])

    def get(self, name: str) -> Allocator:
        try:
            return self.allocators[name]
        except KeyError:
            known = ", ".join(self.allocators)
            guess = closest(name, list(self.allocators))
            hint = f" Did you mean '{guess}'?" if guess else ""
            raise AlloclabError(
                f"Unknown allocator '{name}'.{hint} Known allocators are: {known}; any path to a "
                f"shared library (e.g. /usr/lib/libfoo.so) is accepted as a custom allocator. "
                f"Run `alloclab allocators` to see which are installed."
            ) from None

    def every_books(self) -> list[Books]:
        """Each interface's books once (the copies of an allocator share theirs), in the catalog's order."""
        found = {a.books.interface: a.books for a in self.allocators.values() if a.books is not None}
        return list(found.values())

    def c_defines(self) -> list[str]:
        """The interposer's build flags (launcher/books.c): per interface the function it reads and
        the words of its per-sample reading, BOOKS_<INTERFACE>_ENTRY and BOOKS_<INTERFACE>_SAMPLED."""
        out = []
        for b in self.every_books():
            key = re.sub(r"\W", "_", b.interface).upper()
            out += [f'-DBOOKS_{key}_ENTRY="{b.entry}"', f'-DBOOKS_{key}_SAMPLED="{b.sampled_as}"']
        return out

    def sampled(self, sampled_as: str) -> Books | None:
        """The books whose per-sample reading the interposer names so ("jemalloc mallctl")."""
        return next((a.books for a in self.allocators.values() if a.books and a.books.sampled_as == sampled_as), None)

    def books(self, interface: str) -> Books | None:
        """The roles of an interface's names (the first allocator read through it: the copies of
        gperftools share theirs)."""
        return next((a.books for a in self.allocators.values() if a.books and a.books.interface == interface), None)

    def environment(self) -> list[str]:
        """Every variable name or family prefix some allocator reads (each entry's env_prefixes)."""
        return list(dict.fromkeys(p for a in self.allocators.values() for p in a.env_prefixes))

    def reads_variable(self, var: str) -> bool:
        """An allocator reads `var`: alloclab must set it only through a variant."""
        return any(var.startswith(p) if p.endswith(("_", ".")) else var == p for p in self.environment())

    def setting_families(self) -> list[str]:
        """The prefixes of settings' families (MALLOC_, MIMALLOC_, glibc.malloc.), stripped in short labels."""
        return [p for p in self.environment() if p.endswith(("_", "."))]

    def looks_like_setting(self, key: str) -> bool:
        """A name of some allocator's setting family, or a variable a copy reads under its own name
        (_RJEM_MALLOC_CONF), or one whose keys are joined (MALLOC_CONF): unknown, it is refused."""
        renamed = {new for a in self.allocators.values() for _, new in a.env_names}
        return key.startswith(tuple(self.setting_families())) or key in renamed or key in self.combine

    def install_line(self, names: list[str] | None = None) -> str:
        packages = sorted({self.allocators[n].package for n in names or self.allocators
                           if not self.allocators[n].is_system})
        return "apt-get install -y " + " ".join(packages)


@functools.cache
def load_catalog(path: str | None = None) -> Catalog:
    text = Path(path).read_bytes() if path else resources.files("alloclab.catalog").joinpath("allocators.toml").read_bytes()
    data = tomllib.loads(text.decode())
    tables = data["allocators"]
    allocators = {}
    for name, entry in tables.items():
        copied = entry.get("same_as")
        if copied:
            # A copy of another entry: its keys, all but whether it runs by default, under this one's.
            entry = {k: v for k, v in tables[copied].items() if k != "default"} | entry
        allocators[name] = Allocator.from_toml(name, entry)
    combine = {var: (fmt, sep) for var, (fmt, sep) in data.get("combine", {}).items()}
    return Catalog(allocators, combine, dict(data.get("examples", {})))


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


def bundled_form(facts, catalog: Catalog) -> "Allocator | None":
    """The catalog's entry for the allocator copy built into a program (its ElfFacts), if it knows one."""
    return next((a for a in catalog.allocators.values()
                 if a.bundled and set(a.bundled_symbols) & facts.defined), None)


def bundled_version(allocator: Allocator, program: Path) -> str:
    """The version of a bundled copy: its version string where it carries one (jemalloc does),
    else the first of its version marks found in the program's bytes (mimalloc carries no version
    string, but the names of its options, which changed with 2.1: purge_delay)."""
    found = embedded_version(str(program), allocator.version_regex)
    if found:
        return found
    try:
        data = Path(program).read_bytes()
    except OSError:
        return ""
    return next((version for mark, version in allocator.bundled_versions if mark.encode() in data), "")


def version_of(allocator: Allocator, path: Path | None) -> str:
    if allocator.bundled:
        return "bundled"
    if allocator.is_system:
        return glibc_version()
    if path is None:
        return "not installed"
    carrier = find_library(allocator.version_library) if allocator.version_library else path
    return (embedded_version(str(carrier or path), allocator.version_regex) or package_version(allocator.package)
            or soname_version(str(path)) or "unknown")
