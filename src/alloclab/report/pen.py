"""The HTML page's charts, in page order: each a job (the module of report/ that draws it, the
function, its arguments), drawn together by charts.draw_all in forked workers, or, where the
same page of the same Results was drawn before, read from the cache under the Results' key
(stats/results_cache.py): then matplotlib (0.4 s) is not even imported, nor 28 charts drawn
(0.9 s on a 2-core VM for the stored demo)."""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
from pathlib import Path

from alloclab import cache

KIND = "charts"
VERSION = 1          # of the entry's layout


class Pen:
    def __init__(self) -> None:
        self.jobs: list[tuple[str, str, tuple]] = []

    def add(self, module: str, function: str, *args) -> int:
        """A chart to draw; its number stands in the page until `draw` gives its SVG."""
        self.jobs.append((module, function, args))
        return len(self.jobs) - 1

    def draw(self, key: str | None) -> list[str]:
        """Every chart's SVG, job k with the id prefix c{k+1}- (as charts.draw_all numbers them)."""
        entry = hashlib.sha256(f"{VERSION} {key} {[(m, f) for m, f, _ in self.jobs]} {_matplotlib_setup()}"
                               .encode()).hexdigest()[:40] if key else None
        if entry:
            kept = _read(entry, len(self.jobs))
            if kept is not None:
                return kept
        from alloclab.report import charts
        drawn = charts.draw_all([functools.partial(_draw, m, f, args) for m, f, args in self.jobs])
        if entry:
            cache.write(KIND, entry, pickle.dumps(drawn, protocol=pickle.HIGHEST_PROTOCOL))
        return drawn


def _matplotlib_setup() -> str:
    """What matplotlib reads besides its own files (those are in the Results' key): the rc files it
    looks for and its font list, by size and time, without importing it."""
    config = os.environ.get("MPLCONFIGDIR")
    home = Path.home()
    fonts = Path(config) if config else Path(os.environ.get("XDG_CACHE_HOME") or home / ".cache") / "matplotlib"
    rc = [Path("matplotlibrc").resolve(), *([Path(os.environ["MATPLOTLIBRC"])] if os.environ.get("MATPLOTLIBRC") else []),
          (Path(config) if config else Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config") / "matplotlib")
          / "matplotlibrc"]
    return cache.stamp([*rc, *sorted(fonts.glob("fontlist-*.json"))])


def _draw(module: str, function: str, args: tuple) -> str:
    from alloclab.report import charts, fingerprint_charts
    return getattr({"charts": charts, "fingerprint_charts": fingerprint_charts}[module], function)(*args)


def _read(entry: str, n: int) -> list[str] | None:
    data = cache.read(KIND, entry)
    try:
        drawn = pickle.loads(data) if data is not None else None
    except Exception:   # noqa: BLE001 - a damaged entry is a miss
        return None
    ok = isinstance(drawn, list) and len(drawn) == n and all(isinstance(s, str) for s in drawn)
    return drawn if ok else None
