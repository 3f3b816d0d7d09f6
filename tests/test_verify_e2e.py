"""Proof that the allocator is really in use, on tiny real programs and real allocators."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import stat
import subprocess
import time

import pytest

from alloclab.measure import verify
from alloclab.catalog.variants import parse_variant
from alloclab.errors import AlloclabError
from conftest import installed_allocators, require_allocator

pytestmark = pytest.mark.e2e


def statuses(store_of, db, workload_idx=0):
    e = store_of(db).load()
    return {e.variants[vi].label: v for (wi, vi), v in e.verifications.items() if wi == workload_idx}


def test_every_installed_allocator_is_verified_on_a_normal_program(build, cli, store_of):
    prog = build("churn")
    p = cli("compare", "--details", "--runs", "1", "--warmup", "0", "--metric", "ops=ops/s: (\\d+)", "--", str(prog), "200", "4")
    assert p.returncode == 0, p.stderr
    got = statuses(store_of, cli.db)
    assert set(got) == set(installed_allocators())
    for label, v in got.items():
        assert v.status == "verified", (label, v)
    assert "verified" in p.stdout


# A static binary is refused before compare runs it: tests/test_static_refused_e2e.py.


def test_executable_defining_malloc_is_ineffective(build, cli, store_of):
    require_allocator("jemalloc")
    prog = build("own_malloc")
    p = cli("compare", "--runs", "1", "-a", "glibc", "-a", "jemalloc", "--", str(prog))
    assert p.returncode == 0, p.stderr
    got = statuses(store_of, cli.db)
    assert got["jemalloc"].status == "ineffective"
    reasons = " ".join(got["jemalloc"].reasons)
    assert "defines malloc itself" in reasons
    # The runtime trace agrees with the static check: malloc was bound to the executable.
    assert "instead of libjemalloc" in reasons


def test_bundled_prefixed_allocator_is_ineffective(build, cli, store_of):
    require_allocator("tcmalloc")
    prog = build("bundled")
    p = cli("compare", "--runs", "1", "-a", "glibc", "-a", "tcmalloc", "--", str(prog))
    assert p.returncode == 0, p.stderr
    got = statuses(store_of, cli.db)
    assert got["tcmalloc"].status == "ineffective"
    assert "bundles its own jemalloc (je_free, je_malloc)" in " ".join(got["tcmalloc"].reasons)


def test_program_linked_against_an_allocator_says_which_calls_move(build, cli, store_of):
    require_allocator("jemalloc")
    require_allocator("mimalloc")
    lib = str(parse_variant("jemalloc").library)
    prog = build("linked", lib)
    p = cli("compare", "--runs", "1", "-a", "glibc-linked", "-a", "mimalloc", "--", str(prog))
    assert p.returncode == 0, p.stderr
    got = statuses(store_of, cli.db)
    # Without a preload (glibc-linked: not even alloclab's forwarder) the program runs jemalloc,
    # so that baseline is not glibc. (The forwarder itself: test_forward_e2e.py.)
    assert got["glibc-linked"].status == "ineffective"
    assert "linked against libjemalloc.so.2" in " ".join(got["glibc-linked"].reasons)
    notes = " ".join(got["mimalloc"].notes)
    assert "takes over free, malloc" in notes and "mallctl still reach the linked jemalloc" in notes
    assert got["mimalloc"].status == "verified"


def test_setuid_binary_owned_by_another_user_is_ineffective(build, tmp_path):
    require_allocator("jemalloc")
    if os.getuid() != 0:
        pytest.skip("needs root to give a file to another owner")
    prog = tmp_path / "suid-churn"
    shutil.copy(build("churn"), prog)
    os.chown(prog, 65534, 65534)
    os.chmod(prog, 0o755 | stat.S_ISUID)
    ev = verify.static_check(parse_variant("jemalloc"), prog)
    assert ev.status == "ineffective"
    assert "setuid" in ev.reasons[0]


def test_loader_refusal_message_is_detected():
    text = ("ERROR: ld.so: object '/nope/libx.so' from LD_PRELOAD cannot be preloaded "
            "(cannot open shared object file): ignored.\nok\n")
    assert verify.preload_refusals(text) == [
        "the loader refused the preload of /nope/libx.so (cannot open shared object file)"]


def test_shared_object_without_malloc_is_refused_before_anything_runs(build, cli):
    lib = build("notalloc", shared=True)
    with pytest.raises(AlloclabError, match="not an allocator: it does not export free and malloc"):
        parse_variant(str(lib))
    p = cli("compare", "--runs", "1", "-a", "glibc", "-a", str(lib), "--", "true")
    assert p.returncode == 2
    assert "not an allocator" in p.stderr
    assert not cli.db.exists() or "runs" not in p.stdout


def test_a_process_still_inside_the_loader_is_not_judged_escaped(build):
    """Stopped at its exec, before the loader has mapped anything: a sampler that looks then (a
    busy machine leaves a new process unscheduled for tens of ms) must not call it escaped; once
    the loader has mapped libc, an absent preload is an escape."""
    libc = ctypes.CDLL(None, use_errno=True)
    prog = build("churn")
    child = subprocess.Popen([str(prog), "50", "1"], preexec_fn=lambda: libc.ptrace(0, 0, None, None),
                             stdout=subprocess.DEVNULL)   # PTRACE_TRACEME: stops with SIGTRAP at exec
    try:
        _, status = os.waitpid(child.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status) and os.WSTOPSIG(status) == signal.SIGTRAP
        assert verify.maps_mention(child.pid, "/libjemalloc.so") is None
        assert verify.maps_mention(child.pid, "/ld-linux") is True
    finally:
        child.kill()
        child.wait()
    plain = subprocess.Popen(["sleep", "5"])
    try:
        for _ in range(200):
            if verify.maps_mention(plain.pid, "/libjemalloc.so") is not None:
                break
            time.sleep(0.01)
        assert verify.maps_mention(plain.pid, "/libjemalloc.so") is False
    finally:
        plain.kill()
        plain.wait()
