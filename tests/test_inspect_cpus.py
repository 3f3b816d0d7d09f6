"""The CPUs a process may use size the arena rule's MALLOC_ARENA_MAX, not alloclab's own count: a
service pinned to one CPU, or in a cgroup allowed 1.5, runs no more threads at once than that. The
reader is tried on /proc and cgroup files laid out in the test's own directory (the machine's
cgroups are never changed), and on a real process pinned with `taskset -c 0`."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from alloclab.measure.inspect.cpus import cpu_list, usable
from inspect_helpers import inspection, pause_argv


def _layout(tmp: Path, allowed: str, cgroup_line: str, files: dict[str, str]) -> tuple[str, str]:
    proc, cg = tmp / "proc", tmp / "cgroup"
    (proc / "42").mkdir(parents=True)
    (proc / "42" / "status").write_text(f"Name:\tsvc\nCpus_allowed_list:\t{allowed}\n")
    (proc / "42" / "cgroup").write_text(cgroup_line + "\n")
    for rel, text in files.items():
        (cg / rel).parent.mkdir(parents=True, exist_ok=True)
        (cg / rel).write_text(text + "\n")
    return str(proc), str(cg)


def test_a_cpu_list_counts_ranges_and_singles():
    assert cpu_list("0-3,8,10-11") == 7 and cpu_list("0") == 1


def test_affinity_alone(tmp_path):
    proc, cg = _layout(tmp_path, "0-7", "0::/", {})
    assert usable(42, proc, cg)[0] == 8


def test_a_cgroup_v2_quota_and_its_tighter_parent(tmp_path):
    proc, cg = _layout(tmp_path, "0-7", "0::/system.slice/svc.service",
                       {"cpu.max": "max 100000", "system.slice/cpu.max": "250000 100000",
                        "system.slice/svc.service/cpu.max": "150000 100000"})
    n, how = usable(42, proc, cg)
    assert n == 2 and "quota 1.5 CPUs" in how, how        # 1.5 CPUs: two threads run at once
    proc, cg = _layout(tmp_path / "b", "0-7", "0::/a/b",
                       {"a/cpu.max": "100000 100000", "a/b/cpu.max": "400000 100000"})
    assert usable(42, proc, cg)[0] == 1


def test_a_cgroup_v1_quota(tmp_path):
    proc, cg = _layout(tmp_path, "0-3", "4:cpu,cpuacct:/docker/abc",
                       {"cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "300000",
                        "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000"})
    assert usable(42, proc, cg)[0] == 3


def test_the_affinity_bounds_a_looser_quota(tmp_path):
    proc, cg = _layout(tmp_path, "0", "0::/x", {"x/cpu.max": "800000 100000"})
    assert usable(42, proc, cg)[0] == 1


@pytest.mark.e2e
def test_a_process_pinned_to_one_cpu_is_told_one_arena(build, cli, tmp_path):
    taskset = shutil.which("taskset")
    if taskset is None:
        pytest.skip("taskset is not installed (util-linux)")
    prog = build("keptheap", "-pthread")

    def arena_max(argv):
        p = pause_argv(argv)
        try:
            (ins,) = inspection(cli("inspect", str(p.pid), "-f", "json"))
        finally:
            p.go()
        (f,) = [f for f in ins["answer"]["fired"] if f["rule"] == "glibc-arena-free"]
        (s,) = f["settings"]
        return ins["snapshot"]["cpus"], int(s["spec"].rsplit("=", 1)[1])

    # Five arenas (the main one and four threads'): half is 2, on a machine of two CPUs or more.
    cpus, plain = arena_max([str(prog), "tops", "12", "4"])
    assert cpus == len(os.sched_getaffinity(0)) and plain == min(2, cpus)
    assert arena_max([taskset, "-c", "0", str(prog), "tops", "12", "4"]) == (1, 1)


def test_a_programs_cpus_are_its_processes_fewest_bounded_by_the_cgroups_quota(tmp_path):
    from alloclab.measure.inspect.cpus import program_cpus
    proc, cg = _layout(tmp_path, "0-7", "0::/box", {"box/cpu.max": "200000 100000"})
    assert program_cpus([8, 4], pid=42, proc=proc, cgroup=cg)[0] == 2          # a container allowed 2 CPUs
    assert program_cpus([1, 8], pid=42, proc=proc, cgroup=cg)[0] == 1          # one process pinned to 1
    proc, cg = _layout(tmp_path / "b", "0-7", "0::/", {})
    assert program_cpus([0], pid=42, proc=proc, cgroup=cg) == (
        None, "neither its affinity nor a cgroup quota could be read")       # an older interposer's files


@pytest.mark.e2e
def test_tune_sizes_arena_max_from_the_cpus_a_pinned_program_may_use(build, tmp_path):
    # The fingerprint run reads the program's own affinity (taskset execs it in the same process):
    # a program pinned to one CPU is told one arena, not the host's count.
    from alloclab.tune.prescribe import prescribe
    from test_tune_e2e import fingerprint
    taskset = shutil.which("taskset")
    if taskset is None:
        pytest.skip("taskset is not installed (util-linux)")
    prog = str(build("arenabloat", "-pthread"))

    def arena_max(argv):
        readings = fingerprint(tmp_path, argv)
        rx = prescribe(readings, [])
        assert "glibc-arena-bloat" in rx.fired, rx.fired
        # The arena rules that fire (glibc-arena-bloat, and glibc-arena-free where the arenas keep free
        # memory) propose one MALLOC_ARENA_MAX, raced once.
        (c,) = [c for c in rx.candidates if "MALLOC_ARENA_MAX=" in c.spec]
        return readings["glibc"].get("cpus"), int(c.spec.rsplit("=", 1)[1])

    host = len(os.sched_getaffinity(0))
    assert arena_max([prog, "16", "16"]) == (host, min(host, 8))
    assert arena_max([taskset, "-c", "0", prog, "16", "16"]) == (1, 1)

    # In a container: the same real fingerprint, read with the count a cgroup quota allows in place of
    # the host's (the fixture's files, through the fingerprint's own reader): the rules size from it.
    from alloclab.measure.inspect.cpus import program_cpus
    from alloclab.store.db import Store
    from alloclab.tune.diagnosis import reading
    from conftest import run_cli
    db = tmp_path / "boxed.db"
    p = run_cli(["compare", "--db", str(db), "--fingerprint", "--runs", "1", "--no-verify", "-a", "glibc", "--",
                 prog, "16", "16"], timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    fp = Store(db).load(1).fingerprints[(0, 0)]
    for quota, want in (("200000 100000", 2), ("100000 100000", 1)):
        proc, cg = _layout(tmp_path / quota.split()[0], "0-15", "0::/box", {"box/cpu.max": quota})
        cpus, how = program_cpus([16], pid=42, proc=proc, cgroup=cg)
        assert cpus == want and "quota" in how, (cpus, how)
        boxed = {"glibc": reading("glibc", "glibc", {**fp, "cpus": cpus, "cpus_how": how})}
        specs = [(c.rule, c.spec) for c in prescribe(boxed, []).candidates if "MALLOC_ARENA_MAX=" in c.spec]
        assert specs and all(spec.endswith(f"MALLOC_ARENA_MAX={want}") for _, spec in specs), specs
