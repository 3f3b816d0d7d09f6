"""The HTML page's charts, in page order: each a job (the module of report/ that draws it, the
function, its arguments), drawn together by charts.draw_all in forked workers, or, where the
same page of the same Results was drawn before, read from the cache under the Results' key
(stats/results_cache.py): then matplotlib (0.4 s) is not even imported, nor 28 charts drawn
(0.9 s on a 2-core VM for the stored demo).

Where a command knows at its start that it will draw a page (`alloclab report -f html`), `start_early`
forks the drawer then: it imports matplotlib while this process loads the experiment and writes the
page, then draws the jobs it is handed, forking its own workers from an interpreter that already
has matplotlib (0.2 s sooner on the stored demo). A drawer that fails leaves the drawing here."""

from __future__ import annotations

import atexit
import functools
import hashlib
import multiprocessing as mp
import os
import pickle
import signal
import sys
import threading
from pathlib import Path

from alloclab import cache

KIND = "charts"
VERSION = 1          # of the entry's layout
# What each kind of chart costs to draw, in ms on a 2-core VM (the stored demo): the workers take the
# costliest first. A kind not named costs about the median.
COST_MS = {"rss_over_time_svg": 66, "pareto_chart": 55, "peak_rss_chart": 49, "metric_chart": 44}


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
                stop_early()   # a drawer forked for this page has nothing to draw
                return kept
        drawn = _early.draw(self.jobs) if _early is not None else None
        if drawn is None or len(drawn) != len(self.jobs):
            from alloclab.report import charts
            drawn = charts.draw_all(*_work(self.jobs))
        if entry:
            cache.write(KIND, entry, pickle.dumps(drawn, protocol=pickle.HIGHEST_PROTOCOL))
        return drawn


def _work(jobs: list[tuple[str, str, tuple]]) -> tuple[list, int, list[float]]:
    """charts.draw_all's arguments for these jobs: the calls, the first id, their costs."""
    return ([functools.partial(_draw, m, f, args) for m, f, args in jobs], 1,
            [COST_MS.get(f, 50) for _, f, _ in jobs])


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


class _Drawer:
    """A process forked before the page is known: it imports the charts, then draws the one list of
    jobs it is sent (charts.draw_all, whose workers it forks) and sends their SVG back."""

    def __init__(self) -> None:
        ctx = mp.get_context("fork")
        self.conn, child = ctx.Pipe()
        for stream in (sys.stdout, sys.stderr):   # nothing buffered here may be written twice
            stream.flush()
        # Not a daemon: draw_all forks its own workers, which a daemonic process may not.
        self.proc = ctx.Process(target=_serve, args=(child, self.conn), daemon=False)
        self.proc.start()
        try:   # here as well as in the child, so that the group exists whichever runs first
            os.setpgid(self.proc.pid, self.proc.pid)
        except OSError:
            pass
        child.close()

    def draw(self, jobs: list) -> list[str] | None:
        try:
            self.conn.send(jobs)
            drawn = self.conn.recv()
        except (OSError, EOFError, pickle.PicklingError, TypeError, AttributeError):
            drawn = None
        self.close(done=drawn is not None)
        return drawn if isinstance(drawn, list) else None

    def close(self, done: bool = False) -> None:
        """Done, it ends by itself; unused or interrupted (the charts were kept, the command failed,
        Ctrl-C), it is stopped at once with the workers it forked: its process group is its own."""
        global _early
        if _early is self:
            _early = None
        self.conn.close()
        if done:
            self.proc.join(timeout=5)
        if self.proc.is_alive() or not done:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                self.proc.kill()
            self.proc.join()


def _serve(conn, parent_end) -> None:
    # A group of its own, which the parent stops whole (the drawing workers with it); Ctrl-C at the
    # terminal reaches the parent, which does.
    os.setpgid(0, 0)
    parent_end.close()
    try:
        from alloclab.report import charts   # matplotlib, while the parent works
        jobs = conn.recv()
        try:
            drawn = charts.draw_all(*_work(jobs))
        except Exception:   # noqa: BLE001 - the parent draws them itself, and its error is the one shown
            drawn = None
        conn.send(drawn)
    except (EOFError, OSError, KeyboardInterrupt):
        pass   # the parent needs no page or is stopping: end quietly


_early: _Drawer | None = None


def start_early() -> None:
    """Fork the drawer now, where a page will be drawn and a second core can import matplotlib
    meanwhile. Whatever happens next, it is stopped at exit if no page asked for it."""
    global _early
    # Not from a process with other threads (a fleet client's, a progress display's): the drawer
    # could inherit a lock one of them holds.
    if _early is None and len(os.sched_getaffinity(0)) > 1 and "fork" in mp.get_all_start_methods() \
            and threading.active_count() == 1:
        _early = _Drawer()
        # Registered after multiprocessing's own exit handler, so run before it: that one joins
        # the drawer, which would wait for jobs that never come.
        atexit.register(stop_early)


def stop_early() -> None:
    if _early is not None:
        _early.close()
