"""The named program is not what ran (issue 22, item 5): a shim like pyenv's python3 (a bash script
that runs shells and coreutils, then execs the real program) puts a dozen processes under the
allocator per run. The answer says so, with the command that measures the real program."""

from __future__ import annotations

import json
import stat

from conftest import require_allocator

from alloclab.stats.analysis import analyze

SHIM = """#!/bin/bash
# Plumbing as a version manager's shim does it: subshells, shells and coreutils, then exec.
for i in 1 2 3 4 5 6; do
  v=$(bash -c 'cat /dev/null; basename /x/y')
done
sleep 0.3 & sleep 0.3 &
exec {real} "$@"
"""


def test_a_shim_that_execs_the_program_is_named_as_the_wrapper_with_the_real_command(build, cli, store_of, tmp_path):
    require_allocator("jemalloc")
    real = build("churn")
    shim = tmp_path / "churn-shim"
    shim.write_text(SHIM.format(real=real))
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    # churn: 10 rounds, 1 MiB live, refuse nothing, sleep 0.2 s first so the sampler sees it.
    args = ["10", "1", "", "0.2"]
    p = cli("compare", "--runs", "2", "-a", "glibc", "-a", "jemalloc", "--", str(shim), *args)
    assert p.returncode == 0, p.stderr
    # The terminal's answer says it, right under the verdicts.
    assert f"{shim.name} is a wrapper, not the program" in " ".join(p.stdout.split())
    cli("report", "--format", "json", "-o", str(tmp_path / "r.json"), check=True)
    report = json.loads((tmp_path / "r.json").read_text())
    [line] = report["wrappers"]
    assert f"{shim.name} is a wrapper, not the program" in line
    assert "bash" in line and "churn" in line
    assert f"measure `{real} 10 1 '' 0.2` directly" in line
    # Per run: the images under the allocator, the shim's pid counted as bash before its exec.
    e = store_of(cli.db).load()
    runs = [r for r in e.runs if not r.warmup]
    for r in runs:
        exes = [q.get("exe") for q in json.loads(r.processes)]
        assert str(real) in exes and "/usr/bin/bash" in exes, exes
    [lines] = [res["processes"] for res in report["results"]]
    assert lines and "churn itself" in lines[0] and "of the faults" in lines[0]


def test_the_program_itself_gets_no_wrapper_line(build, cli, store_of):
    require_allocator("jemalloc")
    real = build("churn")
    p = cli("compare", "--runs", "2", "-a", "glibc", "-a", "jemalloc", "--", str(real), "10", "1", "", "0.2")
    assert p.returncode == 0, p.stderr
    assert "is a wrapper" not in p.stdout
    a = analyze(store_of(cli.db).load())
    assert a.workloads[0].wrapped is None   # one program ran: nothing to say
