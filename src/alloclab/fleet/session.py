"""One fleet task's experiment, run by the ordinary runner into a SQLite file of its own.

`python -m alloclab.fleet.session SPEC.json OUT.db`, started by the Dask worker (worker.py) in
its own process so that the runner's signal handling works as on one machine and a stop is a
SIGTERM: the runner then stops every child, keeps the runs so far, and the task returns them.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

from alloclab.errors import AlloclabError
from alloclab.measure.runner import Runner, Progress
from alloclab.stats.looks import Judge
from alloclab.store.db import Store
from alloclab.catalog.variants import parse_variants
from alloclab.fleet.spec import SessionSpec, build_workloads

ORPHAN_POLL_S = 0.2


orphaned = threading.Event()


def _stop_when_orphaned(parent: int) -> None:
    """A killed worker cannot stop us; its death makes us an orphan, and we stop ourselves, so that
    a retried task never measures alongside this one for long."""
    while os.getppid() == parent:
        time.sleep(ORPHAN_POLL_S)
    orphaned.set()
    os.kill(os.getpid(), signal.SIGTERM)


def _sigterm(*_):
    raise KeyboardInterrupt


def main(argv: list[str]) -> int:
    spec_path, out_db = argv
    signal.signal(signal.SIGTERM, _sigterm)
    threading.Thread(target=_stop_when_orphaned, args=(os.getppid(),), daemon=True).start()
    spec = SessionSpec.from_json(Path(spec_path).read_text())
    store = Store(out_db)
    cleanup = None
    try:
        workloads, cleanup = build_workloads(spec)
        note = Progress(note=lambda text: print(text, file=sys.stderr, flush=True))
        Runner(store, workloads, parse_variants(spec.variants), spec.runner_settings(), note, judge=Judge()).run()
        return 0
    except AlloclabError as exc:
        print(exc, file=sys.stderr, flush=True)
        Path(out_db).with_name("error").write_text(str(exc))   # the task's reason, apart from the noise
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    finally:
        if cleanup is not None:
            cleanup()
        store.close()
        if orphaned.is_set():
            # No task will ever fetch these runs: the dead worker's temporary directory goes too.
            shutil.rmtree(Path(spec_path).parent, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
