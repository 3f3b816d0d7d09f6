"""Variants: an allocator plus its settings, written `NAME[:VAR=VALUE,...][@LABEL]`.

Examples: `glibc`, `glibc:MALLOC_TOP_PAD_=64M`, `jemalloc:narenas=2,dirty_decay_ms=0`,
`jemalloc:MALLOC_CONF=narenas:2,dirty_decay_ms:0`, `/opt/lib/libfoo.so:FOO=1@foo`.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path

from alloclab.catalog import allocators as cat
from alloclab.errors import AlloclabError
from alloclab.catalog.tunables import (TunableSetting, check_value, expand_size, looks_like_setting,
    misspelled, refuse_unknown, split_shared)

# Inherited settings that would change the allocator behind our back; the runner removes
# them so that the variant is the only allocator setting a run sees.
ALLOCATOR_ENV = re.compile("^(LD_PRELOAD|" + "|".join(
    re.escape(p) + (".*" if p.endswith("_") else "") for p in cat.load_catalog().environment() if "." not in p) + ")$")

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
__all__ = ["expand_size"]  # sweep and older callers import it from here


@dataclass(frozen=True)
class Setting:
    key: str
    written: str  # as the user wrote it, for labels
    value: str    # expanded

    @property
    def short(self) -> str:
        key = self.key
        for prefix in cat.load_catalog().setting_families():
            if key.startswith(prefix) and len(key) > len(prefix):
                key = key[len(prefix):]
                break
        return f"{key.rstrip('_')}={self.written}"


@dataclass(frozen=True)
class Variant:
    spec: str
    label: str
    allocator: cat.Allocator | None  # None: a custom library given by path
    library: Path | None             # None: the system allocator (no preload)
    settings: tuple[Setting, ...] = ()
    notes: tuple[str, ...] = ()
    tunables: tuple[TunableSetting, ...] = ()   # what the allocator is asked to read, to read back
    plain_env: tuple[str, ...] = ()             # variables passed through, not allocator settings
    env: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    written: "VariantSpec | None" = field(default=None, hash=False, compare=False)   # as parsed

    @property
    def name(self) -> str:
        return self.allocator.name if self.allocator else str(self.library)

    @property
    def is_system(self) -> bool:
        return self.library is None

    def version(self) -> str:
        if self.allocator:
            return cat.version_of(self.allocator, self.library)
        return cat.library_version(str(self.library), None) or "unknown"

    def apply(self, base_env: dict[str, str]) -> dict[str, str]:
        """The environment of a run: the caller's, less inherited allocator settings, plus ours."""
        env = {k: v for k, v in base_env.items() if not ALLOCATOR_ENV.match(k)}
        env.update(self.env)
        return env


def removed_from_env(base_env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in base_env.items() if ALLOCATOR_ENV.match(k)}


@dataclass(frozen=True)
class VariantSpec:
    """A variant as written, `NAME[:VAR=VALUE,...][@LABEL]`, read once where it comes in (the command
    line, an experiment file, a sweep's expansion) and carried typed from there: to parse_variant,
    which resolves it against this host's catalog, and over the fleet's wire (`to_dict`)."""

    name: str                                   # an allocator of the catalog, or a library's path
    settings: tuple[tuple[str, str], ...] = ()  # (VAR, VALUE as written)
    given_label: str | None = None              # after '@'
    text: str = ""                              # as written: what the store keeps as the spec

    @classmethod
    def parse(cls, text: str) -> "VariantSpec":
        text = text.strip()
        name, settings_text, label = split_written(text)
        return cls(name, tuple(parse_settings(text, settings_text)), label, text)

    @classmethod
    def of(cls, spec: "str | VariantSpec | dict") -> "VariantSpec":
        if isinstance(spec, VariantSpec):
            return spec
        if isinstance(spec, dict):   # the fleet's wire (to_dict): JSON gave the pairs back as lists
            wire = dict(spec)
            return cls(settings=tuple(tuple(p) for p in wire.pop("settings", ())), **wire)
        return cls.parse(spec)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def is_path(self) -> bool:
        return self.name.endswith(".so") or ".so." in self.name or "/" in self.name

    @property
    def base(self) -> str:
        """The allocator's name, or the library's file name without '.so...'."""
        return Path(self.name).name.split(".so")[0] if self.is_path else self.name

    @property
    def label(self) -> str:
        """The one label rule: the @LABEL given, else the base and its settings, shortened
        (`glibc TOP_PAD=64M`)."""
        if self.given_label is not None:
            return self.given_label
        shorts = [Setting(k, w, w).short for k, w in self.settings]
        return " ".join([self.base] + ([",".join(shorts)] if shorts else []))


def split_written(spec: str) -> tuple[str, str, str | None]:
    """(name or path, the settings' text, the @LABEL or None): a sweep's template splits so too."""
    label = None
    if "@" in spec:
        spec, label = spec.rsplit("@", 1)
        if not label:
            raise AlloclabError(f"Variant '{spec}@' has an empty label after '@'; write NAME@LABEL or drop the '@'.")
    m = re.match(r"^(.*?\.so(?:\.[0-9]+)*)(?::(.*))?$", spec)
    if m and ("/" in m.group(1) or m.group(1).endswith(".so")):
        return m.group(1), m.group(2) or "", label
    name, _, rest = spec.partition(":")
    return name, rest, label


def parse_settings(spec: str, text: str) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for segment in text.split(","):
        if not segment:
            continue
        if "=" in segment and _ENV_NAME.match(segment.split("=", 1)[0].replace(".", "_")):
            key, value = segment.split("=", 1)
            pairs.append((key.strip(), value.strip()))
        elif pairs:
            # A comma inside a value (MALLOC_CONF=narenas:2,dirty_decay_ms:0) continues it.
            key, value = pairs[-1]
            pairs[-1] = (key, f"{value},{segment}")
        else:
            raise AlloclabError(
                f"Cannot read the settings '{text}' of variant '{spec}': each setting is VAR=VALUE, "
                f"separated by commas, e.g. glibc:MALLOC_TOP_PAD_=64M,MALLOC_ARENA_MAX=2."
            )
    return pairs


def _check_library(spec: str, path: Path) -> None:
    from alloclab.catalog.elf import exported_allocator_symbols  # ELF parsing is dear: import late

    if not path.exists():
        raise AlloclabError(f"The allocator library '{path}' of variant '{spec}' does not exist; give the path of an installed .so.")
    missing = {"malloc", "free"} - exported_allocator_symbols(path)
    if missing:
        raise AlloclabError(
            f"'{path}' is not an allocator: it does not export {' and '.join(sorted(missing))}, so "
            f"LD_PRELOAD would leave glibc's malloc in place. Give the .so that defines malloc/free "
            f"(for example /usr/lib/x86_64-linux-gnu/libjemalloc.so.2)."
        )


def parse_variant(written: "str | VariantSpec", catalog: cat.Catalog | None = None) -> Variant:
    """The variant a spec names, resolved against this host's catalog and libraries."""
    catalog = catalog or cat.load_catalog()
    vs = VariantSpec.of(written)
    spec, name = vs.text, vs.name
    allocator: cat.Allocator | None = None
    if vs.is_path:
        library: Path | None = Path(name).expanduser().resolve()
        _check_library(spec, library)
    else:
        allocator = catalog.get(name)
        library = cat.locate(allocator)
        if not allocator.is_system and library is None:
            raise AlloclabError(
                f"Allocator '{name}' is not installed: none of {', '.join(allocator.libraries)} was found "
                f"in the linker cache or the usual library directories. Install it with "
                f"`apt-get install -y {allocator.package}` (as root), or give the path of the .so."
            )
        if library is not None:
            _check_library(spec, library)

    env: dict[str, str] = {}
    if library is not None:
        env["LD_PRELOAD"] = str(library)
    settings, notes, plain, checked, shared = [], [], [], [], {}
    for key, written in vs.settings:
        if allocator is None:
            # A library given by path: alloclab cannot know what it reads.
            value = expand_size(written)
            if not _ENV_NAME.match(key):
                raise AlloclabError(f"'{key}' in variant '{spec}' is not an environment variable name.")
            env[key] = value
        else:
            value = _allocator_setting(spec, allocator, key, written, catalog, checked, shared, env, plain)
        settings.append(Setting(key, written, value))
    renamed = dict(allocator.env_names) if allocator is not None else {}
    for var, items in shared.items():
        fmt, sep = catalog.combine.get(var, ("{key}={value}", ","))
        # A bundled copy reads the variable under its prefix's name (_RJEM_MALLOC_CONF).
        env[renamed.get(var, var)] = sep.join(fmt.format(key=k, value=v) for k, v in items)
    if allocator is None and settings:
        notes.append(f"{', '.join(f'{x.key}={x.written}' for x in settings)}: passed as environment; alloclab "
                     f"cannot check or read back the settings of a library given by path")
    if plain:
        notes.append(f"{', '.join(plain)}: plain environment, passed to the program unchanged (not a setting of {name})")

    return Variant(spec=spec, label=vs.label, allocator=allocator, library=library,
                   settings=tuple(settings), notes=tuple(notes), tunables=tuple(checked),
                   plain_env=tuple(plain), env=env, written=vs)


def _allocator_setting(spec: str, allocator: cat.Allocator, key: str, written: str, catalog: cat.Catalog,
                       checked: list, shared: dict, env: dict, plain: list) -> str:
    """Place one VAR=VALUE of a catalog allocator's variant; returns the value handed over."""
    tunable = allocator.tunable(key)
    if tunable is not None:
        value = check_value(spec, allocator, tunable, written)
        checked.append(TunableSetting(tunable, written, value))
        if tunable.via:
            shared.setdefault(tunable.via, []).append((key, value))
        else:
            env[key] = value
        return value
    if key in allocator.shared_vars():
        # The raw form (MALLOC_CONF=narenas:2,...): each key is checked and read back alike.
        values = []
        for sub, sub_written in split_shared(spec, key, written, catalog):
            sub_tunable = allocator.tunable(sub)
            if sub_tunable is None or sub_tunable.via != key:
                if key != "GLIBC_TUNABLES" or looks_like_setting(sub, catalog):
                    refuse_unknown(spec, sub, allocator, catalog, inside=key)
                values.append((sub, sub_written))   # another glibc tunable (glibc.pthread...)
                continue
            sub_value = check_value(spec, allocator, sub_tunable, sub_written)
            checked.append(TunableSetting(sub_tunable, sub_written, sub_value))
            values.append((sub, sub_value))
        shared.setdefault(key, []).extend(values)
        fmt, sep = catalog.combine[key]
        return sep.join(fmt.format(key=k, value=v) for k, v in values)
    if looks_like_setting(key, catalog) or misspelled(key, allocator):
        refuse_unknown(spec, key, allocator, catalog)
    if not _ENV_NAME.match(key):
        raise AlloclabError(
            f"'{key}' in variant '{spec}' is neither a setting of {allocator.name} nor an environment "
            f"variable name. Run `alloclab allocators` to list the settings.")
    env[key] = written
    plain.append(f"{key}={written}")
    return written


def installed_variants(catalog: cat.Catalog | None = None) -> list[Variant]:
    """One plain variant per installed allocator, the baseline first."""
    catalog = catalog or cat.load_catalog()
    names = [n for n, a in catalog.allocators.items() if a.default and cat.is_installed(a)]
    names.sort(key=lambda n: n != cat.BASELINE)
    return [parse_variant(n, catalog) for n in names]


def parse_variants(specs: "list[str | VariantSpec]", catalog: cat.Catalog | None = None) -> list[Variant]:
    variants = [parse_variant(s, catalog) for s in specs] if specs else installed_variants(catalog)
    seen: dict[str, str] = {}
    for v in variants:
        if v.label in seen:
            raise AlloclabError(
                f"Variants '{seen[v.label]}' and '{v.spec}' have the same label '{v.label}'. Give one a "
                f"label of its own with @LABEL, e.g. '{v.spec}@{v.name}-b'."
            )
        seen[v.label] = v.spec
    return variants
