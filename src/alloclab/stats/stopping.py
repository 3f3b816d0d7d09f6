"""Why a sequential experiment stopped adding blocks, as its analysis reads it: the runner's reason
(decided, bounded, budget, max-runs), after how many blocks, and which comparisons a racing judge
closed (below a leader, or for the budget), so that an undecided comparison is said as ended by
what ended it.

In: the stored Experiment. Out: a Stop, and the word for an undecided comparison (stopped_as)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from alloclab import defaults
from alloclab.store.db import Experiment
from alloclab.store.model import Run


def block_key(r: Run) -> tuple:
    """What pairs runs: the block they ran in (on the host that ran it, for fleet runs)."""
    return (r.extra.get("host"), r.block)


def measured_blocks(runs: list[Run]) -> int:
    """Blocks a variant took part in (failed runs too): the look a comparison is at."""
    return len({block_key(r) for r in runs})


@dataclass(frozen=True)
class Stop:
    """Why a sequential experiment stopped adding blocks (the runner's config, key `stopped`: decided,
    bounded, budget, max-runs), after how many, and whether this analysis asks what its looks asked
    (the same baseline and margin), so that what its looks closed can be told from the runs."""
    reason: str | None
    blocks: int
    same_question: bool
    dropped: frozenset = frozenset()      # (workload, variant) a racing judge closed below a leader,
    for_budget: frozenset = frozenset()   # and for the budget (open, not ruled out)


def stop_of(exp: Experiment, base: int, margin: float) -> Stop | None:
    """None while the experiment may still add runs (running, interrupted, or fixed --runs)."""
    c = exp.config
    if exp.row.status != "complete" or not c.until_decided:
        return None
    done = c.runs_done or max((measured_blocks(exp.cell_runs(w.idx, vi))
                                               for w in exp.workloads for vi in range(len(exp.variants))), default=0)
    # The runner judges against the first variant at the margin it was given.
    same = base == 0 and math.isclose(margin, float(c.margin if c.margin is not None else defaults.MARGIN),
                                      abs_tol=1e-12)
    return Stop(c.stopped, int(done), same, *(frozenset((wi, vi) for wi, vi, leader, *_ in c.dropped
                                                        if bool(leader) == below) for below in (True, False)))


def stopped_as(stop: Stop | None, primary: bool, blocks: int, looks: tuple | list) -> str | None:
    """How an undecided comparison whose candidate ran `blocks` blocks was ended, as far as the runs
    tell: "bounded" (closed by the futility rule: its interval is the bound it is), "budget" or
    "max-runs" (still open when that stopped the experiment), None (nothing to say beyond undecided).

    The runner closes a variant at a look once each of its primary comparisons is decided or futile
    (stats/looks.py), and then runs it no more: an undecided primary comparison whose candidate
    stopped at a look before the end was futile there. One that ran to the end was open at the
    stop, unless the stop itself was "bounded" (every comparison left was futile at the last look).
    A metric the runner did not judge (not primary), or a question it did not ask (another baseline
    or margin), was never closed as futile: it is stopped by the budget or --max-runs, or plainly
    undecided."""
    if stop is None:
        return None
    judged = primary and stop.same_question
    if blocks < stop.blocks:
        return "bounded" if judged and blocks in looks else None
    if stop.reason == "bounded":
        return "bounded" if judged else None
    return stop.reason if stop.reason in ("budget", "max-runs") else None


