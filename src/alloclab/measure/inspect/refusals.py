"""The one-paragraph refusals of `alloclab inspect`: each names what is wrong and what to do.
Nothing is written into the process before any of them, and the process is left running."""

from __future__ import annotations

import os
from dataclasses import dataclass

from alloclab.errors import AlloclabError
from alloclab.measure.inspect.procfs import text_or_none as _read


def no_such_process(pid: int) -> AlloclabError:
    return AlloclabError(f"No process {pid} is running here. Give the id of a running process (`pgrep -f NAME`, "
                         f"`ps -e`); a process in a container is inspected by its id as this host sees it.")


def gone(pid: int, during: str) -> AlloclabError:
    return AlloclabError(f"Process {pid} exited while alloclab read {during}; nothing of it was kept, and nothing "
                         f"was left stopped. Inspect a process that keeps running, or run the program under "
                         f"`alloclab tune -- CMD` to read it from start to end.")


CAP_SYS_PTRACE = 19


@dataclass(frozen=True)
class Rights:
    """What decides whether alloclab may read a process, as /proc shows it: its own uid and
    capabilities and seccomp mode, the process's owner, tracer and capabilities, Yama's scope, the
    user namespaces, and the security modules the kernel runs (where /sys/kernel/security says)."""
    me: int
    caps: int                      # alloclab's effective capabilities
    seccomp: int                   # alloclab's seccomp mode: 0 none, 1 strict, 2 a filter
    owner: int | None              # the process's uid
    tracer: int = 0                # TracerPid: a process has one tracer at most
    tracer_name: str = ""
    its_caps: int | None = None    # the process's permitted capabilities
    scope: str | None = None       # kernel.yama.ptrace_scope; None: Yama is not running
    same_userns: bool | None = None   # None: the process's namespace could not be read
    lsm: tuple[str, ...] = ()

    @property
    def ptrace_cap(self) -> bool:
        return bool(self.caps >> CAP_SYS_PTRACE & 1)


def _status(text: str | None) -> dict[str, str]:
    return dict(ln.split(":", 1) for ln in (text or "").splitlines() if ":" in ln)


def rights(pid: int, proc: str = "/proc", sys: str = "/sys", me: int | None = None) -> Rights:
    """The facts, read where they are readable: a process alloclab may not read still shows its
    status to everyone."""
    mine, its = _status(_read(f"{proc}/self/status")), _status(_read(f"{proc}/{pid}/status"))
    uid = its.get("Uid", "").split()
    tracer = int(its.get("TracerPid", "0").strip() or 0)
    name = (_read(f"{proc}/{tracer}/comm") or "").strip() if tracer else ""
    scope = _read(f"{proc}/sys/kernel/yama/ptrace_scope")
    try:
        same = os.readlink(f"{proc}/self/ns/user") == os.readlink(f"{proc}/{pid}/ns/user")
    except OSError:
        same = None
    lsm = tuple(x for x in (_read(f"{sys}/kernel/security/lsm") or "").strip().split(",") if x)
    return Rights(me=os.geteuid() if me is None else me, caps=int(mine.get("CapEff", "0").strip() or "0", 16),
                  seccomp=int(mine.get("Seccomp", "0").strip() or 0), owner=int(uid[1]) if len(uid) > 1 else None,
                  tracer=tracer, tracer_name=name,
                  its_caps=int(its["CapPrm"].strip(), 16) if "CapPrm" in its else None,
                  scope=scope.strip() if scope is not None else None, same_userns=same, lsm=lsm)


def missing(r: Rights) -> str:
    """What is really missing, from the facts: the first of them that the kernel's check stops at."""
    traced = (f"; it is traced by process {r.tracer}" + (f" ({r.tracer_name})" if r.tracer_name else "") +
              ", and a process has one tracer at most: its stops are that tracer's") if r.tracer else ""
    if r.scope == "3":
        return ("kernel.yama.ptrace_scope is 3, which lets no process attach to another whatever its rights, "
                "until the next boot" + traced)
    if not r.ptrace_cap:
        if r.owner is not None and r.owner != r.me:
            return (f"it runs as uid {r.owner} and alloclab as uid {r.me}: run alloclab as that user, or with "
                    f"CAP_SYS_PTRACE (as root, or `sudo setpriv --inh-caps=+sys_ptrace ...`)" + traced)
        if r.scope == "2":
            return ("kernel.yama.ptrace_scope is 2, which lets only a process with CAP_SYS_PTRACE attach: give "
                    "alloclab CAP_SYS_PTRACE (run it as root)" + traced)
        if r.scope == "1":
            return ("kernel.yama.ptrace_scope is 1, which lets a process read only its own children: set it to 0 "
                    "(`sysctl kernel.yama.ptrace_scope=0`) or give alloclab CAP_SYS_PTRACE" + traced)
        if r.its_caps is not None and r.its_caps & ~r.caps:
            return (f"it holds capabilities alloclab does not (permitted {r.its_caps:#x} against alloclab's "
                    f"{r.caps:#x}), and a process may read only one whose capabilities it has: give alloclab "
                    f"CAP_SYS_PTRACE" + traced)
        return ("it is not dumpable (a setuid program, or one that called prctl(PR_SET_DUMPABLE, 0)), or a "
                "security module refuses: give alloclab CAP_SYS_PTRACE" + traced)
    # alloclab has CAP_SYS_PTRACE: what is left is a namespace, a seccomp filter or a security module.
    if r.same_userns is False:
        return ("the process is in another user namespace (a container's), where alloclab's CAP_SYS_PTRACE "
                "does not count: run alloclab in the process's namespace or in one above it (the host's)" + traced)
    who = f"alloclab runs as uid {r.me} with CAP_SYS_PTRACE" + (", as the process's owner" if r.owner == r.me else "")
    if r.seccomp == 2:
        return (f"{who}, under a seccomp filter (a container's profile) that may refuse ptrace: run it with a "
                f"profile that allows ptrace (`docker run --cap-add SYS_PTRACE`, or "
                f"`--security-opt seccomp=unconfined`)" + traced)
    active = f" ({', '.join(m for m in r.lsm if m not in ('capability', 'lockdown'))} run here)" if r.lsm else ""
    yama = "no Yama scope in the way" if r.scope in (None, "0") else f"Yama's scope {r.scope}"
    return (f"{who}, {yama} and no seccomp filter, and the kernel still refuses: a security module does{active} "
            f"(Landlock, where alloclab itself runs in a sandbox that may not reach processes outside it; "
            f"AppArmor, SELinux): run alloclab outside that sandbox, beside the process, and see the kernel's log or the "
            f"audit log for the module's word" + traced)


def not_permitted(pid: int, what: str, facts: Rights | None = None) -> AlloclabError:
    """What reading another process's memory needs: ptrace's attach rights over it."""
    facts = facts if facts is not None else rights(pid)
    return AlloclabError(f"Not permitted to read process {pid}'s {what}: reading another process's memory needs "
                         f"ptrace attach rights over it, and {missing(facts)}.")


def static(pid: int, exe: str) -> AlloclabError:
    return AlloclabError(f"Process {pid} ({exe}) is statically linked: no libc is mapped in it, so alloclab cannot "
                         f"tell which allocator and which layout its heap has. Inspect a dynamically linked "
                         f"build, or run it under `alloclab tune -- CMD`, whose launcher reads what it can.")


def musl(pid: int, path: str) -> AlloclabError:
    return AlloclabError(f"Process {pid} runs on musl libc ({path}), whose allocator alloclab cannot walk: only "
                         f"glibc's heaps (and a program's own channel, for jemalloc) are read from outside. Run "
                         f"a glibc build of the program, or measure it with `alloclab tune -- CMD`.")


def unknown_layout(pid: int, libc: str, version: str | None, arch: str, known: list[str]) -> AlloclabError:
    said = f"glibc {version} ({arch})" if version else f"a libc whose version could not be read ({arch})"
    return AlloclabError(f"Process {pid} runs {said} from {libc}, whose malloc layout alloclab does not know "
                         f"(it knows {', '.join(known)}); it refuses rather than guess at the structures it would "
                         f"read. Add the version's offsets to catalog/glibc_layouts.toml (from its debug "
                         f"symbols), or measure the program with `alloclab tune -- CMD`.")


def swapped_without_pagemap(pid: int) -> AlloclabError:
    return AlloclabError(f"Process {pid} has anonymous memory swapped out, and /proc/{pid}/pagemap cannot be read "
                         f"here to tell which pages: alloclab does not read swapped pages (that would bring them "
                         f"back in). Inspect it where pagemap is readable (leave out --no-pagemap; a container "
                         f"may need /proc unmasked), or once it is back in memory.")


def attach_refused(pid: int, why: str, fix: str) -> AlloclabError:
    return AlloclabError(f"alloclab inspect --attach did not call into process {pid}: {why}. Nothing was called "
                         f"and nothing written; the process runs as before. To read it: {fix}.")


def attach_inside(pid: int, library: str, tries: int, seconds: float, inside: list[tuple[int, str]]) -> AlloclabError:
    where = "; ".join(f"thread {tid}: {what}" if tid else what for tid, what in inside[:3])
    return AlloclabError(f"alloclab inspect --attach did not call into process {pid}: at each of its {tries} stops "
                         f"over {seconds:.1f} s a thread was inside {library} or could not be checked (at the last, "
                         f"{where}). A call into the allocator then could wait on a lock that thread holds, or run "
                         f"the allocator inside itself, so none was made; each stop was undone and the process "
                         f"runs as before. Try again when it is less busy in its allocator, or read it without "
                         f"--attach (smaps alone) or through a channel of the program's own.")


def call_faulted(pid: int, function: str, what: str) -> AlloclabError:
    return AlloclabError(f"alloclab inspect --attach called {function} in process {pid}, and the call faulted "
                         f"({what}) instead of returning. alloclab put back the thread's registers and stack and did "
                         f"not deliver the fault, so the process runs on; but the allocator may have stopped "
                         f"halfway through the call (a lock it took may still be held). Watch the process, and "
                         f"report this with the allocator's version: its statistics interface should not fault.")
