"""`alloclab report` gives the short answer by default, on a real terminal: the stored demo (7
workloads, 8 variants, a real suite run) in at most 120 lines at 160 columns and 150 at 80, one
line per comparison, the verification's outcome in one line, the recommendation, and no mean
across the workloads; `--details` gives the full tables.

The CLI runs in a pseudo-terminal of the width under test (piped, it renders at 160 columns), as
a fresh interpreter: what a user at a terminal sees."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import shutil
import struct
import subprocess
import termios

import pytest

from conftest import ALLOCLAB
from test_golden_reports import FIXTURES, STORES

pytestmark = pytest.mark.xdist_group("short-answer")


def at_terminal(argv: list[str], columns: int, cwd) -> str:
    """What `alloclab ARGV` prints on a terminal `columns` wide, without its colours."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 60, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")} | {"NO_COLOR": "1"}
    proc = subprocess.Popen([*ALLOCLAB, *argv], stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, cwd=cwd,
                            env=env)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:   # the terminal's other end closed: the process has exited
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait(timeout=120) == 0, out.decode()
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.decode()).replace("\r\n", "\n")


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    d = tmp_path_factory.mktemp("short")
    for name, file in STORES.items():
        shutil.copyfile(FIXTURES / file, d / f"{name}.db")   # the store may write beside it
    return d


# At 80 columns a comparison takes two lines: what its row has no room for (the peak RSS, the
# mechanism) goes under it rather than being cut (tests/test_nothing_cut.py), and the legend of the
# notation wraps to six lines.
@pytest.mark.parametrize("columns, most", [(160, 120), (80, 170)])
def test_the_stored_demo_reports_in_a_screen_or_two(stores, columns, most):
    text = at_terminal(["report", "--db", "demo.db"], columns, stores)
    lines = text.rstrip("\n").splitlines()
    assert len(lines) <= most, f"{len(lines)} lines at {columns} columns"
    assert max(len(line) for line in lines) <= columns
    # One line per comparison: 7 variants against glibc on each of 7 workloads, grouped by workload.
    rows = [line for line in lines if re.match(r"  \S.*  (better|worse|equivalent|undecided)  ", line)]
    assert len(rows) == 49, rows
    assert sum(1 for line in lines if re.match(r"(simple|oversized|xthread|larson|threadcache|reclaim|fragment): ",
                                               line)) >= 7
    # The verification's outcome, once; the recommendation with the rule and its counts; no mean.
    flat = " ".join(text.split())
    assert flat.count("Every variant verified: malloc and free were bound to the named allocator in every "
                      "process") == 1
    assert "Use glibc TOP_PAD=64M for all 7 workloads. glibc TOP_PAD=64M is better on 4, worse on none" in flat
    assert "Better on more but not the pick: " in flat
    assert "geomean" not in flat and "mean of" not in flat
    assert "Summary across workloads" not in flat and "┃" not in text   # no table of the full report


@pytest.mark.parametrize("name", sorted(STORES))
def test_each_stored_report_is_its_rows_and_at_most_20_lines_more(stores, name):
    """At 160 columns: a line per (workload, variant) and at most 20 others (issue 59): the heading,
    the verification, the legend, the recommendation and what went wrong, nothing said twice."""
    from alloclab.stats.results import build_results
    from alloclab.store.db import Store
    a = build_results(Store(stores / f"{name}.db").load(None)).analysis
    lines = at_terminal(["report", "--db", f"{name}.db"], 160, stores).rstrip("\n").splitlines()
    cells = len(a.workloads) * len(a.labels)
    assert len(lines) <= cells + 20, "\n".join(lines)


def test_details_gives_the_full_tables(stores):
    text = at_terminal(["report", "--db", "demo.db", "--details"], 160, stores)
    assert "runs ok/total" in text and "(baseline)" in text and "Pareto front of" in text
    assert len(text.splitlines()) > 300


def test_an_ineffective_allocator_is_the_verification_line(stores):
    # The redis recipe: glibc's column ran jemalloc (redis-check-rdb links it): said in one line.
    text = " ".join(at_terminal(["report", "--db", "redis.db"], 120, stores).split())
    assert ("Allocator INEFFECTIVE for glibc (redis: benchmark), glibc (redis: memory): those columns did not "
            "measure the named allocator and must not be used.") in text
    assert "Every variant verified" not in text
