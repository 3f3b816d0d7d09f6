"""The tests' Go and Rust programs, built once into the user's cache (as workloads/build.py keeps
alloclab's C programs): a Go build takes 15 s and a Rust one with its crates 20 s, too long for
every test session. Keyed by the sources, the lock file and the toolchain's version, written
atomically, so parallel test workers and a changed source never see a stale or half-written binary.
A missing toolchain skips the test, or fails it under CI=true (`make setup-test` installs both)."""

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


def rust_program(name: str) -> Path:
    """The cargo package tests/programs/NAME (Cargo.toml, Cargo.lock, src/), built --release --locked
    (its crates fetched from crates.io on the first build) into a target folder in the cache."""
    cargo = _toolchain("cargo", "cargo-web")
    pkg = PROGRAMS / name
    files = sorted(f for f in pkg.rglob("*") if f.is_file() and "target" not in f.parts)
    version = subprocess.run([cargo, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    out = cache.root() / "tests" / f"rust-{name}-{_digest(files, version)}" / name
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    target = cache.root() / "cargo-target"
    proc = subprocess.run([cargo, "build", "--release", "--locked", "-q", "--manifest-path", str(pkg / "Cargo.toml")],
                          capture_output=True, text=True, env=os.environ | {"CARGO_TARGET_DIR": str(target)})
    assert proc.returncode == 0, f"cargo build of tests/programs/{name} failed:\n{proc.stderr[-3000:]}"
    with tempfile.TemporaryDirectory(dir=cache.root()) as tmp:
        shutil.copy2(target / "release" / name, f"{tmp}/{name}")
        os.replace(f"{tmp}/{name}", out)
    return out
