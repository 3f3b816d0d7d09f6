"""--setup, --prepare and --cleanup end to end, as hyperfine's: on a real command that refuses to run
twice without its --prepare, their order and counts read from a log the hooks and the runs append
to, and each failure path (a failing setup, prepare or cleanup; Ctrl-C inside a hook)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from alloclab.store.db import Store
from conftest import ALLOCLAB, run_cli, running, still_left

pytestmark = pytest.mark.e2e

# The workload: `set -C` makes `>` refuse an existing file, so every run fails unless --prepare
# removed the previous run's out.txt. Each run says so in log.txt, as each hook does.
WORKLOAD = "#!/bin/sh\nset -C\necho run >> log.txt\necho out > out.txt\n"
SETUP, CLEANUP = "echo setup >> log.txt", "echo cleanup >> log.txt"
PREPARE = "echo prepare >> log.txt; rm -f out.txt"
VARIANTS = ["-a", "glibc", "-a", "glibc:MALLOC_ARENA_MAX=2"]


@pytest.fixture
def here(tmp_path):
    """A directory with the workload in it: the hooks, like hyperfine's, run in the current one."""
    wl = tmp_path / "wl.sh"
    wl.write_text(WORKLOAD)
    wl.chmod(0o755)
    return tmp_path


def compare(here, *options: str, runs: int = 3):
    return run_cli(["compare", "--db", "h.db", "--runs", str(runs), "--warmup", "1", *VARIANTS, *options,
                    "--", "./wl.sh"], cwd=here)


def log(here) -> list[str]:
    return (here / "log.txt").read_text().split()


def test_setup_once_prepare_before_every_run_cleanup_once_and_stored(here):
    p = compare(here, "--setup", SETUP, "--prepare", f"{PREPARE}; sleep 0.5", "--cleanup", CLEANUP,
                "--export-json", "e.json")
    assert p.returncode == 0, p.stdout + p.stderr
    e = Store(here / "h.db").load()
    assert e.row.status == "complete"
    # One warm-up block and three measured ones, of two variants: eight runs, each after its prepare.
    assert len(e.runs) == 8 and all(r.status == "ok" for r in e.runs), [(r.status, r.error) for r in e.runs]
    assert log(here) == ["setup"] + ["prepare", "run"] * 8 + ["cleanup"]
    # The prepare's half second is outside each run's measurement.
    assert max(r.metrics["wall_s"] for r in e.runs) < 0.4, [r.metrics["wall_s"] for r in e.runs]
    hooks = {"setup": SETUP, "prepare": f"{PREPARE}; sleep 0.5", "cleanup": CLEANUP}
    assert e.config.get("hooks") == hooks
    assert json.loads((here / "e.json").read_text())["config"]["hooks"] == hooks
    # The report's metadata says what ran around the runs.
    md = run_cli(["report", "--db", "h.db", "-f", "md", "--details"], cwd=here)
    assert f"--setup {SETUP}; --prepare {PREPARE}; sleep 0.5; --cleanup {CLEANUP}" in md.stdout, md.stdout


def test_without_prepare_the_workload_fails_its_second_run(here):
    # The check above is only worth something if the workload does need its prepare.
    p = compare(here, runs=1)
    assert p.returncode != 0 or "failed" in p.stderr
    assert any(r.status != "ok" for r in Store(here / "h.db").load().runs)


def test_prepare_runs_before_each_fingerprint_run_too(here):
    p = compare(here, "--prepare", PREPARE, "--fingerprint", runs=1)
    assert p.returncode == 0, p.stdout + p.stderr
    e = Store(here / "h.db").load()
    # Two fingerprint runs (one a variant), then one warm-up block and one measured: six in all.
    assert log(here) == ["prepare", "run"] * 6
    assert all(r.status == "ok" for r in e.runs)


def test_a_failing_prepare_stops_with_one_paragraph_and_keeps_the_runs(here):
    third = (f"{PREPARE}; [ $(grep -c prepare log.txt) -lt 3 ] || {{ echo 'disk full' >&2; exit 4; }}")
    p = compare(here, "--prepare", third, "--cleanup", CLEANUP)
    assert p.returncode == 2
    said = p.stderr[p.stderr.index("error:"):].strip()
    assert "\n" not in said, said
    for words in ("The --prepare command failed before run ", "with exit status 4", "its output ended: disk full",
                  f"The command was: {third}.", "or leave --prepare out",
                  "The runs measured so far are kept in h.db as experiment 1"):
        assert words in said, (words, said)
    e = Store(here / "h.db").load()
    assert e.row.status == "failed" and len(e.runs) == 2 and all(r.status == "ok" for r in e.runs)
    assert log(here) == ["prepare", "run", "prepare", "run", "prepare", "cleanup"]


def test_a_failing_setup_runs_nothing_stores_nothing_and_loses_nothing(here):
    assert compare(here, "--prepare", PREPARE, runs=1).returncode == 0
    before = Store(here / "h.db").load()
    (here / "log.txt").unlink()
    p = compare(here, "--setup", "echo no server here; exit 3", "--prepare", PREPARE, "--cleanup", CLEANUP)
    assert p.returncode == 2
    said = p.stderr[p.stderr.index("error:"):].strip()
    assert "\n" not in said, said
    assert ("The --setup command failed before the experiment's first run, with exit status 3; its output "
            "ended: no server here.") in said and "leave --setup out. Nothing was measured or stored." in said
    # Neither prepare nor the program ran, and cleanup follows only a setup that succeeded.
    assert not (here / "log.txt").exists()
    store = Store(here / "h.db")
    assert [r.id for r in store.listing()] == [before.row.id]
    assert len(store.load(before.row.id).runs) == len(before.runs)


def test_a_failing_cleanup_is_said_and_the_results_stand(here):
    # A megabyte of output before its last line: that line is what is said.
    noisy = "head -c 1000000 /dev/zero | tr '\\0' x; echo; echo busy >&2; exit 1"
    p = compare(here, "--prepare", PREPARE, "--cleanup", noisy, runs=1)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "The --cleanup command failed after the experiment's last run, with exit status 1; its output ended: busy." in p.stderr
    assert "x" * 400 not in p.stderr
    assert "Results stored in h.db (experiment 1)" in p.stdout
    assert Store(here / "h.db").load().row.status == "complete"


# A hook that hangs, as a shell's child, once `log.txt` holds `n` lines with its word.
HANG = "[ $(grep -c {word} log.txt) -lt {n} ] || {{ sleep 60 & echo $! > hung.pid; wait; }}"


def interrupted(here, *options: str):
    """alloclab compare with `options`, interrupted (Ctrl-C) once a hook hangs: its stderr, and
    whether the hook's child was gone after."""
    proc = subprocess.Popen([*ALLOCLAB, "compare", "--db", "h.db", "--runs", "3", "--warmup", "1", *VARIANTS,
                             *options, "--", "./wl.sh"], cwd=here,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid_file = here / "hung.pid"
    deadline = time.monotonic() + 120
    while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    hung = int(pid_file.read_text())
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    return err, not still_left(lambda: running([hung]))


def test_ctrl_c_inside_prepare_stops_its_tree_cleans_up_and_keeps_the_runs(here):
    err, stopped = interrupted(here, "--prepare", f"{PREPARE}; " + HANG.format(word="prepare", n=2),
                               "--cleanup", CLEANUP)
    assert "Interrupted" in err and "alloclab report --db h.db 1" in err
    assert stopped
    assert log(here) == ["prepare", "run", "prepare", "cleanup"]
    e = Store(here / "h.db").load()
    assert e.row.status == "interrupted" and len(e.runs) == 1


def test_ctrl_c_inside_cleanup_stops_it_and_the_experiment_stays_complete(here):
    err, stopped = interrupted(here, "--prepare", PREPARE, "--cleanup", f"{CLEANUP}; " + HANG.format(word="cleanup", n=1))
    assert "Interrupted inside --cleanup, which was stopped: finish its work by hand." in err, err
    assert "kept in h.db as experiment 1" in err
    assert stopped
    assert log(here) == ["prepare", "run"] * 8 + ["cleanup"]
    e = Store(here / "h.db").load()
    assert e.row.status == "complete" and len(e.runs) == 8


def test_hooks_are_refused_where_they_cannot_run(here):
    p = compare(here, "--prepare", "  ")
    assert p.returncode == 2 and "an empty one runs nothing: leave the option out" in p.stderr
    p = run_cli(["compare", "--fleet", "local:2", "--setup", SETUP, "--", "true"], cwd=here)
    assert p.returncode == 2 and "--setup cannot be combined with --fleet yet" in p.stderr
    # hyperfine's -p is --prepare; alloclab's -p was --param: an error that names both, for now.
    p = run_cli(["compare", "-p", "n=1", "--", "true"], cwd=here)
    assert p.returncode == 2 and "-p is --prepare" in p.stderr and "-p n=1 is --param n=1" in p.stderr
    assert not os.path.exists(here / "log.txt")


@pytest.mark.parametrize("command", ["compare", "run", "suite"])
def test_each_measuring_command_takes_the_hooks(command):
    p = run_cli([command, "--help"], env={**os.environ, "COLUMNS": "200"})
    assert p.returncode == 0
    for option in ("--setup", "--prepare", "--cleanup"):
        assert option in p.stdout, (command, option)
