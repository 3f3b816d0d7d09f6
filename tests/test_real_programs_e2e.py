"""Verification on real programs found on the machine, under glibc and every installed allocator.

Each program runs once, as the verification block runs it (LD_DEBUG=bindings, the variant's
environment), and the verdict must match what the binaries really are: Debian's python3 is a
non-PIE executable whose canonical PLT entry for malloc must not be mistaken for a definition;
redis-server is linked against libjemalloc, so its "glibc" variant runs under alloclab's
forwarding preload, and glibc-linked (nothing preloaded) truly is not glibc."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from alloclab.measure import forward, verify
from alloclab.catalog.elf import elf_facts
from alloclab.workloads.command import real_executable, resolve_command
from alloclab.catalog.variants import installed_variants, parse_variant
from conftest import missing_prerequisite, require_allocator

pytestmark = pytest.mark.e2e


def _postgres() -> str | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))
    return str(found[-1]) if found else shutil.which("postgres")


def real_programs(tmp: Path) -> dict[str, list[str]]:
    return {
        "python3": ["/usr/bin/python3", "-c", "x=[bytearray(700) for _ in range(2000)]"],
        "perl": ["perl", "-e", 'my @a = map { "x" x $_ } 1..2000'],
        "sqlite3": ["sqlite3", ":memory:", "create table t(a); insert into t values (randomblob(1000)); select count(*) from t;"],
        "xz": ["xz", "-6", "-c", "/etc/services"],
        "git": ["git", "init", "-q", str(tmp / "repo")],
        "postgres": [_postgres() or "postgres", "--describe-config"],
        "redis-server": ["redis-server", "--version"],
        "qemu-img": ["qemu-img", "create", "-q", "-f", "qcow2", str(tmp / "x.qcow2"), "1M"],
    }


def verdict(variant, argv: list[str], tmp: Path) -> verify.Evidence:
    """The variant as the runner runs it on this program (forward.for_cell)."""
    variant = forward.for_cell(variant, resolve_command(argv[0]))
    prefix = tmp / f"ld-{variant.label}"
    env = variant.apply(dict(os.environ)) | verify.ld_debug_env(prefix)
    proc = subprocess.run(argv, env=env, capture_output=True, timeout=60)
    assert proc.returncode == 0, (argv, variant.label, proc.stderr[-2000:])
    ev = verify.static_check(variant, resolve_command(argv[0]))
    verify.bindings_check(variant, prefix, ev)
    return ev


@pytest.mark.parametrize("name", ["python3", "perl", "sqlite3", "xz", "git", "postgres", "redis-server", "qemu-img"])
def test_real_program_is_verified_under_every_allocator(name, tmp_path):
    argv = real_programs(tmp_path)[name]
    if not (Path(argv[0]).exists() or shutil.which(argv[0])):
        missing_prerequisite(f"{name} is not installed (make test installs it: see DEB_TEST_PACKAGES)")
    exe = real_executable(resolve_command(argv[0]))
    linked = [n for n in elf_facts(exe).needed if n.startswith("libjemalloc")]
    for variant in installed_variants() + [parse_variant("glibc-linked")]:
        ev = verdict(variant, argv, tmp_path)
        if variant.is_system and not variant.allocator.forward and linked:
            # Linked against jemalloc: with nothing preloaded it really runs jemalloc, and says so.
            assert ev.status == "ineffective", (name, variant.label, ev)
            assert "linked against libjemalloc" in " ".join(ev.reasons)
        else:
            # glibc on redis-server: the forwarder is what malloc is bound to.
            assert ev.status == "verified", (name, variant.label, ev)


def test_non_pie_executable_taking_mallocs_address_is_verified(build, cli, store_of):
    """The python3 case on a program we build: the loader binds libc's malloc to the
    executable's canonical PLT entry, which itself binds to the preloaded allocator."""
    require_allocator("jemalloc")
    prog = build("malloc_address", "-no-pie", "-fno-pic")
    assert {"malloc", "free"} <= elf_facts(prog).canonical_plt
    p = cli("compare", "--runs", "1", "-a", "glibc", "-a", "jemalloc", "--", str(prog))
    assert p.returncode == 0, p.stderr
    e = store_of(cli.db).load()
    got = {e.variants[vi].label: v for (_, vi), v in e.verifications.items()}
    assert got["jemalloc"].status == "verified", got
    assert got["glibc"].status == "verified", got


@pytest.mark.parametrize("program,flags", [("own_malloc", ()), ("bundled", ()), ("churn", ("-static",))])
def test_true_cases_stay_ineffective(program, flags, build, tmp_path):
    """What really defeats the preload is still flagged after the PLT fix."""
    require_allocator("jemalloc")
    prog = build(program, *flags)
    args = ["100", "1"] if program == "churn" else []
    ev = verdict(parse_variant("jemalloc"), [str(prog), *args], tmp_path)
    assert ev.status == "ineffective", ev


def test_compare_on_debian_python3_verifies_every_allocator(cli, store_of):
    """The issue's command, through the CLI: no false INEFFECTIVE on the non-PIE python3."""
    if not Path("/usr/bin/python3").exists():
        missing_prerequisite("no /usr/bin/python3 (make test installs python3)")
    p = cli("compare", "--runs", "1", "--", "/usr/bin/python3", "-c", "x=[bytearray(700) for _ in range(20000)]")
    assert p.returncode == 0, p.stderr
    e = store_of(cli.db).load()
    got = {e.variants[vi].label: v.status for (_, vi), v in e.verifications.items()}
    assert set(got.values()) == {"verified"}, got
    assert "INEFFECTIVE" not in p.stdout
