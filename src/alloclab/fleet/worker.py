"""What runs on a Dask worker: the pre-flight check, one session, and stopping sessions on Ctrl-C.

Functions here are sent by reference, so a worker runs its own installed alloclab: a host whose
alloclab is missing fails the pre-flight check with that reason.
"""

from __future__ import annotations

import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from alloclab import __version__
from alloclab.store.merge import fold_wal

_sessions: dict[int, subprocess.Popen] = {}
_lock = threading.Lock()
STDERR_TAIL = 4000


def _clean_env() -> dict[str, str]:
    """This process's environment without what the Dask nanny added for its own workers
    (MALLOC_TRIM_THRESHOLD_, OMP_NUM_THREADS, ...): runs get the host's environment, not Dask's."""
    import dask
    added = dask.config.get("distributed.nanny.pre-spawn-environ", {}) or {}
    return {k: v for k, v in os.environ.items() if not (k in added and str(added[k]) == v)}


def preflight(spec_json: str) -> dict:
    from alloclab.measure import machine
    from alloclab.catalog.variants import parse_variant
    from alloclab.fleet.spec import SessionSpec, host_problems
    spec = SessionSpec.from_json(spec_json)
    problems = host_problems(spec)
    variants = []
    for written in spec.variants:
        try:
            variants.append(parse_variant(written))
        except Exception:  # named in problems already
            pass
    return {"hostname": socket.gethostname(), "alloclab": __version__, "python": platform.python_version(),
            "snapshot": machine.snapshot(variants), "problems": problems}


def run_session(spec_json: str, host: str, task: str) -> dict:
    """Run one session to its end (or its stop) and return its SQLite file's bytes."""
    tmp = Path(tempfile.mkdtemp(prefix="alloclab-fleet-"))
    try:
        (tmp / "spec.json").write_text(spec_json)
        with open(tmp / "stderr", "wb") as err:
            proc = subprocess.Popen([sys.executable, "-m", "alloclab.fleet.session", str(tmp / "spec.json"),
                                     str(tmp / "out.db")], env=_clean_env(), stdin=subprocess.DEVNULL,
                                    stdout=err, stderr=err, start_new_session=True)
            with _lock:
                _sessions[proc.pid] = proc
            try:
                rc = proc.wait()
            finally:
                with _lock:
                    _sessions.pop(proc.pid, None)
        db, error = tmp / "out.db", tmp / "error"
        fold_wal(db)
        return {"error": error.read_text() if error.exists() else "","host": host, "task": task, "hostname": socket.gethostname(), "returncode": rc,
                "stderr": (tmp / "stderr").read_text(errors="replace")[-STDERR_TAIL:],
                "db": db.read_bytes() if db.exists() else b""}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def stop_sessions() -> int:
    """SIGTERM to every session of this worker: each stops its runs and its task returns what it has."""
    with _lock:
        procs = list(_sessions.values())
    for p in procs:
        try:
            p.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
    return len(procs)
