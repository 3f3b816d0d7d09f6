"""A forking server for the suite's CLI calls: it imports the CLI and the libraries its commands load
(numpy, scipy.special, rich, matplotlib, ...) once, then forks one child per call. Each child is a
process of its own, as `python -m alloclab.cli ARGS` would be: its own pid, stdio, working directory
and environment, the `alloclab.cli` module run as __main__, and the interpreter's own exit (atexit
handlers, non-daemon threads joined, stdio flushed, a KeyboardInterrupt's death by SIGINT).

Why: the suite makes over 200 CLI calls, and each fresh interpreter spends 0.3-0.6 s of CPU importing
before it does anything; on 2 cores that was about a tenth of `make test`. What a fresh start itself
does (which libraries `--help` loads, a user's first page of output) is tested with fresh
interpreters (test_cli_start.py, test_results_cache.py), and ALLOCLAB_TEST_FRESH_CLI=1 makes every
call a fresh interpreter again.

Protocol, on a Unix socket: the client sends one JSON line (argv, env, cwd) with three file
descriptors (stdin, stdout, stderr) attached; the server answers {"pid": N} once the child is
forked, then {"returncode": R} when it has exited (R negative for a signal, as Popen has it)."""

from __future__ import annotations

import gc
import json
import os
import selectors
import socket
import sys

# The libraries the commands import on their way (alloclab's own modules are all imported below);
# imported here once, each child finds them loaded. Only imported: no function runs, so no
# functools.cache and no console holds anything of this process.
PRELOAD = ("numpy", "scipy.special", "psutil", "jinja2", "elftools.elf.elffile", "rich.progress", "rich.table",
           "rich.markdown", "matplotlib", "matplotlib.pyplot")


def preload() -> None:
    import importlib
    import pkgutil

    import alloclab

    for name in PRELOAD:
        importlib.import_module(name)
    # Not the fleet's modules: dask.distributed is an optional extra, and the fleet's workers are
    # fresh interpreters whatever starts them.
    for mod in pkgutil.walk_packages(alloclab.__path__, "alloclab."):
        if not mod.name.endswith("__main__") and not mod.name.startswith("alloclab.fleet"):
            importlib.import_module(mod.name)


def serve(path: str) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, None)
    sel.register(sys.stdin, selectors.EVENT_READ, "caller")   # its end of the pipe closes: stop
    owned: dict[int, tuple[int, socket.socket]] = {}   # pidfd -> (pid, the caller's connection)
    print("ready", flush=True)
    while True:
        for key, _ in sel.select():
            if key.data == "caller":
                return
            if key.data is None:
                conn, _ = listener.accept()
                request, fds = _receive(conn)
                pid = os.fork()
                if pid == 0:
                    for fd, (_, c) in owned.items():
                        os.close(fd)
                        c.close()
                    sel.close()
                    listener.close()
                    conn.close()
                    _child(request, fds)   # returns only to end this process as the interpreter does
                    return
                for fd in fds:
                    os.close(fd)
                pidfd = os.pidfd_open(pid)
                owned[pidfd] = (pid, conn)
                sel.register(pidfd, selectors.EVENT_READ, pid)
                _send(conn, {"pid": pid})
            else:
                pidfd = key.fd
                sel.unregister(pidfd)
                pid, conn = owned.pop(pidfd)
                os.close(pidfd)
                _, status = os.waitpid(pid, 0)
                _send(conn, {"returncode": os.waitstatus_to_exitcode(status)})
                conn.close()


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    while not data.endswith(b"\n"):
        more = conn.recv(1 << 20)
        if not more:
            break
        data += more
    return json.loads(data), fds


def _send(conn: socket.socket, message: dict) -> None:
    try:
        conn.sendall(json.dumps(message).encode() + b"\n")
    except OSError:
        pass   # the caller went away (its test failed or timed out); the child was still reaped


def _child(request: dict, fds: list[int]) -> None:
    import runpy
    import tempfile

    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None            # gettempdir() reads TMPDIR again
    gc.enable()
    sys.path[0] = os.getcwd()          # as `python -m` has it
    sys.argv = ["alloclab", *request["argv"]]
    runpy.run_module("alloclab.cli", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    # As the gc module's documentation advises for a parent that forks: no collection while
    # importing, then everything imported moved out of the collector's sight. Otherwise each
    # child's full collections walk the thousand modules it never uses (15% of the children's
    # CPU in a profile of the suite), and writing their reference counts copies their pages.
    gc.disable()
    preload()
    gc.freeze()
    serve(sys.argv[1])
