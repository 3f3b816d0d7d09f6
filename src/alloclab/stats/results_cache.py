"""Results computed once per experiment, question and code: the end of `compare` keeps the
Results it printed, and `alloclab report` of the same experiment renders them instead of
analysing again (0.19 s on the stored demo, and the 0.17 s import of scipy.special that only the
analysis needs: stats/special.py).

The key (kept as Results.key, under which exporters may keep what they derive, as the HTML
report does its charts) is exact, so an entry is never stale: a digest of the loaded
experiment's records (any run added, merged or changed gives another), of the question
(baseline, margin, memory budget, the views asked for), and of the code (cache.code_digest). An
entry holds the Results but not the experiment's records, which it refers to: a read gives it
the experiment just loaded. The quality checks of a cell run when a view first shows them
(stats/analysis.Cell), so an entry is written after the render (`keep`), with the checks that
render ran; a later render that runs more writes it again.
"""

from __future__ import annotations

import copyreg
import hashlib
import io
import pickle
import sys

from alloclab import cache
from alloclab.stats import analysis
from alloclab.stats.results import Results, build_results
from alloclab.store.db import Experiment

KIND = "results"
VERSION = 1                     # of the entry's layout


def results(e: Experiment, *, baseline: str | int | None = None, min_effect: float | None = None,
            max_rss_increase: float | None = None, sweeps: bool = False, summary: bool = False,
            hosts: dict[str, Experiment] | None = None) -> Results:
    """build_results(e, ...), from the cache where this experiment, question and code were
    analysed before. A fleet experiment's per-host view (`hosts`) is not cached."""
    question = dict(baseline=baseline, min_effect=min_effect, max_rss_increase=max_rss_increase,
                    sweeps=sweeps, summary=summary)
    if hosts is not None or cache.off():
        return build_results(e, hosts=hosts, **question)
    # As analyze reads it: `compare` asks with its margin, `report` with none (the stored one).
    base, margin = analysis.question(e, baseline, min_effect)
    try:
        key = _key(e, question | {"baseline": base, "min_effect": margin})
    except Exception:   # noqa: BLE001 - what cannot be keyed is computed, as without a cache
        return build_results(e, **question)
    r = _read(key, e)
    checked = _checked(r) if r is not None else -1
    if r is None:
        r = build_results(e, **question)
    r.key = key
    _pending[id(r)] = (checked, r)
    return r


def keep(r: Results, every_check: bool = False) -> None:
    """After the render: write `r` (from `results`) with the checks its views ran, where the
    cache had no entry or a render has run more checks than the entry held. `every_check` runs
    the rest first (0.2 s on the stored demo: `compare` pays it at its end, so that any report
    of the experiment after it, in any format, analyses nothing)."""
    checked, _ = _pending.pop(id(r), (None, None))
    if checked is None:
        return   # not from `results`, or not cached (a fleet's per-host view)
    try:
        if every_check:
            for c in _cells(r):
                c.findings   # noqa: B018 - run and keep
        if _checked(r) > checked:
            _write(r)
    except Exception:   # noqa: BLE001 - the cache must never fail the command that printed its answer
        return


_pending: dict[int, tuple[int, Results]] = {}


def _cells(r: Results) -> list:
    return [c for w in r.analysis.workloads for row in w.rows for c in row.cells if c is not None]


def _checked(r: Results) -> int:
    return sum(c.checked() for c in _cells(r))


def _key(e: Experiment, question: dict) -> str:
    h = hashlib.sha256()
    h.update(f"{VERSION} {sys.version} {sorted(question.items())!r} {cache.code_digest()}".encode())
    h.update(pickle.dumps(e, protocol=pickle.HIGHEST_PROTOCOL))
    return h.hexdigest()[:40]


def _write(r: Results) -> None:
    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
    # The experiment is pickled as a reference to the one loaded when the entry is read (the
    # key proves the two equal): a third of the size, and half the time to read.
    pickler.dispatch_table = copyreg.dispatch_table | {Experiment: lambda _: (_loaded_experiment, ())}
    pickler.dump(r)   # keep() turns a failure into a miss next time
    cache.write(KIND, r.key, buf.getvalue())


_loading: list[Experiment] = []


def _loaded_experiment() -> Experiment:
    return _loading[-1]


def _read(key: str, e: Experiment) -> Results | None:
    data = cache.read(KIND, key)
    if data is None:
        return None
    _loading.append(e)
    try:
        r = pickle.loads(data)
    except Exception:   # noqa: BLE001 - a damaged or foreign entry is a miss
        return None
    finally:
        _loading.pop()
    return r if isinstance(r, Results) and r.experiment is e else None
