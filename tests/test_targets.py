"""A target (a command, the built-in workloads, an experiment file) becomes workloads in one function,
measure/targets.py's workloads_for: run's options of a file are checked there, for run on this
machine and for a fleet's host alike (tests/test_layout.py fails on a second such function)."""

from __future__ import annotations

import textwrap

import pytest

from alloclab.errors import AlloclabError
from alloclab.measure.targets import CommandTarget, FileTarget, workloads_for

SERVICE = """\
[experiment]
name = "toy"
variants = ["glibc"]

[service]
command = ["server", "--port", "{port}"]
ready = { tcp = true }

[[client]]
name = "a"
command = ["client", "{port}"]
"""
COMMANDS = """\
[experiment]
name = "toys"
variants = ["glibc"]
runs = 7

[[command]]
name = "one"
command = ["true"]
"""


def write(tmp_path, text: str, name: str):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_idle_is_refused_by_run_for_a_file_without_a_server_and_when_negative(cli, tmp_path):
    commands, service = write(tmp_path, COMMANDS, "cmd.toml"), write(tmp_path, SERVICE, "svc.toml")
    p = cli("run", str(commands), "--idle", "5")
    assert p.returncode != 0 and "--idle is the rest of a server after its load" in p.stderr, p.stderr
    assert "cmd.toml runs no server" in p.stderr and "leave --idle out" in p.stderr
    p = cli("run", str(service), "--idle", "-1")
    assert p.returncode != 0 and "--idle cannot be negative (got -1)" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and not cli.db.exists()   # refused before anything was stored


def test_a_fleet_host_checks_idle_in_the_same_function(tmp_path):
    # What a host rebuilds from the wire goes through workloads_for too: the check is not skipped there.
    from alloclab.fleet.spec import SessionSpec, build_workloads
    from alloclab.measure.runner import Settings

    service = write(tmp_path, SERVICE, "svc.toml")
    spec = SessionSpec.from_json(SessionSpec("run", {"target": str(service), "param": [], "idle": -2.5},
                                             [], Settings(runs=2)).to_json())
    assert spec.inputs == FileTarget(str(service), idle=-2.5)
    with pytest.raises(AlloclabError, match=r"--idle cannot be negative \(got -2.5\)"):
        build_workloads(spec)


def test_a_file_gives_its_own_defaults_whichever_command_runs_it(tmp_path):
    from alloclab import defaults

    built = workloads_for(FileTarget(str(write(tmp_path, COMMANDS, "cmd.toml"))), base=defaults.TUNE)
    try:
        assert built.title == "toys" and [w.name for w in built.workloads] == ["toys"]
        assert built.defaults.first_look == 7 and built.defaults.budget == defaults.RUN.budget
    finally:
        built.cleanup()
    built = workloads_for(CommandTarget(["true", "{n}"], param=["n=1,2"]), base=defaults.COMPARE)
    assert built.defaults is defaults.COMPARE and [w.argv[-1] for w in built.workloads] == ["1", "2"]
    assert built.sweeps and built.sweeps[0]["param"] == "n"
