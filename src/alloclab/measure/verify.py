"""Is the variant's allocator really serving the program's malloc?

Three kinds of evidence, combined into one status per variant:
  1. the ELF files before anything runs (static binary, setuid, an executable that defines
     malloc, a bundled prefixed allocator, an allocator library linked in);
  2. one untimed run under LD_DEBUG=bindings: in every process, which object the dynamic
     linker bound `malloc` and `free` to;
  3. in every measured run: the loader's "cannot be preloaded" message on stderr, and in every
     process of the tree whether the variant's library is mapped (a child that cleared its
     environment, say a server's backend, shows up here).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from alloclab.catalog import allocators as cat
from alloclab.catalog import in_use
from alloclab.catalog.elf import ElfFacts, elf_facts
from alloclab.errors import AlloclabError
from alloclab.workloads.command import real_executable

VERIFIED, INEFFECTIVE, UNKNOWN = "verified", "ineffective", "unknown"
CORE_API = ("malloc", "free")
PRELOAD_REFUSED = re.compile(r"ERROR: ld\.so: object '([^']*)' from LD_PRELOAD cannot be preloaded \(([^)]*)\): ignored")
_BINDING = re.compile(r"binding file (.+?) \[\d+\] to (.+?) \[\d+\]: normal symbol `([^']+)'")


def soname_allocator(soname: str, catalog: cat.Catalog) -> cat.Allocator | None:
    for a in catalog.allocators.values():
        if any(soname == lib or soname.split(".so")[0] == lib.split(".so")[0] for lib in a.libraries):
            return a
    return None


def shown_name(program: Path, exe: Path) -> str:
    """The program as the user named it when it is the executable itself, through a symlink
    (redis-server is a link to redis-check-rdb); else the executable (a script's interpreter)."""
    try:
        return program.name if program.resolve() == exe.resolve() else exe.name
    except OSError:
        return exe.name


# --- a static program: refused before anything runs ---------------------------------------

def _glibc_linked_in(facts, catalog: cat.Catalog) -> str:
    """What glibc's malloc linked into a static program still reads, in words ("" where it is not
    glibc's): its environment settings and tunables need no loader (a static program's
    MALLOC_MMAP_THRESHOLD_=1000000 keeps a 200 kB block in the heap). glibc's binaries carry the
    .note.ABI-tag note; musl's do not."""
    if ".note.ABI-tag" not in facts.sections and "_int_malloc" not in facts.defined:
        return ""
    tunables = catalog.get(cat.BASELINE).tunables
    names = [t.name for t in tunables if not t.via]
    grouped = {}
    for t in tunables:
        if t.via:
            grouped.setdefault(t.via, set()).add(t.name.rsplit(".", 1)[0] + ".*")
    names += [f"{via}'s {', '.join(sorted(fams))}" for via, fams in grouped.items()]
    return (f"that copy still reads glibc's settings from the environment ({', '.join(names)}), with no loader: "
            f"set them in the program's environment to tune it.")


def static_refusal(program: Path, catalog: cat.Catalog | None = None) -> AlloclabError | None:
    """Why no allocator can be compared on `program`, where it is statically linked: with no
    PT_INTERP the kernel starts it without the dynamic loader, which alone reads LD_PRELOAD, so
    every variant would run the same program. Said before a run or the store, since a race of
    identical programs answers only "keep the default" after minutes (a CGO_ENABLED=0 Go program
    took 118 s so). Names what tunes its heap instead where alloclab can tell: Go's runtime
    settings, a bundled allocator's own (they need no loader), a Rust program's allocator choice."""
    catalog = catalog or cat.load_catalog()
    exe = real_executable(program)
    facts = elf_facts(exe)
    if not facts.is_elf or not facts.is_static:
        return None
    name = shown_name(program, exe)
    text = (f"{name} is statically linked: its ELF header names no interpreter (PT_INTERP), so the kernel starts "
            f"it without the dynamic loader, which is what reads LD_PRELOAD. No allocator can be swapped in: every "
            f"variant would run the same program, so alloclab ran nothing and stored nothing.")
    form = cat.bundled_form(facts, catalog)
    glibc_inside = _glibc_linked_in(facts, catalog)
    settings = sorted(t.name if not t.via else dict(form.env_names).get(t.via, t.via)
                      for t in form.tunables) if form else []
    if ".go.buildinfo" in facts.sections or "runtime.mallocgc" in facts.defined:
        text += (" It is a Go program (built with CGO_ENABLED=0): its heap is the Go runtime's, not malloc's, and "
                 "the runtime's own settings tune it: GOGC (how far the heap grows between collections, 100 by "
                 "default: lower holds less memory for more collector CPU) and GOMEMLIMIT (a soft limit the "
                 "collector keeps the heap under, e.g. GOMEMLIMIT=512MiB). Built with cgo (CGO_ENABLED=1) it is "
                 "linked dynamically, and alloclab can compare allocators for its C side.")
    elif "rustc version" in facts.comment or any(d.startswith("__rust_") for d in facts.defined):
        if form is not None:
            text += (f" It is a Rust program whose global allocator is {form.bundled} built into it "
                     f"({', '.join(sorted(set(form.bundled_symbols) & facts.defined))}): that copy still reads its "
                     f"own settings from the environment ({', '.join(dict.fromkeys(settings))}), with no loader. "
                     f"Built for a dynamically linked target (x86_64-unknown-linux-gnu), `alloclab tune` races them.")
        elif glibc_inside:
            text += (" It is a Rust program on the system allocator, glibc's malloc linked in statically "
                     f"(-C target-feature=+crt-static): {glibc_inside} Built without crt-static it links glibc "
                     "dynamically and alloclab can compare allocators.")
        else:
            text += (" It is a Rust program on the system allocator linked in statically (musl's, which reads no "
                     "settings): built for x86_64-unknown-linux-gnu it links glibc dynamically and alloclab can "
                     "compare allocators, or a global allocator crate (mimalloc, tikv-jemallocator) brings one "
                     "whose own settings `alloclab tune` races.")
    elif form is not None:
        text += (f" It carries {form.bundled} built in ({', '.join(sorted(set(form.bundled_symbols) & facts.defined))}), "
                 f"which still reads its own settings from the environment ({', '.join(dict.fromkeys(settings))}).")
    else:
        text += f" Its malloc is glibc's, linked in: {glibc_inside}" if glibc_inside else ""
        text += (" Link it dynamically (without -static) to compare allocators, or link each allocator in at build "
                 "time (-ljemalloc, -ltcmalloc, -lmimalloc) and compare the builds' commands in an experiment file.")
    return AlloclabError(text)


# --- static verdict -------------------------------------------------------------------------

@dataclass
class Evidence:
    status: str = UNKNOWN
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def fail(self, reason: str) -> None:
        self.status = INEFFECTIVE
        if reason not in self.reasons:
            self.reasons.append(reason)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


def static_check(variant, program: Path, catalog: cat.Catalog | None = None) -> Evidence:
    """What the files alone say about whether the preload can take effect."""
    catalog = catalog or cat.load_catalog()
    ev = Evidence()
    exe = real_executable(program)
    facts = elf_facts(exe)
    name = shown_name(program, exe)   # redis-server, not the redis-check-rdb it links to
    if exe != program:
        ev.note(f"{program.name} is a script run by {exe}")
    if not facts.is_elf:
        ev.note(f"{exe} is not an ELF file; only the runtime check applies")
        return ev
    if facts.is_static:
        if variant.is_system:
            ev.note(f"{name} is statically linked: it runs the malloc built into it")
        else:
            ev.fail(f"{name} is statically linked: no dynamic loader runs, so LD_PRELOAD is ignored")
        return ev
    st = exe.stat()
    if (st.st_mode & stat.S_ISUID and st.st_uid != os.getuid()) or (st.st_mode & stat.S_ISGID and st.st_gid != os.getgid()):
        if not variant.is_system:
            ev.fail(f"{name} is setuid/setgid: the loader runs it in secure mode and ignores LD_PRELOAD")
    if "malloc" in facts.defined and "malloc" not in facts.imported:
        ev.fail(f"{name} defines malloc itself: symbol lookup finds the executable's malloc "
                f"before any preloaded library's")
    # Dependencies of the executable, to find allocators linked in or bundled in a library.
    libs = [(soname, cat.find_library(soname)) for soname in facts.needed]
    _check_indirect(ev, variant, exe, facts, catalog)
    for other in catalog.allocators.values():
        bundled = sorted(set(other.prefixed_symbols) & facts.defined)
        if bundled and variant.allocator is not None and variant.allocator.bundled == other.name:
            # The copy built in, run as it is with its own settings: what this variant names.
            ev.note(f"{name} bundles its own {other.name} ({', '.join(bundled)}): the variant runs that copy, "
                    f"nothing preloaded, with its own settings")
        elif bundled:
            ev.fail(f"{name} bundles its own {other.name} ({', '.join(bundled)}): LD_PRELOAD only "
                    f"swaps libc's malloc, the program's own allocations stay with the bundled copy")
    for soname, path in libs:
        linked = soname_allocator(soname, catalog)
        if linked is None or path is None:
            continue
        lib_api = elf_facts(path.resolve()).exported
        used = sorted(facts.imported & lib_api)
        if variant.is_system:
            ev.fail(f"{name} is linked against {soname} ({linked.name}): with no preload it runs "
                    f"{linked.name}, not glibc's malloc")
            ev.note(in_use.note(linked.name, f"{name} links {soname}"))
            continue
        if variant.library and variant.library.resolve() == path.resolve():
            ev.note(f"{name} is already linked against {soname}; the preload changes nothing but the settings")
            continue
        preload_api = elf_facts(variant.library.resolve()).exported if variant.library else frozenset()
        taken = [s for s in used if s in preload_api]
        kept = [s for s in used if s not in preload_api]
        ev.note(f"{name} is linked against {soname} ({linked.name}): the preload takes over "
                f"{', '.join(taken) or 'nothing it calls'}"
                + (f"; {', '.join(kept)} still reach the linked {linked.name}" if kept else ""))
    return ev


# The C and C++ runtimes: naming them says nothing about an application's own libraries.
_RUNTIME = re.compile(r"^(libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|ld-linux[^.]*)\.so")


def needed_closure(facts: ElfFacts) -> list[tuple[str, Path | None, str | None]]:
    """(soname, path, the library that needs it or None when the executable does), breadth first."""
    seen: set[str] = set()
    out: list[tuple[str, Path | None, str | None]] = []
    queue = [(soname, None) for soname in facts.needed]
    while queue:
        soname, via = queue.pop(0)
        if soname in seen:
            continue
        seen.add(soname)
        path = cat.find_library(soname)
        out.append((soname, path, via))
        if path is not None:
            queue += [(n, soname) for n in elf_facts(path.resolve()).needed]
    return out


def _check_indirect(ev: Evidence, variant, exe: Path, facts: ElfFacts, catalog: cat.Catalog) -> None:
    """What the libraries the program loads (transitively) link: a client of librbd/librados,
    say, runs whatever allocator those link, so both the linked and the clean case are stated."""
    closure = needed_closure(facts)
    indirect = []
    for soname, path, via in closure:
        linked = soname_allocator(soname, catalog)
        if linked is not None and via is not None:
            indirect.append(f"{soname} ({linked.name}) through {via}")
            if variant.is_system and not in_use.parse(ev.notes):
                ev.note(in_use.note(linked.name, f"{exe.name} links {soname} through {via}"))
    if indirect:
        text = f"{exe.name} loads an allocator through its libraries: {'; '.join(indirect)}"
        if variant.is_system:
            ev.fail(text + ": with no preload it runs that allocator, not glibc's malloc")
        else:
            ev.note(text + ": the preload takes over what it exports, the rest still reaches the linked one")
        return
    direct = [s for s, _, via in closure if via is None and not _RUNTIME.match(s)]
    if direct and not any(soname_allocator(s, catalog) for s, _, _ in closure):
        ev.note(f"{exe.name} and the {len(closure)} libraries it loads (DT_NEEDED, transitively; directly "
                f"{', '.join(direct)}) link no allocator; libraries opened at run time (dlopen) are covered by "
                f"the LD_DEBUG check only")


# --- runtime: LD_DEBUG=bindings -------------------------------------------------------------

def ld_debug_env(prefix: Path) -> dict[str, str]:
    return {"LD_DEBUG": "bindings", "LD_DEBUG_OUTPUT": str(prefix)}


def expected_target(variant) -> str:
    return str(variant.library.resolve()) if variant.library else "libc.so"


def _same_object(target: str, expected: str) -> bool:
    if expected == "libc.so":
        return Path(target).name.startswith("libc.so")
    try:
        return Path(target).resolve() == Path(expected)
    except OSError:
        return target == expected


def _is_canonical_plt(obj: str, symbol: str) -> bool:
    try:
        path = Path(obj).resolve()
    except OSError:
        return False
    return symbol in elf_facts(path).canonical_plt


def _follow_plt(symbol: str, targets: set[str], bindings: dict[tuple[str, str], set[str]]) -> set[str]:
    """Replace each canonical PLT entry among `targets` by what that entry is bound to.

    An entry whose own reference was never bound (lazy binding, never called) sent no call
    anywhere, so it drops out."""
    out: set[str] = set()
    seen: set[str] = set()
    todo = list(targets)
    while todo:
        obj = todo.pop()
        if obj in seen:
            continue
        seen.add(obj)
        if not _is_canonical_plt(obj, symbol):
            out.add(obj)
            continue
        todo += [t for t in bindings.get((obj, symbol), set()) if t != obj]
    return out


def _read_bindings(path: Path) -> dict[tuple[str, str], set[str]]:
    """(referencing object, symbol) -> the objects the loader bound that reference to."""
    bindings: dict[tuple[str, str], set[str]] = {}
    with open(path, errors="replace") as fh:
        for line in fh:
            m = _BINDING.search(line)
            if m and m.group(3) in CORE_API:
                bindings.setdefault((m.group(1), m.group(3)), set()).add(m.group(2))
    return bindings


def bindings_check(variant, prefix: Path, ev: Evidence) -> dict[int, dict[str, set[str]]]:
    """Read every LD_DEBUG_OUTPUT file of the verification run; per process, where malloc went."""
    per_pid: dict[int, dict[str, set[str]]] = {}
    expected = expected_target(variant)
    for f in sorted(prefix.parent.glob(prefix.name + ".*")):
        try:
            pid = int(f.suffix[1:])
        except ValueError:
            continue
        bindings = _read_bindings(f)
        targets: dict[str, set[str]] = {}
        for (obj, symbol), where in bindings.items():
            # The allocator's own reference to the malloc it replaces is its fallback for memory it did
            # not hand out (tbbmalloc's proxy frees the loader's early blocks with libc's free), not
            # where the program's calls go.
            if expected == "libc.so" or not _same_object(obj, expected):
                targets.setdefault(symbol, set()).update(where)
        per_pid[pid] = {symbol: _follow_plt(symbol, where, bindings) for symbol, where in targets.items()}
    if not per_pid:
        ev.note("the dynamic linker wrote no binding trace (static binary, setuid, or LD_DEBUG ignored)")
        return per_pid
    good = bad = 0
    for pid, targets in per_pid.items():
        where = targets.get("malloc", set()) | targets.get("free", set())
        if not where:
            continue
        wrong = sorted(t for t in where if not _same_object(t, expected))
        if wrong:
            bad += 1
            ev.fail(f"in process {pid}, malloc/free were bound to {', '.join(wrong)} instead of "
                    f"{Path(expected).name}")
            for t in wrong:
                other = soname_allocator(Path(t).name, cat.load_catalog())
                if other is not None and not in_use.parse(ev.notes):
                    ev.note(in_use.note(other.name, f"malloc bound to {Path(t).name} in process {pid}"))
        else:
            good += 1
    if good and not bad and ev.status != INEFFECTIVE:
        ev.status = VERIFIED
        ev.note(f"malloc and free bound to {Path(expected).name} in {good} process{'es' if good != 1 else ''}")
    elif not good and not bad:
        ev.note("no process called malloc through the dynamic linker")
    return per_pid


# --- runtime: every measured run ------------------------------------------------------------

def preload_refusals(stderr_text: str) -> list[str]:
    return [f"the loader refused the preload of {m.group(1)} ({m.group(2)})"
            for m in PRELOAD_REFUSED.finditer(stderr_text)]


LOADED_PAST_PRELOADS = b"/libc.so"


def maps_mention(pid: int, needle: str) -> bool | None:
    """Is a file whose path contains `needle` mapped into the process? None if unreadable, or
    too early to say."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as fh:
            maps = fh.read()
    except OSError:
        return None
    if needle.encode() in maps:
        return True
    # The loader maps every LD_PRELOAD object before the program's own libraries, libc among
    # them: a process without libc yet is still inside the loader (a freshly exec'd one that a
    # busy machine has not scheduled), and says nothing. A zombie has no mappings at all.
    return False if LOADED_PAST_PRELOADS in maps else None


def mapped_marker(variant) -> str:
    """What to look for in /proc/PID/maps: the preloaded library, or libc for the baseline."""
    return str(variant.library.resolve()) if variant.library else "/libc.so"
