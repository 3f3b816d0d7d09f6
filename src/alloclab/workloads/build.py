"""Compile our small C programs on first use, cached by a hash of source, flags and compiler."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

from alloclab import cache
from alloclab.errors import AlloclabError

CFLAGS = ["-O2", "-g", "-pthread", "-Wall"]


def compiler() -> str:
    wanted = os.environ.get("CC")
    cc = shutil.which(wanted) if wanted else (shutil.which("cc") or shutil.which("gcc") or shutil.which("clang"))
    if not cc:
        looked = f"'{wanted}' from $CC" if wanted else "cc, gcc, clang"
        raise AlloclabError(
            f"No C compiler found (looked for {looked}). alloclab compiles its launcher and built-in "
            f"workloads on first use: install one with `apt-get install -y gcc libc6-dev` (as root), "
            f"or set CC to a compiler.")
    return cc


def package_file(*parts: str) -> Path:
    return Path(str(resources.files("alloclab").joinpath(*parts)))


def build(name: str, sources: list[Path], flags: list[str] | None = None, libs: list[str] | None = None,
          suffix: str = "") -> Path:
    """Return the path of an executable (or, with -shared in `flags`, a library named with
    `suffix`) built from `sources`, compiling only when they changed."""
    cc = compiler()
    flags = CFLAGS + (flags or [])
    libs = libs or []
    h = hashlib.sha256()
    for src in sources:
        h.update(src.read_bytes())
        # Headers next to the sources are part of the build too.
        for header in sorted(src.parent.glob("*.h")):
            h.update(header.read_bytes())
    h.update(" ".join([cc] + flags + libs).encode())
    out = cache.root() / f"{name}-{h.hexdigest()[:16]}{suffix}"
    if out.exists():
        return out
    with tempfile.TemporaryDirectory(dir=cache.root()) as tmp:
        tmp_out = Path(tmp) / name
        cmd = [cc, *flags, "-I", str(sources[0].parent), "-o", str(tmp_out), *map(str, sources), *libs]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise AlloclabError(
                f"Compiling {name} failed ({' '.join(cmd)}):\n{proc.stderr.strip()[-2000:]}\n"
                f"Install the C toolchain and headers with `apt-get install -y gcc libc6-dev`.")
        os.replace(tmp_out, out)  # atomic: concurrent builds never see a half-written file
    return out
