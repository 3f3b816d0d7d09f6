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


# measure/verify.py's note where a program links an allocator: "cacheidle is linked against
# libjemalloc.so.2 (jemalloc): the preload takes over ...".
_LINKED = re.compile(r"^(\S+) is linked against (\S+) \(([^)]+)\)")


def linked(a: Analysis) -> tuple[str, str] | None:
    """(words, allocator) where the program links an allocator ("cacheidle links libjemalloc.so.2",
    "jemalloc"): the tune record's baseline, else the verification's notes; None where it links none."""
    rec = getattr(getattr(a.experiment, "config", None), "tune", None)
    base = (rec.baseline or {}) if rec is not None else {}
    if base.get("how") == "linked" and base.get("library"):
        return f"{base.get('program') or 'the program'} links {base['library']}", base.get("allocator", "")
    for w in a.workloads:
        for v in w.verification.values():
            for note in v.notes:
                if m := _LINKED.match(note):
                    return f"{m[1]} links {m[2]}", m[3]
    return None


def _programs(a: Analysis, argv: list[str] | None) -> list[str]:
    """The names of the programs the advice is for: the workload's, or every workload's."""
    argvs = [argv] if argv else [w.argv for w in a.workloads]
    rec = getattr(getattr(a.experiment, "config", None), "tune", None)
    named = [(rec.baseline or {}).get("program") or ""] if rec is not None else []
    return [n for n in named + [Path(x[0]).name for x in argvs if x] if n]


def _build_line(a: Analysis, allocator, env: dict[str, str], argv: list[str] | None) -> str | None:
    """The build-time equivalent that fits the program: a program linked to another allocator is
    relinked, not linked twice; one linked to this allocator needs no build change; a program's own
    build option (QEMU's --enable-malloc) only for that program."""
    if not allocator or not allocator.build_option or allocator.build_option == "(default)":
        return None
    tunables = {k: val for k, val in env.items() if k != "LD_PRELOAD"}
    stay = "; the tunables stay in the environment: " + " ".join(f"{k}={val}" for k, val in tunables.items()) \
        if tunables else ""
    names = _programs(a, argv)
    own = [hint for prefix, hint in allocator.build_for if any(n.startswith(prefix) for n in names)]
    links = linked(a)
    if links is not None and links[1] in {allocator.name, allocator.same_as} - {""}:
        if not tunables:
            return None
        return f"{links[0]} already: no build change" + stay
    if links is not None:
        flag = re.search(r"-l\S+", allocator.build_option)
        how = f" ({flag[0]} in place of {links[1]}'s)" if flag else ""
        return (f"{links[0]}: relink it against {allocator.name} instead{how}, or preload it as the run line "
                f"does" + (f" ({'; '.join(own)})" if own else "") + stay)
    return allocator.build_option + (f" ({'; '.join(own)})" if own else "") + stay


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
    else:
        build = _build_line(a, allocator, env, argv)
    return HowToApply(env_line, systemd, build, unset)
