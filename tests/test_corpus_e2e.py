"""A program's fate never changes under alloclab: real programs from Debian's packages and the venv,
each doing work that prints computed output, run plain and then under the fingerprint's interposer
with every installed allocator (as tune's diagnosis runs them), and under glibc with the
verification's LD_DEBUG=bindings: the same exit status and the same stdout every time.

Native programs join them, built once into the cache (tests/native_programs.py): Rust on the system
allocator, with the mimalloc crate and with tikv-jemallocator (their own allocator built in: what
is preloaded serves only libc's callers), Go with cgo and a static Go program (no interpreter, so
nothing is preloaded: the same fate, and no fingerprint), a Node.js addon that mallocs scratch
buffers from JS in a loop, and a JVM whose threads deflate and inflate through java.util.zip's
native zlib streams.

The interposer once aborted every C program that later loads libstdc++ through an RTLD_LOCAL
dlopen (python3 importing numpy, scipy, matplotlib or Ceph's rados bindings; the ceph CLI): its
operator new found no next definition with RTLD_NEXT."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from alloclab.catalog.variants import installed_variants
from alloclab.measure import forward, verify
from alloclab.measure.fingerprint import interposer
from alloclab.workloads.command import resolve_command
from conftest import missing_prerequisite
from native_programs import go_program, java_classes, node_addon, rust_program

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PY = sys.executable   # the venv's python, with numpy, scipy and matplotlib
NUMPY = ("import numpy as np\n"
         "rng = np.random.default_rng(3)\n"
         "a = rng.integers(0, 1000, size=(400, 400), dtype=np.int64)\n"
         "b = (a @ a.T) % 1009\n"
         "print(int(b.sum()), int(np.sort(a, axis=None)[12345]), np.unique(a).size)\n")
SCIPY = ("import scipy.sparse as sp, scipy.special as s, scipy.linalg as la, numpy as np\n"
         "m = sp.random(300, 300, density=0.02, random_state=1, format='csr')\n"
         "print(m.nnz, int(s.comb(60, 30, exact=True)), la.lu_factor(np.eye(4) * 2)[1].tolist())\n")
MATPLOTLIB = ("import matplotlib; matplotlib.use('Agg')\n"
              "import hashlib, matplotlib.pyplot as plt\n"
              "fig, ax = plt.subplots(figsize=(3, 2), dpi=50)\n"
              "ax.plot([i * i % 17 for i in range(50)]); ax.set_title('corpus')\n"
              "fig.canvas.draw()\n"
              "print(hashlib.sha256(bytes(fig.canvas.buffer_rgba())).hexdigest()[:16])\n")
CXX = r"""#include <cstdio>
#include <map>
#include <string>
#include <vector>
int main() {
    std::map<std::string, std::vector<int>> m;
    for (int i = 0; i < 20000; i++) m[std::to_string(i % 997)].push_back(i);
    long t = 0;
    for (auto &kv : m) t += (long)kv.first.size() * (long)kv.second.size() + kv.second.back();
    std::printf("%zu %ld\n", m.size(), t);
}
"""
C = r"""#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(void) {
    char *p[1000]; unsigned long t = 0;
    for (int r = 0; r < 50; r++) {
        for (int i = 0; i < 1000; i++) { p[i] = malloc(16 + (i * 37 + r) % 3000); memset(p[i], i, 16); }
        for (int i = 0; i < 1000; i++) { t += (unsigned char)p[i][7]; free(p[i]); }
    }
    printf("%lu\n", t);
    return 0;
}
"""
GIT_ENV = {"GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
           "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@example.org", "GIT_COMMITTER_NAME": "a",
           "GIT_COMMITTER_EMAIL": "a@example.org", "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent"}


@dataclass(frozen=True)
class Step:
    argv: tuple[str, ...]
    compare: bool = True        # stdout compared (a step that prints paths or times is compared by status)
    env: dict = field(default_factory=dict)
    keep: str = ""              # where set, only stdout's lines that start so are compared (the rest vary)


@dataclass(frozen=True)
class Program:
    needs: str                  # the executable that must be installed
    package: str
    steps: tuple[Step, ...]
    files: dict = field(default_factory=dict)   # name -> text, written in the run's directory first
    # Builds (or finds in the cache) what the steps run: each argv word that is a key of what it
    # returns is replaced by that value (a path).
    build: Callable[[], dict] | None = None
    static: bool = False        # statically linked: nothing is preloaded, so no fingerprint is written


def _data() -> str:
    return "".join(f"{i * 7919 % 100003} line {i} of the corpus\n" for i in range(20000))


CORPUS = {
    "python3-numpy": Program(PY, "python3-numpy", (Step((PY, "-c", NUMPY)),)),
    "python3-scipy": Program(PY, "python3-scipy", (Step((PY, "-c", SCIPY)),)),
    "python3-matplotlib": Program(PY, "python3-matplotlib", (Step((PY, "-c", MATPLOTLIB)),)),
    "python3-rados": Program("/usr/bin/python3", "python3-rados",
                             (Step(("/usr/bin/python3", "-c", "import rados, json; print(rados.Rados.__name__, "
                                    "len(json.dumps(list(range(5000)))))")),)),
    "ceph": Program("ceph", "ceph-common", (Step(("ceph", "--version")),)),
    "ruby": Program("ruby", "ruby", (Step(("ruby", "-rjson", "-e", 'a = (1..20000).map { |i| {"k" => i, "v" => i.to_s * 3} }; '
                                           'puts JSON.generate(a).size, a.sum { |h| h["v"].size }')),)),
    "node": Program("node", "nodejs", (Step(("node", "-e", "const a = []; for (let i = 0; i < 200000; i++) "
                                             "a.push({i, s: String(i)}); console.log(JSON.stringify(a).length)")),)),
    "perl": Program("perl", "perl", (Step(("perl", "-e", 'my %h; $h{$_} = $_ x 3 for 1..100000; my $t = 0; '
                                           '$t += length($h{$_}) for keys %h; print "$t\\n"')),)),
    "jq": Program("jq", "jq", (Step(("jq", "-c", "[.[] | .a * 2] | add, length", "in.json")),),
                  {"in.json": "[" + ",".join(f'{{"a": {i}, "b": "{i}"}}' for i in range(20000)) + "]"}),
    "sqlite3": Program("sqlite3", "sqlite3", (Step(("sqlite3", ":memory:",
                       "create table t(a, b); with recursive c(x) as (select 1 union all select x + 1 from c where "
                       "x < 100000) insert into t select x, printf('%08d', x * 7) from c; create index i on t(b); "
                       "select count(*), sum(a), max(b) from t;")),)),
    "git": Program("git", "git", (Step(("git", "init", "-q", "repo"), env=GIT_ENV),
                                  Step(("git", "-C", "repo", "add", "."), env=GIT_ENV),
                                  Step(("git", "-C", "repo", "commit", "-q", "-m", "corpus"), env=GIT_ENV),
                                  Step(("git", "-C", "repo", "rev-parse", "HEAD"), env=GIT_ENV)),
                   {"repo/data.txt": _data()}),
    "gcc": Program("gcc", "gcc", (Step(("gcc", "-O2", "-o", "prog", "prog.c"), compare=False), Step(("./prog",))),
                   {"prog.c": C}),
    "g++": Program("g++", "g++", (Step(("g++", "-O2", "-o", "prog", "prog.cc"), compare=False), Step(("./prog",))),
                   {"prog.cc": CXX}),
    "xz": Program("xz", "xz-utils", (Step(("xz", "-T2", "-6", "-k", "data.txt")), Step(("sha256sum", "data.txt.xz"))),
                  {"data.txt": _data() * 4}),
    "sort": Program("sort", "coreutils", (Step(("sort", "-n", "--parallel=2", "-S", "1M", "-o", "sorted", "data.txt")),
                                          Step(("sha256sum", "sorted"))), {"data.txt": _data()}),
    # Native programs, built once (tests/native_programs.py). The bundled-allocator programs print
    # their own VmRSS at rest as well, which varies run to run: only their checksum line is compared.
    "rust-system": Program("cargo", "cargo-web", (Step(("@prog", "4", "150")),),
                           build=lambda: {"@prog": str(rust_program("rust-system"))}),
    "rust-mimalloc": Program("cargo", "cargo-web", (Step(("@prog", "4", "400", "16", "0"), keep="checksum:"),),
                             build=lambda: {"@prog": str(rust_program("rust-mimalloc"))}),
    "rust-jemalloc": Program("cargo", "cargo-web", (Step(("@prog", "4", "400", "16", "0"), keep="checksum:"),),
                             build=lambda: {"@prog": str(rust_program("rust-jemalloc"))}),
    # Go exits by exit_group, never libc's exit(): its fingerprint is the interposer's last periodic
    # write (every 100 ms), so the program runs past the first.
    "go-cgo": Program("go", "golang-go", (Step(("@prog", "60")),),
                      build=lambda: {"@prog": str(go_program("gocgo", cgo=True))}),
    "go-static": Program("go", "golang-go", (Step(("@prog",)),),
                         build=lambda: {"@prog": str(go_program("gostatic"))}, static=True),
    "node-addon": Program("node", "nodejs", (Step(("node", "@run", "@addon", "600")),),
                          build=lambda: (lambda d: {"@run": str(d / "run.js"), "@addon": str(d / "nodeaddon.node")})(
                              node_addon("nodeaddon"))),
    "java-zip": Program("java", "openjdk-17-jdk-headless",
                        (Step(("java", "-Xmx128m", "-cp", "@classes", "ZipThreads", "4", "120")),),
                        build=lambda: {"@classes": str(java_classes("ZipThreads"))}),
    "qemu-img": Program("qemu-img", "qemu-utils", (Step(("qemu-img", "create", "-q", "-f", "qcow2", "x.qcow2", "64M")),
                                                   Step(("qemu-img", "measure", "-O", "raw", "x.qcow2")))),
}


def _run(steps, cwd: Path, env: dict, user: str | None = None) -> list[tuple[int, str]]:
    out = []
    for step in steps:
        p = subprocess.run(step.argv, cwd=cwd, env=env | step.env, capture_output=True, text=True, timeout=180,
                           user=user)
        stdout = "".join(line for line in p.stdout.splitlines(keepends=True) if line.startswith(step.keep))
        out.append((p.returncode, stdout if step.compare else "", p.stderr[-1500:]))
        if p.returncode != 0:
            break
    return out


def _conditions(base_env: dict, program: str, fp_dir: Path) -> dict[str, dict]:
    """Plain, then the interposer before each installed allocator (tune's diagnosis), and glibc under
    the verification's LD_DEBUG: each a whole environment."""
    lib = interposer()
    out = {"plain": base_env}
    for v in installed_variants():
        v = forward.for_cell(v, resolve_command(program))
        env = v.apply(base_env)
        preload = " ".join([str(lib), *env.get("LD_PRELOAD", "").split()])
        out[f"fingerprint {v.label}"] = env | {"LD_PRELOAD": preload, "ALLOCLAB_FP_DIR": str(fp_dir)}
        if v.is_system:
            out["verification glibc"] = env | verify.ld_debug_env(fp_dir / "ld")
    return out


def _write(files: dict, into: Path) -> None:
    for name, text in files.items():
        (into / name).parent.mkdir(parents=True, exist_ok=True)
        (into / name).write_text(text)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_a_real_program_keeps_its_exit_status_and_output_under_alloclab(name, tmp_path):
    prog = CORPUS[name]
    if not (Path(prog.needs).exists() or shutil.which(prog.needs)):
        missing_prerequisite(f"{prog.needs} is not installed (apt-get install -y {prog.package})")
    built = prog.build() if prog.build else {}
    steps = [Step(tuple(built.get(w, w) for w in s.argv), s.compare, s.env, s.keep) for s in prog.steps]
    fp_dir = tmp_path / "fp"
    fp_dir.mkdir()
    results = {}
    for label, env in _conditions(dict(os.environ), steps[0].argv[0], fp_dir).items():
        cwd = tmp_path / label.replace(" ", "-")
        cwd.mkdir()
        _write(prog.files, cwd)
        results[label] = _run(steps, cwd, env)
    plain = results["plain"]
    assert plain and all(rc == 0 for rc, _, _ in plain), ("the program fails plain", plain)
    assert any(out.strip() for _, out, _ in plain), "the program printed nothing to compare"
    for label, got in results.items():
        assert [(rc, out) for rc, out, _ in got] == [(rc, out) for rc, out, _ in plain], (label, got[-1][2])
    if prog.static:
        # No interpreter, so nothing was preloaded into it: the interposer never ran.
        assert not list(fp_dir.glob("fp-*.json")), "a fingerprint from a static program"
        return
    # The interposer ran in them: every fingerprint condition wrote its files.
    assert list(fp_dir.glob("fp-*.json")), "no fingerprint file: the interposer did not run"


def _wait(predicate, timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def _server_session(start: list[str], client: list[list[str]], stop: list[str], ready, env: dict, cwd: Path,
                    user: str | None = None) -> tuple[int | None, list[tuple[int, str]]]:
    """The server started under `env`, the client's commands plain, the server stopped; its exit
    status (None where it had to be killed) and the client's outputs. Torn down on every path."""
    server = subprocess.Popen(start, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              user=user, start_new_session=True)
    try:
        assert _wait(ready), ("the server never got ready", server.poll(), server.stderr.read(2000) if
                              server.poll() is not None else "")
        outs = [(p.returncode, p.stdout) for argv in client
                for p in [subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=60, user=user)]]
        subprocess.run(stop, cwd=cwd, env=env, capture_output=True, timeout=60, user=user)
        try:
            return server.wait(timeout=30), outs
        except subprocess.TimeoutExpired:
            return None, outs
    finally:
        if server.poll() is None:
            os.killpg(server.pid, 9)
            server.wait()


def test_redis_server_started_and_stopped_keeps_its_fate_under_alloclab(tmp_path):
    redis = shutil.which("redis-server") or missing_prerequisite("redis-server is not installed (apt-get install -y redis-server)")
    cli = shutil.which("redis-cli") or missing_prerequisite("redis-cli is not installed (apt-get install -y redis-tools)")
    fp_dir = tmp_path / "fp"
    fp_dir.mkdir()
    results = {}
    for label, env in _conditions(dict(os.environ), redis, fp_dir).items():
        sock = tmp_path / f"{label.replace(' ', '-')}.sock"
        start = [redis, "--port", "0", "--unixsocket", str(sock), "--save", "", "--appendonly", "no",
                 "--dir", str(tmp_path)]
        base = [cli, "-s", str(sock)]
        client = [base + ["SET", "k", "v" * 1000], base + ["RPUSH", "l", *map(str, range(2000))],
                  base + ["LRANGE", "l", "1990", "1999"], base + ["DBSIZE"], base + ["STRLEN", "k"]]
        results[label] = _server_session(start, client, base + ["SHUTDOWN", "NOSAVE"], sock.exists, env, tmp_path)
    assert results["plain"][0] == 0 and all(rc == 0 for rc, _ in results["plain"][1]), results["plain"]
    for label, got in results.items():
        assert got == results["plain"], (label, got)


def test_postgres_started_and_stopped_keeps_its_fate_under_alloclab():
    bins = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
    if not bins:
        missing_prerequisite("PostgreSQL is not installed (apt-get install -y postgresql)")
    pg = bins[-1]
    user = "postgres" if os.geteuid() == 0 else None   # PostgreSQL refuses to run as root
    # A directory the server's user can reach: the interposer is copied there (root's cache is private).
    top = Path(tempfile.mkdtemp(prefix="alloclab-corpus-pg-"))
    try:
        top.chmod(0o755)
        lib = top / interposer().name
        shutil.copyfile(interposer(), lib)
        lib.chmod(0o755)
        fp_dir = top / "fp"
        fp_dir.mkdir()
        if user:
            shutil.chown(fp_dir, user)
        # One cluster made plain, copied for each condition: the server's start, its work and its
        # stop are what runs under each allocator (initdb would add seconds a condition, not a check).
        made = top / "made"
        made.mkdir()
        if user:
            shutil.chown(made, user)
        init = subprocess.run([str(pg / "initdb"), "-D", "data", "-A", "trust", "-U", "postgres", "--no-sync"],
                              cwd=made, capture_output=True, text=True, timeout=120, user=user)
        assert init.returncode == 0, init.stderr[-2000:]
        results = {}
        for label, env in _conditions(dict(os.environ), str(pg / "postgres"), fp_dir).items():
            env = env | {"LD_PRELOAD": env.get("LD_PRELOAD", "").replace(str(interposer()), str(lib))}
            cwd = top / label.replace(" ", "-")
            cwd.mkdir()
            if user:
                shutil.chown(cwd, user)
            subprocess.run(["cp", "-a", f"{made}/data", str(cwd)], check=True, user=user)
            start = [str(pg / "postgres"), "-D", "data", "-k", str(cwd), "-c", "listen_addresses=", "-c", "fsync=off"]
            query = [str(pg / "psql") if (pg / "psql").exists() else "psql", "-h", str(cwd), "-U",
                     "postgres", "-d", "postgres", "-Atc",
                     "create table t as select g, md5(g::text) h from generate_series(1, 50000) g; "
                     "select count(*), sum(g), max(h) from t; select count(*) from pg_class where relname = 't';"]
            stop = [str(pg / "pg_ctl"), "-D", "data", "-w", "-m", "fast", "stop"]
            # The socket appears before the server accepts: a query sent then gets "starting up" (exit 2).
            ready = [str(pg / "pg_isready") if (pg / "pg_isready").exists() else "pg_isready", "-q", "-h",
                     str(cwd), "-U", "postgres", "-d", "postgres"]
            results[label] = _server_session(
                start, [query], stop,
                lambda c=cwd, r=ready: (c / ".s.PGSQL.5432").exists() and subprocess.run(r, timeout=30).returncode == 0,
                env, cwd, user)
        assert results["plain"][0] == 0 and results["plain"][1][0][0] == 0, results["plain"]
        assert "50000|1250025000|" in results["plain"][1][0][1]
        for label, got in results.items():
            assert got == results["plain"], (label, got)
    finally:
        shutil.rmtree(top, ignore_errors=True)
