"""Shared fixtures: build the small test programs, run the real CLI, open the store."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NoReturn

import pytest

from alloclab.catalog import allocators as cat

PROGRAMS = Path(__file__).parent / "programs"
ALLOCLAB = [sys.executable, "-m", "alloclab.cli"]
# Under CI=true a prerequisite that `make test` installs is expected: its absence fails the test,
# so that a green CI means the end-to-end tests ran rather than skipped.
IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def missing_prerequisite(reason: str) -> NoReturn:
    """Skip (on a developer's machine) or fail (CI=true) for a program `make test` installs."""
    if IN_CI:
        pytest.fail(f"{reason}; CI=true, and `make test` installs it, so this fails rather than skips",
                    pytrace=False)
    pytest.skip(reason)


def need_program(name: str, package: str | None = None) -> str:
    """The path of program `name`, which `make test` installs (`package`, when not named `name`):
    where it is not on PATH the test skips, or fails under CI=true (missing_prerequisite)."""
    path = shutil.which(name)
    if path is None:
        missing_prerequisite(f"{name} is not installed (apt-get install -y {package or name})")
    return path


def installed_allocators() -> list[str]:
    c = cat.load_catalog()
    return [n for n, a in c.allocators.items() if a.default and cat.is_installed(a)]


def require_allocator(name: str) -> None:
    if name not in installed_allocators():
        a = cat.load_catalog().allocators[name]
        missing_prerequisite(f"{name} is not installed (apt-get install -y {a.package})")


@pytest.fixture(scope="session")
def build(tmp_path_factory):
    """build(name, *extra_flags) -> path of tests/programs/NAME.c compiled with cc."""
    out_dir = tmp_path_factory.mktemp("programs")
    cache: dict[tuple, Path] = {}

    def _build(name: str, *flags: str, shared: bool = False) -> Path:
        key = (name, flags, shared)
        if key not in cache:
            out = out_dir / (f"lib{name}.so" if shared else name + "".join(f.replace("/", "_") for f in flags))
            cmd = [os.environ.get("CC", "cc"), "-O2", "-o", str(out), str(PROGRAMS / f"{name}.c"), *flags]
            if shared:
                cmd[1:1] = ["-shared", "-fPIC"]
            subprocess.run(cmd, check=True, capture_output=True)
            cache[key] = out
        return cache[key]

    if not shutil.which(os.environ.get("CC", "cc")):
        missing_prerequisite("no C compiler (apt-get install -y gcc libc6-dev)")
    return _build


class _Zygote:
    """The client of tests/cli_zygote.py: one forking server per test process, started on the first
    call, stopped with the process (it dies when its stdin, a pipe from here, closes)."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="alloclab-zygote-", dir=_TMP)
        self.path = os.path.join(self.dir, "socket")
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).parent / "cli_zygote.py"), self.path],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=_ENV, cwd="/")
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"tests/cli_zygote.py did not start (exit {self.proc.wait()})")

    def run(self, argv: list[str], *, env: dict, cwd: str | os.PathLike, timeout: float) -> subprocess.CompletedProcess:
        with open(os.devnull, "rb") as stdin, tempfile.TemporaryFile(dir=_TMP) as out, \
                tempfile.TemporaryFile(dir=_TMP) as err:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                conn.connect(self.path)
                request = json.dumps({"argv": [str(a) for a in argv], "env": env, "cwd": str(cwd)}).encode()
                socket.send_fds(conn, [request + b"\n"], [stdin.fileno(), out.fileno(), err.fileno()])
                replies = conn.makefile("r")
                pid = json.loads(replies.readline())["pid"]
                conn.settimeout(timeout)
                try:
                    line = replies.readline()
                except TimeoutError:
                    os.kill(pid, 9)
                    conn.settimeout(None)
                    replies.readline()
                    raise subprocess.TimeoutExpired([*ALLOCLAB, *argv], timeout, _read(out), _read(err)) from None
            finally:
                conn.close()
            return subprocess.CompletedProcess([*ALLOCLAB, *argv], json.loads(line)["returncode"], _read(out), _read(err))

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def _read(f) -> str:
    f.seek(0)
    return f.read().decode()


_zygote: _Zygote | None = None
# The server and its files live outside what a test changes: a test may point TMPDIR at a directory
# it checks and removes, or set a variable that a library reads at import.
_ENV = dict(os.environ)
_TMP = tempfile.gettempdir()


def run_cli(argv: list[str], *, env: dict | None = None, cwd: str | os.PathLike | None = None,
            timeout: float = 240) -> subprocess.CompletedProcess:
    """`python -m alloclab.cli ARGV` with its output captured, as subprocess.run(..., capture_output=True,
    text=True) returns it: a child of tests/cli_zygote.py, or with ALLOCLAB_TEST_FRESH_CLI=1 a fresh
    interpreter. `env` is the whole environment (default: this process's)."""
    global _zygote
    env = dict(os.environ if env is None else env)
    cwd = os.getcwd() if cwd is None else cwd
    if os.environ.get("ALLOCLAB_TEST_FRESH_CLI"):
        return subprocess.run([*ALLOCLAB, *argv], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    if _zygote is None or _zygote.proc.poll() is not None:
        _zygote = _Zygote()
    return _zygote.run(list(argv), env=env, cwd=cwd, timeout=timeout)


def pytest_sessionfinish(session):
    if _zygote is not None:
        _zygote.close()


@pytest.fixture
def cli(tmp_path):
    """Run the real alloclab CLI in a process of its own (run_cli); returns CompletedProcess. DB in tmp_path."""
    db = tmp_path / "test.db"

    def _cli(*args: str, timeout: float = 240, check: bool | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
        proc = run_cli([*args[:1], *(["--db", str(db)] if args and args[0] in
                                     ("compare", "report", "experiments", "suite", "run", "diff", "profile", "sweep", "tune", "inspect") else []),
                        *args[1:]], timeout=timeout, env={**os.environ, "COLUMNS": "200", **(env or {})})
        if check:
            assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    _cli.db = db
    return _cli


@pytest.fixture
def store_of():
    from alloclab.store.db import Store

    def _open(db: Path):
        return Store(db)
    return _open


def still_left(read, timeout: float = 10.0):
    """read() again until it returns nothing or `timeout` passes; what is left then. A child being
    reaped takes a moment longer on a slow or busy machine; a leak stays whatever the wait."""
    deadline = time.monotonic() + timeout
    while (left := read()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def running(pids) -> list[int]:
    """Those of `pids` still running (a zombie is gone but for its parent's wait)."""
    import psutil

    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.Error:
            pass
    return out


def pytest_collection_modifyitems(config, items):
    """The slow tests first (a stable sort: otherwise in file order). `make test` hands tests out
    one by one to two workers in this order (--dist loadgroup); a 40 s test drawn last keeps one
    core busy while the other waits for it."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
