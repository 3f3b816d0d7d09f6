"""Dask preload for local:N workers: they share the terminal's process group, so a Ctrl-C meant for
the client would kill them before their sessions hand back the runs. The client stops them instead."""

from __future__ import annotations

import signal


def dask_setup(worker) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
