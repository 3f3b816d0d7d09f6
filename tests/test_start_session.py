"""A Ctrl-C that lands after a child's exec but before subprocess.Popen returns loses the Popen object
with the child running: start_session (measure/service/commands.py) stops any child of ours that was
not there before, its session with it. A real child (sleep), the interrupt made to land there."""

from __future__ import annotations

import subprocess

import psutil
import pytest

from alloclab.measure.service.commands import start_session


def test_an_interrupt_as_popen_returns_leaves_no_child_running(monkeypatch):
    real_init = subprocess.Popen.__init__
    started: list[int] = []

    def init_then_interrupted(self, *args, **kwargs):
        real_init(self, *args, **kwargs)   # the child runs: exec'd in a session of its own
        started.append(self.pid)
        raise KeyboardInterrupt            # as if the signal landed before Popen returned

    monkeypatch.setattr(subprocess.Popen, "__init__", init_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        start_session(["sleep", "30"], stdin=subprocess.DEVNULL)
    monkeypatch.undo()
    (pid,) = started
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, pid


def test_a_child_started_before_is_left_alone():
    other = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        p = start_session(["true"], stdin=subprocess.DEVNULL)
        assert p.wait(10) == 0
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()
