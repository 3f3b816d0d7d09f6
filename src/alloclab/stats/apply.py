"""How to apply a recommended variant: one shell line, a systemd drop-in, the build-time
equivalent where the catalog knows one; a recipe's run-time placeholders written <name>."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from alloclab.catalog import allocators as cat
from alloclab.measure import forward
from alloclab.measure.forward import FORWARDED
from alloclab.stats.analysis import Analysis


@dataclass(frozen=True)
class HowToApply:
    env_line: str           # one shell line that runs the program this way
    systemd: str            # a drop-in for a service
    build: str | None       # the build-time equivalent, where the catalog knows one
    unset: tuple[str, ...]  # baseline settings the recommended variant does not have



def _systemd_value(key: str, value: str) -> str:
    # systemd expands %-specifiers and C escapes inside Environment=; quote the whole assignment.
    text = f"{key}={value}".replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return f'Environment="{text}"'


# A recipe's stored command keeps the placeholders only a run can fill ({port}, {workdir}, ...):
# shown as <port>, unquoted, so that the line reads as "put yours here", not as a literal '{port}'.
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_MARK = "@@alloclab-placeholder-{}@@"


def command_text(argv: list[str] | None, info: dict | None = None) -> str:
    """The workload's command as one shell line; an experiment file's placeholders written <name>,
    {recipe_dir} filled from the file's place."""
    if not argv:
        return "CMD"
    info = info or {}
    recipe = info.get("experiment_file")
    if info.get("mode") != "service" and not recipe:
        return shlex.join(argv)   # a plain command's braces are the user's own text
    fixed = {"recipe_dir": str(Path(recipe).parent)} if recipe else {}
    names: list[str] = []

    def mark(m: re.Match) -> str:
        if m[1] in fixed:
            return fixed[m[1]]
        names.append(m[1])
        return _MARK.format(len(names) - 1)

    text = shlex.join(_PLACEHOLDER.sub(mark, arg) for arg in argv)
    for i, name in enumerate(names):
        text = text.replace(_MARK.format(i), f"<{name}>")
    return text


def apply_lines(env: dict[str, str], unset: tuple[str, ...], command: str) -> tuple[str, str]:
    """The shell line that runs `command` with `env` set (and `unset` removed), and the systemd
    drop-in that does the same for a service."""
    parts = (["env", *(f"-u {k}" for k in unset)] if unset else []) + \
        [f"{k}={shlex.quote(val)}" for k, val in env.items()] + [command]
    drop_in = ["# systemctl edit YOUR.service  (a drop-in in /etc/systemd/system/YOUR.service.d/)",
               "[Service]"]
    drop_in += [_systemd_value(k, val) for k, val in env.items()]
    drop_in += [f"UnsetEnvironment={k}" for k in unset]
    if not env and not unset:
        drop_in.append("# nothing to set: this is the default")
    return " ".join(parts), "\n".join(drop_in)


def _forwarded(a: Analysis, variant_idx: int) -> str | None:
    """Where the variant ran with glibc's malloc forced over an allocator the program links: the
    verification's words for it ("cacheidle links libjemalloc.so.2"), else None."""
    for w in a.workloads:
        v = w.verification.get(variant_idx)
        for note in (v.notes if v else []):
            if FORWARDED in note:
                return note.split(": ", 1)[0]
    return None


def how_to_apply(a: Analysis, variant_idx: int, argv: list[str] | None, info: dict | None = None) -> HowToApply:
    e = a.experiment
    v = e.variants[variant_idx]
    env: dict[str, str] = dict(v.env)
    catalog = cat.load_catalog()
    allocator = catalog.allocators.get(v.allocator or "")
    links = _forwarded(a, variant_idx) if allocator is not None and allocator.forward else None
    if links is not None:
        # What was measured: the forwarder preloaded; without it the program runs what it links.
        env = {"LD_PRELOAD": str(forward.forwarder(allocator.forward))} | \
            {k: val for k, val in env.items() if k != "LD_PRELOAD"}
    base_env = e.variants[a.baseline_idx].env
    unset = tuple(k for k in base_env if k not in env)
    env_line, systemd = apply_lines(env, unset, command_text(argv, info))
    build = None
    if links is not None:
        build = (f"{links}: link it without that allocator, and {allocator.name}'s malloc is its own, as measured "
                 f"here through alloclab's forwarding preload (the run line)")
    elif allocator and allocator.build_option and allocator.build_option != "(default)":
        build = allocator.build_option
        tunables = {k: val for k, val in env.items() if k != "LD_PRELOAD"}
        if tunables:
            build += "; the tunables stay in the environment: " + " ".join(f"{k}={val}" for k, val in tunables.items())
    return HowToApply(env_line, systemd, build, unset)
