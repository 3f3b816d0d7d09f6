"""Connect to (or start) the Dask cluster named by --fleet; every started cluster is stopped on exit."""

from __future__ import annotations

import contextlib
import logging

from alloclab.errors import AlloclabError
from alloclab.fleet.address import FleetAddress

RESOURCE = "alloclab"           # one per worker; every task asks for it: two benchmarks never share a host
CONNECT_TIMEOUT_S = 30


def _need_dask():
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise AlloclabError("--fleet needs Dask distributed, an optional part of alloclab: install it with "
                            "`pip install 'alloclab[fleet]'` (or `pip install 'dask[distributed]'`) on this machine "
                            "and on every host.") from None


@contextlib.contextmanager
def open_client(addr: FleetAddress):
    _need_dask()
    import dask
    from distributed import Client, LocalCluster
    cluster = None
    # Dask's own chatter (worker restarts, closing comms) is not the user's business; errors still surface.
    logging.getLogger("distributed").setLevel(logging.ERROR)
    # A worker that dies fails its task at once (no silent reruns elsewhere): the client decides where
    # it runs again, since a task pinned to a dead worker's address would otherwise wait forever.
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        try:
            if addr.kind == "local":
                # Loopback only; one thread per worker process; no dashboard (it would bind a port).
                cluster = LocalCluster(n_workers=addr.workers, threads_per_worker=1, processes=True,
                                       resources={RESOURCE: 1}, host="127.0.0.1", dashboard_address=None,
                                       silence_logs=logging.ERROR, preload=["alloclab.fleet.local_worker"])
            elif addr.kind == "ssh":
                from distributed.deploy.ssh import SSHCluster
                cluster = SSHCluster(list(addr.hosts),
                                     worker_options={"nthreads": 1, "resources": {RESOURCE: 1}},
                                     scheduler_options={"dashboard_address": None})
            client = Client(cluster if cluster is not None else addr.text, timeout=CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError, RuntimeError) as exc:
            # RuntimeError: how SSHCluster reports a host it cannot reach ("Cluster failed to start: ...").
            if cluster is not None:
                cluster.close()
            hint = ("that every host answers `ssh HOST` without a password prompt and has alloclab[fleet] installed"
                    if addr.kind == "ssh" else
                    "that the scheduler runs (`dask scheduler`) and the address and port are right")
            raise AlloclabError(f"Cannot reach the Dask fleet {addr.text}: {exc}. Check {hint}; see docs/fleet.md.") from None
        except ImportError as exc:
            raise AlloclabError(f"--fleet {addr.text} needs {exc.name}: pip install {exc.name}.") from None
        try:
            yield client
        finally:
            client.close()
            if cluster is not None:
                cluster.close()
