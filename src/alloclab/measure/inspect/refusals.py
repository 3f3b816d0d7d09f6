"""The one-paragraph refusals of `alloclab inspect`: each names what is wrong and what to do.
Nothing is written into the process before any of them, and the process is left running."""

from __future__ import annotations

import os

from alloclab.errors import AlloclabError


def no_such_process(pid: int) -> AlloclabError:
    return AlloclabError(f"No process {pid} is running here. Give the id of a running process (`pgrep -f NAME`, "
                         f"`ps -e`); a process in a container is inspected by its id as this host sees it.")


def gone(pid: int, during: str) -> AlloclabError:
    return AlloclabError(f"Process {pid} exited while alloclab read {during}; nothing of it was kept, and nothing "
                         f"was left stopped. Inspect a process that keeps running, or run the program under "
                         f"`alloclab tune -- CMD` to read it from start to end.")


def _ptrace_scope() -> str | None:
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as fh:
            return fh.read().strip()
    except OSError:
        return None


def not_permitted(pid: int, what: str) -> AlloclabError:
    """What reading another process's memory needs: ptrace's attach rights over it."""
    try:
        owner = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        owner = None
    me = os.geteuid()
    scope = _ptrace_scope()
    needs = []
    if owner is not None and owner != me:
        needs.append(f"it runs as uid {owner} and alloclab as uid {me}: run alloclab as that user, or with "
                     f"CAP_SYS_PTRACE (as root, or `sudo setpriv --inh-caps=+sys_ptrace ...`)")
    elif scope not in (None, "0"):
        needs.append(f"kernel.yama.ptrace_scope is {scope}, which lets a process read only its own children: "
                     f"set it to 0 (`sysctl kernel.yama.ptrace_scope=0`) or give alloclab CAP_SYS_PTRACE")
    else:
        needs.append("it is not dumpable (a setuid program, or one that called prctl(PR_SET_DUMPABLE, 0)), or "
                     "a security module refuses: give alloclab CAP_SYS_PTRACE")
    return AlloclabError(f"Not permitted to read process {pid}'s {what}: reading another process's memory needs "
                         f"ptrace attach rights over it, and {needs[0]}.")


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
