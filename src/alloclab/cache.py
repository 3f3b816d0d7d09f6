"""The user's cache folder ($ALLOCLAB_CACHE, else $XDG_CACHE_HOME/alloclab or ~/.cache/alloclab):
the built programs (workloads/build.py), and what was derived from an experiment under an exact
key (the Results, stats/results_cache.py; the HTML report's charts, report/html.py).

An entry's key names everything it was derived from, the code that derived it included
(`code_digest`), so an entry is never stale: a changed input is another key. A failure to read or
write an entry is a miss; the caller computes the thing as if there were no cache.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
from pathlib import Path

KEEP = 32                   # entries kept per kind, the most recently used,
KEEP_BYTES = 128 << 20      # and no more than this per kind (the demo's Results: 0.6 MiB)


def root() -> Path:
    base = os.environ.get("ALLOCLAB_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "alloclab")
    path = Path(base)
    path.mkdir(parents=True, exist_ok=True)
    return path


def off() -> bool:
    """ALLOCLAB_NO_RESULTS_CACHE set: derive everything afresh (bench/report_speed.py's cold runs)."""
    return bool(os.environ.get("ALLOCLAB_NO_RESULTS_CACHE"))


@functools.cache
def code_digest() -> str:
    """Every file of the package, and the entry points of numpy, scipy and matplotlib, by path,
    size and modification time: an edit or an upgrade gives new keys."""
    h = hashlib.sha256()
    roots = [Path(__file__).resolve().parent]
    for name in ("numpy", "scipy", "matplotlib"):
        spec = importlib.util.find_spec(name)   # finds, does not import
        if spec is not None and spec.origin:
            roots.append(Path(spec.origin))
    for top in roots:
        files = [top] if top.is_file() else sorted(
            Path(d) / f for d, _, names in os.walk(top) if "__pycache__" not in d
            for f in names if not f.endswith(".pyc"))
        h.update(stamp(files).encode())
    return h.hexdigest()


def stamp(files) -> str:
    """Each file that is there, by path, size and modification time (one gone since it was listed,
    or never there, is left out)."""
    out = []
    for f in files:
        try:
            st = f.stat()
        except OSError:
            continue
        out.append(f"{f} {st.st_size} {st.st_mtime_ns}\n")
    return "".join(out)


def _path(kind: str, key: str) -> Path | None:
    try:
        return root() / kind / f"{key}.pickle"
    except OSError:
        return None


def read(kind: str, key: str) -> bytes | None:
    path = _path(kind, key)
    if path is None:
        return None
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        os.utime(path)   # the most recently used are kept
    except OSError:
        pass
    return data


def write(kind: str, key: str, data: bytes, keep: int | None = None) -> None:
    path = _path(kind, key)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        # The entry just written first, then the most recently used (the name breaks a tie of
        # a coarse clock, so that every process trims the same way).
        others = sorted(((p.stat(), p) for p in path.parent.glob("*.pickle") if p != path),
                        key=lambda e: (e[0].st_mtime_ns, e[1].name), reverse=True)
        total = len(data)
        for k, (st, entry) in enumerate(others, start=1):
            total += st.st_size
            if k >= (KEEP if keep is None else keep) or total > KEEP_BYTES:
                entry.unlink(missing_ok=True)
    except OSError:
        return


def forget(kind: str, key: str) -> None:
    """An entry found wrong by its user: gone, so that the next reader derives it again."""
    path = _path(kind, key)
    try:
        if path is not None:
            path.unlink(missing_ok=True)
    except OSError:
        pass
