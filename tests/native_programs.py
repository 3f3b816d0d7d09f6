"""The tests' Go and Rust programs, a Node.js addon and Java classes, built once into the user's cache (as workloads/build.py keeps
alloclab's C programs): a Go build takes 15 s and a Rust one with its crates 20 s, too long for
every test session. Keyed by the sources, the lock file and the toolchain's version, written
atomically, so parallel test workers and a changed source never see a stale or half-written binary.
A missing toolchain skips the test, or fails it under CI=true (`make setup-test` installs them)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from alloclab import cache
from conftest import PROGRAMS, missing_prerequisite


def _toolchain(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        missing_prerequisite(f"{name} is not installed (apt-get install -y {package})")
    return path


def _digest(files: list[Path], *words: str) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(PROGRAMS)).encode() + b"\0" + f.read_bytes())
    h.update("\0".join(words).encode())
    return h.hexdigest()[:16]


def go_program(name: str, *, cgo: bool = False) -> Path:
    """tests/programs/NAME.go built with CGO_ENABLED=0 (static) or 1; no module downloads."""
    go = _toolchain("go", "golang-go")
    src = PROGRAMS / f"{name}.go"
    version = subprocess.run([go, "version"], capture_output=True, text=True, check=True).stdout.strip()
    # A folder per build, the program under its own name: tune's answer names it so.
    out = cache.root() / "tests" / f"go-{name}-{_digest([src], version, str(cgo))}" / name
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache.root()) as tmp:
        env = os.environ | {"CGO_ENABLED": "1" if cgo else "0", "GOPROXY": "off",
                            "GOCACHE": str(cache.root() / "go-build")}
        subprocess.run([go, "build", "-o", f"{tmp}/{name}", str(src)], check=True, capture_output=True, env=env,
                       cwd=tmp)
        os.replace(f"{tmp}/{name}", out)
    return out


def rust_program(name: str, static: bool = False) -> Path:
    """The cargo package tests/programs/NAME (Cargo.toml, Cargo.lock, src/), built --release --locked
    (its crates fetched from crates.io on the first build) into a target folder in the cache;
    `static`: with glibc linked in (-C target-feature=+crt-static), in a target folder of its own."""
    cargo = _toolchain("cargo", "cargo-web")
    pkg = PROGRAMS / name
    files = sorted(f for f in pkg.rglob("*") if f.is_file() and "target" not in f.parts)
    version = subprocess.run([cargo, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    out = cache.root() / "tests" / f"rust-{name}-{_digest(files, version, 'static' * static)}" / name
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    target = cache.root() / ("cargo-target-static" if static else "cargo-target")
    env = os.environ | {"CARGO_TARGET_DIR": str(target)} | ({"RUSTFLAGS": "-C target-feature=+crt-static"} if static else {})
    proc = subprocess.run([cargo, "build", "--release", "--locked", "-q", "--manifest-path", str(pkg / "Cargo.toml")],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, f"cargo build of tests/programs/{name} failed:\n{proc.stderr[-3000:]}"
    with tempfile.TemporaryDirectory(dir=cache.root()) as tmp:
        shutil.copy2(target / "release" / name, f"{tmp}/{name}")
        os.replace(f"{tmp}/{name}", out)
    return out


def node_addon(name: str) -> Path:
    """The Node-API addon tests/programs/NAME (binding.gyp and its C sources) built by node-gyp against
    the system's headers (--nodedir: nothing downloaded); the folder holding
    NAME.node and the package's other files (its run.js)."""
    node = _toolchain("node", "nodejs")
    # Debian's node-gyp, else the one a Node.js from elsewhere ships inside its npm (nodesource's
    # nodejs conflicts with Debian's libnode108, so Debian's node-gyp cannot be installed beside it):
    # either builds against the installed headers (--nodedir), nothing downloaded.
    bundled = Path("/usr/lib/node_modules/npm/node_modules/node-gyp/bin/node-gyp.js")
    if shutil.which("node-gyp") is not None:
        gyp = [_toolchain("node-gyp", "node-gyp libnode-dev")]
    elif bundled.exists():
        gyp = [node, str(bundled)]
    else:
        missing_prerequisite("node-gyp is not installed (apt-get install -y node-gyp libnode-dev)")
    if (Path("/usr/include/nodejs/src") / "node_api.h").exists():   # Debian's libnode-dev
        nodedir = "/usr/include/nodejs"
    elif Path("/usr/include/node/node_api.h").exists():            # a Node.js that ships its headers
        nodedir = "/usr"
    else:
        missing_prerequisite("Node.js's headers (node_api.h) are not installed (apt-get install -y libnode-dev)")
    pkg = PROGRAMS / name
    files = sorted(f for f in pkg.rglob("*") if f.is_file() and "build" not in f.relative_to(pkg).parts)
    words = [subprocess.run([*c, "--version"], capture_output=True, text=True, check=True).stdout.strip()
             for c in (gyp, [node])]
    out = cache.root() / "tests" / f"node-{name}-{_digest(files, nodedir, *words)}"
    if (out / f"{name}.node").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache.root()) as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(pkg, src, ignore=shutil.ignore_patterns("build"))
        # HOME and the devdir in the build's folder: nothing written to (or read from) ~/.cache/node-gyp.
        proc = subprocess.run([*gyp, "configure", "build", f"--nodedir={nodedir}", f"--devdir={tmp}/devdir"],
                              cwd=src, capture_output=True, text=True, env=os.environ | {"HOME": tmp})
        assert proc.returncode == 0, f"node-gyp build of tests/programs/{name} failed:\n{proc.stderr[-3000:]}"
        done = Path(tmp) / "done"
        shutil.copytree(pkg, done, ignore=shutil.ignore_patterns("build"))
        shutil.copy2(src / "build" / "Release" / f"{name}.node", done / f"{name}.node")
        try:
            os.replace(done, out)
        except OSError:        # a parallel worker's build got there first (a folder is not replaced)
            if not (out / f"{name}.node").exists():
                raise
    return out


def java_classes(name: str) -> Path:
    """tests/programs/NAME.java compiled by javac; the folder of its classes (java -cp FOLDER NAME)."""
    javac = _toolchain("javac", "openjdk-17-jdk-headless")
    src = PROGRAMS / f"{name}.java"
    version = subprocess.run([javac, "-version"], capture_output=True, text=True, check=True)
    out = cache.root() / "tests" / f"java-{name}-{_digest([src], version.stdout + version.stderr)}"
    if (out / f"{name}.class").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache.root()) as tmp:
        proc = subprocess.run([javac, "-d", f"{tmp}/classes", str(src)], capture_output=True, text=True)
        assert proc.returncode == 0, f"javac of tests/programs/{name}.java failed:\n{proc.stderr[-3000:]}"
        try:
            os.replace(f"{tmp}/classes", out)
        except OSError:
            if not (out / f"{name}.class").exists():
                raise
    return out


# What the tests build, in the order `make setup-test` builds them.
ALL = (("go", "gocgo", lambda: go_program("gocgo", cgo=True)), ("go", "gostatic", lambda: go_program("gostatic")),
       ("rust", "rust-system", lambda: rust_program("rust-system")),
       ("rust", "rust-mimalloc", lambda: rust_program("rust-mimalloc")),
       ("rust", "rust-jemalloc", lambda: rust_program("rust-jemalloc")),
       ("rust", "rust-system, static", lambda: rust_program("rust-system", static=True)),
       ("rust", "rust-mimalloc, static", lambda: rust_program("rust-mimalloc", static=True)),
       ("node", "nodeaddon", lambda: node_addon("nodeaddon")), ("java", "ZipThreads", lambda: java_classes("ZipThreads")))


def main() -> int:
    """Build every program into the cache (`make setup-test`, untimed: a test then finds it there).
    One that cannot be built is named with why, and the rest are built; its tests say so again."""
    import pytest
    failed = 0
    for kind, name, build in ALL:
        try:
            build()
        except (pytest.skip.Exception, pytest.fail.Exception, AssertionError, subprocess.CalledProcessError,
                OSError) as exc:
            failed += 1
            why = getattr(exc, "msg", None) or exc
            if isinstance(exc, subprocess.CalledProcessError):
                why = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr
            print(f"setup: the tests' {kind} program {name} was not built: {str(why).strip()[-1500:]}")
    if failed:
        print(f"setup: {failed} of the tests' programs not built; their tests say why again")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
