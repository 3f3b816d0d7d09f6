"""What a refusal for rights names, from the facts the kernel's check reads (refusals.rights, over a
/proc laid out in the test's own directory): alloclab's capabilities and seccomp mode, the process's
owner, tracer and capabilities, Yama's scope, the user namespaces. A refusal that asks for a right
alloclab already has sends its user to fix the wrong thing; and as root with CAP_SYS_PTRACE in a
sandbox (a real PID 1 alloclab cannot read), it must say what is left."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from alloclab.measure.inspect.refusals import missing, rights

ALL_CAPS = "000001ffffffffff"
NO_PTRACE = f"{0x1ffffffffff & ~(1 << 19):016x}"


def _proc(tmp: Path, *, caps: str = ALL_CAPS, seccomp: int = 0, owner: int = 0, tracer: int = 0,
          its_caps: str = "0000000000000000", scope: str | None = None, ns: tuple[str, str] = ("u1", "u1")) -> Path:
    proc = tmp / "proc"
    for pid, status in (("self", f"Uid:\t0\t0\t0\t0\nCapEff:\t{caps}\nSeccomp:\t{seccomp}\n"),
                        ("123", f"Uid:\t{owner}\t{owner}\t{owner}\t{owner}\nTracerPid:\t{tracer}\n"
                                f"CapPrm:\t{its_caps}\n")):
        (proc / pid / "ns").mkdir(parents=True)
        (proc / pid / "status").write_text(status)
    os.symlink(f"user:[{ns[0]}]", proc / "self" / "ns" / "user")
    os.symlink(f"user:[{ns[1]}]", proc / "123" / "ns" / "user")
    if tracer:
        (proc / str(tracer)).mkdir()
        (proc / str(tracer) / "comm").write_text("strace\n")
    if scope is not None:
        (proc / "sys" / "kernel" / "yama").mkdir(parents=True)
        (proc / "sys" / "kernel" / "yama" / "ptrace_scope").write_text(scope + "\n")
    return proc


def _words(tmp: Path, me: int = 0, **facts) -> str:
    return missing(rights(123, proc=str(_proc(tmp, **facts)), sys=str(tmp / "sys"), me=me))


def test_root_with_cap_sys_ptrace_is_not_asked_for_it(tmp_path):
    text = _words(tmp_path)
    assert "with CAP_SYS_PTRACE" in text and "security module" in text, text
    assert "give alloclab CAP_SYS_PTRACE" not in text


def test_a_seccomp_filter_is_named(tmp_path):
    text = _words(tmp_path, seccomp=2)
    assert "seccomp filter" in text and "give alloclab CAP_SYS_PTRACE" not in text, text


def test_another_tracer_is_named(tmp_path):
    text = _words(tmp_path, tracer=77)
    assert "traced by process 77 (strace)" in text and "one tracer at most" in text, text


def test_another_user_namespace_is_named(tmp_path):
    text = _words(tmp_path, ns=("u1", "u2"))
    assert "another user namespace" in text, text


def test_without_the_capability_the_missing_right_is_asked_for(tmp_path):
    text = _words(tmp_path, me=1000, caps="0", owner=33)
    assert "uid 33 and alloclab as uid 1000" in text and "CAP_SYS_PTRACE" in text, text
    scope = _words(tmp_path / "b", me=1000, caps="0", owner=1000, scope="1")
    assert "ptrace_scope is 1" in scope, scope
    held = _words(tmp_path / "c", me=0, caps=NO_PTRACE, owner=0, its_caps=ALL_CAPS)
    assert "holds capabilities alloclab does not" in held, held


def test_a_scope_of_3_is_named_whatever_the_rights(tmp_path):
    assert "ptrace_scope is 3" in _words(tmp_path, scope="3")


def test_a_real_process_root_cannot_read_is_refused_with_what_is_left(cli):
    # Where alloclab runs as root with CAP_SYS_PTRACE and still cannot read PID 1 (a sandbox's
    # security module), the refusal says so, and asks for no right it has.
    me = rights(1)
    try:
        open("/proc/1/maps").close()
        readable = True
    except PermissionError:
        readable = False
    if os.geteuid() != 0 or not me.ptrace_cap or readable:
        pytest.skip("needs root with CAP_SYS_PTRACE and a PID 1 it cannot read (a sandbox)")
    r = cli("inspect", "1")
    text = " ".join(r.stderr.split())
    assert r.returncode == 2 and "Not permitted to read process 1" in text, text
    assert "with CAP_SYS_PTRACE" in text and "give alloclab CAP_SYS_PTRACE" not in text, text
