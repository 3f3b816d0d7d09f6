"""`alloclab inspect`'s refusals, each a one-paragraph error that names the problem and the fix, with
nothing harmed: no such process; not permitted (the message says what is needed); a static binary;
musl; a glibc whose layout it does not know; a process that exits while it is read. After each, the
target (where it lives) is neither stopped nor traced, and continues to print what it prints
uninspected."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import ALLOCLAB, PROGRAMS, missing_prerequisite, need_program
from inspect_helpers import pause, pause_argv

pytestmark = [pytest.mark.e2e]


def _cc(*args: str) -> None:
    subprocess.run([os.environ.get("CC", "cc"), *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def idle(tmp_path_factory):
    if not shutil.which(os.environ.get("CC", "cc")):
        missing_prerequisite("no C compiler (apt-get install -y gcc libc6-dev)")
    out = tmp_path_factory.mktemp("idle") / "idle"
    _cc("-O2", "-o", str(out), str(PROGRAMS / "idle.c"))
    return out


def _status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as fh:
        return dict(line.rstrip("\n").split(":\t", 1) for line in fh if ":\t" in line)


def _unharmed(p, expected: bytes | None = None) -> None:
    st = _status(p.pid)
    assert st["TracerPid"] == "0" and st["State"][0] in "SR", st
    out, err, rc = p.go()
    assert rc == 0, err
    if expected is not None:
        assert out == expected


def _refused(proc: subprocess.CompletedProcess, *words: str) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    text = " ".join(proc.stderr.split())
    assert "error:" in text and "Traceback" not in text, text
    for w in words:
        assert w in text, text
    return text


def test_no_such_process(cli):
    p = subprocess.Popen(["true"])
    p.wait()   # reaped: its id names no process now
    _refused(cli("inspect", str(p.pid)), f"No process {p.pid} is running here")


def test_a_static_binary_is_refused(cli, idle, tmp_path):
    static = tmp_path / "idle-static"
    try:
        _cc("-O2", "-static", "-o", str(static), str(PROGRAMS / "idle.c"))
    except subprocess.CalledProcessError:
        missing_prerequisite("no static libc to link with (apt-get install -y libc6-dev)")
    p = pause(static, "x", tmp_path / "none")
    try:
        _refused(cli("inspect", str(p.pid)), "is statically linked", "no libc is mapped")
    finally:
        _unharmed(p)


def test_musl_is_refused(cli, tmp_path):
    musl_gcc = need_program("musl-gcc", "musl-tools")
    prog = tmp_path / "idle-musl"
    subprocess.run([musl_gcc, "-O2", "-o", str(prog), str(PROGRAMS / "idle.c")], check=True, capture_output=True)
    p = pause(prog, "x", tmp_path / "none")
    try:
        _refused(cli("inspect", str(p.pid)), "runs on musl libc", "only glibc's heaps")
    finally:
        _unharmed(p)


def test_a_glibc_of_an_unknown_version_is_refused(cli, idle, tmp_path):
    # The same libc with its banner saying 2.99: a process that runs it is refused, not guessed at.
    libc = Path("/lib/x86_64-linux-gnu/libc.so.6")
    data = libc.read_bytes()
    banner = b"release version 2.36"
    if banner not in data:
        pytest.skip("this test patches Debian 12's glibc 2.36")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libc.so.6").write_bytes(data.replace(banner, b"release version 2.99"))
    expected = subprocess.run([str(idle)], input=b"go\n", capture_output=True).stdout
    p = pause(idle, "x", tmp_path / "none", env={**os.environ, "LD_LIBRARY_PATH": str(tmp_path / "lib")})
    try:
        _refused(cli("inspect", str(p.pid)), "runs glibc 2.99", "does not know", "2.36 (x86_64)",
                 "catalog/glibc_layouts.toml")
    finally:
        _unharmed(p, expected)


def test_not_permitted_says_what_is_needed(idle, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root, to start a process as another user and drop CAP_SYS_PTRACE")
    import tempfile
    setpriv = need_program("setpriv", "util-linux")
    shared = Path(tempfile.mkdtemp(prefix="alloclab-inspect-"))   # where uid 65534 may run it from
    os.chmod(shared, 0o755)
    prog = shared / "idle"
    shutil.copy(idle, prog)
    os.chmod(prog, 0o755)
    p = pause_argv([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", str(prog)])
    try:
        target = p.pid if _status(p.pid)["Uid"].split()[0] == "65534" else None
        assert target is not None
        # alloclab as root, without CAP_SYS_PTRACE: the process is another user's.
        r = subprocess.run([setpriv, "--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace", "--",
                            *ALLOCLAB, "inspect", str(target), "--db", str(tmp_path / "a.db")],
                           capture_output=True, text=True, timeout=120)
        _refused(r, f"Not permitted to read process {target}", "ptrace attach rights", "uid 65534",
                 "CAP_SYS_PTRACE")
    finally:
        _unharmed(p)
        shutil.rmtree(shared)


@pytest.mark.slow
def test_a_process_that_exits_mid_read_is_refused_and_nothing_is_left_stopped(cli, tmp_path):
    from conftest import PROGRAMS as progs
    prog = tmp_path / "inspectee"
    _cc("-O2", "-pthread", "-o", str(prog), str(progs / "inspectee.c"))
    p = pause(prog, "blocks", tmp_path / "info.xml", "256")
    seen = threading.Event()

    def kill_once_traced() -> None:
        # The first stop alloclab makes shows as a tracer in the process's status: killed there,
        # the process is gone halfway through the reading.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and p.proc.poll() is None:
            try:
                if _status(p.pid)["TracerPid"] != "0":
                    p.proc.kill()
                    seen.set()
                    return
            except (OSError, KeyError):
                return
            time.sleep(0.0005)

    t = threading.Thread(target=kill_once_traced)
    t.start()
    try:
        r = cli("inspect", str(p.pid))
    finally:
        t.join()
        p.kill()
    assert seen.is_set()
    _refused(r, f"Process {p.pid} exited while alloclab read", "nothing was left stopped")
