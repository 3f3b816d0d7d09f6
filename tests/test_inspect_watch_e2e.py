"""`alloclab inspect` over time and over a tree: --watch samples a process again and again, `alloclab
diff` of its first and last sample says which part grew; --children reads every process below a
server's (each with its PSS beside its RSS); an inspection is stored like an experiment, listed and
reported again; and the README's inspect commands run as written (with a real PID)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import textwrap

import pytest

from conftest import PROGRAMS, missing_prerequisite
from inspect_helpers import inspection, pause
from test_readme import README, commands

pytestmark = [pytest.mark.e2e]


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    import shutil
    cc = os.environ.get("CC", "cc")
    if not shutil.which(cc):
        missing_prerequisite("no C compiler (apt-get install -y gcc libc6-dev)")
    out = tmp_path_factory.mktemp("inspectee") / "inspectee"
    subprocess.run([cc, "-O2", "-pthread", "-o", str(out), str(PROGRAMS / "inspectee.c")], check=True,
                   capture_output=True)
    return out


def test_watch_samples_a_growing_process_and_diff_says_live_grew(program, cli, tmp_path):
    p = pause(program, "grow", tmp_path / "info.xml", "32")
    try:
        got = inspection(cli("inspect", str(p.pid), "--watch", "0.5", "--count", "3", "-f", "json"))
    finally:
        out, _, rc = p.go()
    assert rc == 0 and out == b"grew\n"
    assert [i["snapshot"]["pid"] for i in got] == [p.pid] * 3
    times = [i["snapshot"]["t_s"] for i in got]
    assert times == sorted(times) and times[-1] - times[0] >= 0.9, times
    live = [i["snapshot"]["split"]["parts"]["live"] for i in got]
    assert live[-1] > live[0] + (1 << 20), live
    exp = json.loads(cli("experiments", "--json").stdout)[-1]
    assert exp["kind"] == "inspect" and exp["status"] == "complete"
    d = cli("diff", f"{exp['id']}:0", f"{exp['id']}:-1", "-f", "json")
    assert d.returncode == 0, d.stdout + d.stderr
    (diff,) = json.loads(d.stdout)
    assert diff["same_process"] and diff["grew_most"] == "live", diff
    text = cli("diff", f"{exp['id']}:0", f"{exp['id']}:-1")
    assert "Grew most: live." in text.stdout and "one process" in text.stdout, text.stdout
    again = cli("report", str(exp["id"]), "-f", "json")
    assert [i["snapshot"]["split"] for i in json.loads(again.stdout)["inspections"]] == [i["snapshot"]["split"]
                                                                                         for i in got]


PARENT = textwrap.dedent("""
    import subprocess, sys
    kids = [subprocess.Popen([sys.argv[1], "control", sys.argv[2] + str(i), "4"], stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for i in range(2)]
    for k in kids:
        assert k.stderr.readline() == b"paused\\n"
    print("ready", flush=True)
    sys.stdin.readline()
    for k in kids:
        k.communicate(b"go\\n")
    print("done", flush=True)
""")


def test_children_reads_each_process_of_a_tree_with_its_pss(program, cli, tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(program), str(tmp_path / "info")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline() == "ready\n"
        got = inspection(cli("inspect", str(parent.pid), "--children", "-f", "json"))
    finally:
        out, _ = parent.communicate("go\n", timeout=60)
    assert out == "done\n"
    pids = [i["snapshot"]["pid"] for i in got]
    assert pids[0] == parent.pid and len(pids) == 3, pids
    assert sorted(got[0]["children"]) == sorted(pids[1:])
    for i in got:
        s = i["snapshot"]
        assert 0 < s["pss"] <= s["rss"], s
        assert s["allocator"] == "glibc" and s["split"]["parts"]["live"] > 0
    # The children share their program's and libc's pages: each one's PSS is below its RSS.
    assert all(i["snapshot"]["pss"] < i["snapshot"]["rss"] for i in got[1:])


def test_the_readmes_inspect_commands_run_as_written(program, tmp_path):
    from conftest import run_cli
    section = README.read_text().split("## A running process")[1].split("\n## ")[0]
    found = commands(section)
    assert found and all(a[1] == "inspect" and "PID" in a for a in found), found
    p = pause(program, "control", tmp_path / "info.xml", "4")
    try:
        for argv in found:
            argv = [str(p.pid) if a == "PID" else a for a in argv]
            if "--watch" in argv:   # as written it samples for a minute: here, its first two samples
                argv = [*argv, "--count", "2"] if "--count" not in argv else argv
                argv[argv.index("--watch") + 1] = "0.2"
                if "--count" in argv:
                    argv[argv.index("--count") + 1] = "2"
            r = run_cli([*argv[1:], "--db", str(tmp_path / "a.db")], cwd=tmp_path)
            assert r.returncode == 0, f"`{shlex.join(argv)}`:\n{r.stdout}{r.stderr}"
    finally:
        p.go()
