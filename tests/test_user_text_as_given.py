"""A command the user wrote comes back as they wrote it: what inspect, report, tune and compare print as
"run:" (and "race it:") is pasted into a shell, so a bracket rich read as a markup tag
(`x=[bytearray(100000) ...]` printed as `x=`), a quote lost or a `$` left unquoted would make the
pasted line a different program."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys

import pytest

from test_golden_reports import FIXTURES

# Prints a line with a dollar, brackets and quotes; with HOLD set, keeps freed memory at the top of
# glibc's heap under a raised trim threshold (a 16 MiB mmapped block freed raises it to 32 MiB, then
# 30 MiB of 100 KB blocks are freed) and waits to be inspected.
PROGRAM = ("import os, sys; b = bytearray(16 << 20); del b; x = [bytearray(100000) for _ in range(300)]; "
           "del x; print(\"cost: $5 [ok] 'q'\", flush=True); "
           "os.environ.get('HOLD') and (sys.stderr.write('paused\\n'), sys.stderr.flush(), sys.stdin.read())")
PRINTED = "cost: $5 [ok] 'q'\n"


def _run_line(text: str, label: str) -> str:
    """The shell line after LABEL (`run:`, `race it:`): the first one printed."""
    line = next((x for x in text.splitlines() if x.strip().startswith(label)), None)
    assert line is not None, f"no {label!r} line in:\n{text}"
    return line.strip()[len(label):].strip()


def _in_shell(line: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin"})


def test_inspect_prints_the_command_it_read_as_the_shell_runs_it(cli):
    argv = [os.path.realpath(sys.executable), "-c", PROGRAM]   # as exec'd: what /proc/PID/cmdline says
    p = subprocess.Popen(argv, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env={"PATH": "/usr/bin:/bin", "HOLD": "1"})
    try:
        assert p.stderr.readline() == b"paused\n"
        r = cli("inspect", str(p.pid))
    finally:
        p.communicate(b"", timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    run = _run_line(r.stdout, "run:")
    assert run.startswith("MALLOC_"), run
    done = _in_shell(run)
    assert done.returncode == 0 and done.stdout == PRINTED, (run, done.stdout, done.stderr)
    race = _run_line(r.stdout, "race it:")
    assert race == "alloclab tune -- " + shlex.join(argv), race
    assert run.endswith(" " + shlex.join(argv)), run


@pytest.fixture
def one_workload(tmp_path):
    """The demo's reclaim workload alone (its pick: jemalloc), stored as a python3 -c command."""
    db = tmp_path / "one.db"
    shutil.copyfile(FIXTURES / "demo-suite-trimmed.db", db)
    c = sqlite3.connect(db)
    for (table,) in c.execute("select name from sqlite_master where type = 'table'").fetchall():
        if "workload_idx" in [col[1] for col in c.execute(f"pragma table_info({table})")]:
            c.execute(f"delete from {table} where workload_idx != 5")
    c.execute("delete from workloads where idx != 5")
    c.execute("update workloads set argv = ?", (json.dumps(["python3", "-c", PROGRAM]),))
    c.commit()
    c.close()
    return db


@pytest.mark.parametrize("fmt", ["terminal", "md"])
def test_report_prints_the_stored_command_as_the_shell_runs_it(one_workload, fmt):
    from conftest import run_cli
    r = run_cli(["report", "--db", str(one_workload), "-f", fmt])
    assert r.returncode == 0, r.stdout + r.stderr
    if fmt == "md":
        run = r.stdout.split("```sh\n")[1].split("\n```")[0]
    else:
        run = _run_line(r.stdout, "run:")
    assert run.startswith("LD_PRELOAD=") and "python3 -c" in run, run
    done = _in_shell(run)   # a missing jemalloc only makes ld.so warn: the program still runs
    assert done.returncode == 0 and done.stdout == PRINTED, (run, done.stdout, done.stderr)


def test_tune_keeps_the_command_in_its_own_styled_lines():
    from alloclab.cli.tune import styled
    from alloclab.tune.styled import Line
    rest = f" (experiment 3: one untimed fingerprint run of python3 -c {PROGRAM} per allocator)"
    text = styled(Line((("Diagnosis", "bold"), (rest, ""))))
    assert text.plain == "Diagnosis" + rest
    assert [(s.start, s.end, s.style) for s in text.spans] == [(0, len("Diagnosis"), "bold")]
    assert styled(Line.of(PROGRAM, "yellow")).plain == PROGRAM
    # A style is a Line's field only: text that looks like a tag is text, wherever it stands.
    assert styled(f"[bold]{PROGRAM}[/]").plain == f"[bold]{PROGRAM}[/]"
    assert styled(f"  {PROGRAM}").plain == f"  {PROGRAM}"


def test_every_console_of_the_cli_prints_text_as_given():
    import io

    from alloclab.cli import app
    from alloclab.cli.outputs import plain_text
    for console in (app.console, app.err):
        buf = io.StringIO()
        keep = console.file
        console.file = buf
        try:
            console.print("x=[bytearray(9)] [bold]b[/] :smile: $HOME", highlight=False)
        finally:
            console.file = keep
        assert buf.getvalue() == "x=[bytearray(9)] [bold]b[/] :smile: $HOME\n"
    assert plain_text(lambda c: c.print("[red]x[/] :smile:")) == "[red]x[/] :smile:\n"


@pytest.mark.e2e
def test_tune_prints_its_picks_run_line_as_the_shell_runs_it(cli):
    """tune's answer (report/tune.py, another renderer than compare's) on the same program: its
    memory at its end is kept under a raised threshold, so a fixed threshold is decided at once; the
    pick's run: line, pasted into bash, runs the program as the user wrote it."""
    argv = ["python3", "-c", PROGRAM]
    r = cli("tune", "--budget", "15s", "--max-runs", "3", "--screen", "never", "--", *argv, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    run = _run_line(r.stdout, "run:")
    # Whichever candidate leads (a fixed threshold, or an allocator's decommit setting on a busy host),
    # its settings come first and the command as written last.
    assert re.match(r"([A-Z][A-Z_]*=\S+ )+", run) and run.endswith(" " + shlex.join(argv)), run
    done = _in_shell(run)
    assert done.returncode == 0 and done.stdout == PRINTED, (run, done.stdout, done.stderr)


@pytest.mark.e2e
def test_compare_prints_its_picks_run_line_as_the_shell_runs_it(cli):
    """compare's own answer, from a store it has just written: a metric the program prints decides the
    pick at once (its score halves under the setting), and the pick's run: line, pasted into bash,
    runs the program as the user wrote it, brackets, quotes and dollar sign included."""
    program = ('import os; print("score:", 10 if os.environ.get("MALLOC_TOP_PAD_") else 20); '
               "print(\"cost: $5 [ok] 'q'\")")
    argv = ["python3", "-c", program]
    r = cli("compare", "--runs", "5", "--warmup", "0", "--metric", r"score=score: (\d+):lower", "-a", "glibc",
            "-a", "glibc:MALLOC_TOP_PAD_=1M", "--", *argv, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    run = _run_line(r.stdout, "run:")
    assert run == "MALLOC_TOP_PAD_=1048576 " + shlex.join(argv), run
    done = _in_shell(run)
    assert done.returncode == 0 and done.stdout == "score: 10\n" + PRINTED, (run, done.stdout, done.stderr)
