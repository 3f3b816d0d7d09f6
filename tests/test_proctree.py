"""The server's process-tree sampler on real processes: a server that is ready and loaded within
the sampler's first few looks (redis on a fast machine) must still be read, not read as 0 MiB."""

import subprocess
import sys
import time

import psutil

from alloclab.measure.service.proctree import ProcTree

# The root forks its child only when told (a line on stdin), so the first look surely comes before.
ROOT = """
import subprocess, sys
sys.stdin.readline()
child = subprocess.Popen([sys.executable, "-c",
    "import time; b = bytearray(48 << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(30)"])
sys.stdin.readline()
child.kill()
"""


def _child_with_memory(root: psutil.Process, kb: int, timeout: float = 20.0) -> psutil.Process:
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        for c in root.children():
            try:
                if c.memory_info().rss >= kb * 1024:
                    return c
            except psutil.Error:
                pass
        time.sleep(0.02)
    raise AssertionError("the child never grew")


def _run(look):
    p = subprocess.Popen([sys.executable, "-c", ROOT], stdin=subprocess.PIPE, text=True)
    try:
        tree = ProcTree(p.pid, None)
        tree.sample()
        assert tree.last_kb == 0 and not tree.known  # nothing forked yet
        p.stdin.write("fork\n")
        p.stdin.flush()
        child = _child_with_memory(psutil.Process(p.pid), 40 << 10)
        look(tree)
        assert child.pid in tree.known
        assert tree.last_kb >= 40 << 10
    finally:
        # The root's child first: once the root is gone it is no longer found as its child.
        try:
            children = psutil.Process(p.pid).children(recursive=True)
        except psutil.Error:
            children = []
        for c in children:
            try:
                c.kill()
            except psutil.Error:
                pass
        p.kill()
        p.wait()


def test_a_tree_with_no_process_known_looks_again_at_the_next_sample():
    # The second look is not a scan turn (every TREE_EVERY-th): it scans because none is known yet.
    _run(lambda tree: tree.sample())


def test_a_reported_reading_scans_the_tree():
    # A reading the run reports (pss=True: ready, after the load, after a phase) sees every process.
    def look(tree):
        tree.known[tree.root_pid] = tree.root  # one process known, so only the reading can make it scan
        tree.sample(pss=True)
    _run(look)
