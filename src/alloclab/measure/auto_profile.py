"""A cheap profile where the verdict stays open: when a sequential experiment stops (budget,
--max-runs, or every open comparison closed as a bound) with a primary comparison of a workload
still undecided, one perf-recorded run per variant of that workload, before its set-up is torn
down. The allocator's share of those runs' CPU bounds what any allocator could change
(report/common.py `bound_answers`): the argument a careful engineer makes beside "undecided".

Made inside the runner so that a recipe's set-up (a loaded database, a Ceph cluster) serves it as
it served the timed runs; the runner reserves about one block of its budget for it. Nothing here
may cost the experiment: a machine where perf cannot sample gets a note, and an error or Ctrl-C
keeps the runs measured and the profiles made so far.
"""

from __future__ import annotations

import time

from typing import Any, Protocol

from alloclab.errors import AlloclabError, Interrupted
from alloclab.store.db import Store
from alloclab.store.records import Recorder


class Measuring(Protocol):
    """What the profile takes from the experiment under way (measure/runner.py's Runner)."""
    store: Store
    recorder: Recorder
    workloads: list
    variants: list
    settings: Any        # measure.runner.Settings: timeout_s, seed
    progress: Any        # measure.runner.Progress: note, start, advance
    hooks: Any           # measure.hooks.HookRunner: --prepare before each profiled run
    progress_total: int


def unavailable() -> str | None:
    """Why perf cannot take the profile here (None when it can)."""
    from alloclab.measure.profile.perf import perf_access
    try:
        perf_access()
    except AlloclabError as exc:
        return str(exc)
    return None


def profile_open(exp: Measuring, workload_idxs: set[int]) -> None:
    """One profiled run per variant of each workload in `workload_idxs`, stored with the experiment."""
    from alloclab.measure.profile import record

    why = unavailable()
    if why:
        exp.progress.note(f"no profile beside the undecided comparisons: {why}")
        return
    from alloclab.measure.blocks import PROFILE_COST
    # A run per variant of each open workload, perf's cost beside it: within the budget, or none.
    need = PROFILE_COST * getattr(exp, "_pace_s", 0.0) * len(workload_idxs) / max(1, len(exp.workloads))
    left = exp.settings.max_seconds - (exp.clock() - getattr(exp, "_budget_started", exp.clock()))
    if need > left:
        exp.progress.note(f"no profile beside the undecided comparisons: it would take about {need:.0f} s, and "
                          f"{max(0.0, left):.0f} s of the budget are left")
        return
    profilable = set()
    for wi in sorted(workload_idxs):
        try:
            record.check_profilable(exp.workloads[wi])
            profilable.add(wi)
        except AlloclabError as exc:
            exp.progress.note(f"{exp.workloads[wi].name}: not profiled ({exc})")
    if not profilable:
        return
    names = ", ".join(exp.workloads[wi].name for wi in sorted(profilable))
    exp.progress.note(f"undecided: one profiled run per variant of {names}, for the allocator's share of the CPU")
    exp.progress_total += len(profilable) * len(exp.variants)
    exp.progress.start(exp.progress_total)
    try:
        # The variants as given: profile_workload forces glibc where a program links another allocator.
        record.profile_experiment(exp.store, exp.recorder.experiment, exp.workloads, exp.variants, runs=1,
                                  timeout_s=exp.settings.timeout_s, advance=exp.hooks.preparing(exp.progress.advance),
                                  only=profilable, keep_session=True, seed=exp.settings.seed,
                                  deadline=time.monotonic() + max(0.0, left))
    except Interrupted:
        exp.progress.note("the profile was interrupted (Ctrl-C): the measured runs and the profiles so far are kept")
    except AlloclabError as exc:
        exp.progress.note(f"the profile beside the undecided comparisons failed: {exc}")
