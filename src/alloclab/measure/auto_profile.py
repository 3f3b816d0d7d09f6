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

from typing import TYPE_CHECKING

from alloclab.errors import AlloclabError, Interrupted

if TYPE_CHECKING:
    from alloclab.measure.runner import Experiment


def unavailable() -> str | None:
    """Why perf cannot take the profile here (None when it can)."""
    from alloclab.measure.profile.perf import perf_access
    try:
        perf_access()
    except AlloclabError as exc:
        return str(exc)
    return None


def profile_open(exp: "Experiment", workload_idxs: set[int]) -> None:
    """One profiled run per variant of each workload in `workload_idxs`, stored with the experiment."""
    from alloclab.measure.profile import record
    from alloclab.measure.profile.summary import attach_counters, store_profiles

    why = unavailable()
    if why:
        exp.progress.note(f"no profile beside the undecided comparisons: {why}")
        return
    summaries = []
    names = ", ".join(exp.workloads[wi].name for wi in sorted(workload_idxs))
    exp.progress.note(f"undecided: one profiled run per variant of {names}, for the allocator's share of the CPU")
    exp.progress_total += len(workload_idxs) * len(exp.variants)
    exp.progress.start(exp.progress_total)
    try:
        for wi in sorted(workload_idxs):
            w = exp.workloads[wi]
            try:
                record.check_profilable(w)
            except AlloclabError as exc:
                exp.progress.note(f"{w.name}: not profiled ({exc})")
                continue
            plain = {v.label: [r["metrics"] for r in exp.recorder.experiment.cell_runs(wi, vi) if r["status"] == "ok"]
                     for vi, v in enumerate(exp.variants)}
            # The variants as given: profile_workload forces glibc where a program links another allocator.
            summaries += record.profile_workload(w, exp.variants, 1, baseline=plain, timeout_s=exp.settings.timeout_s,
                                                 workload_idx=wi, seed=exp.settings.seed, keep_session=True,
                                                 advance=exp.progress.advance)
    except Interrupted as stop:
        summaries += getattr(stop, "summaries", [])
        exp.progress.note("the profile was interrupted (Ctrl-C): the measured runs and the profiles so far are kept")
    except AlloclabError as exc:
        exp.progress.note(f"the profile beside the undecided comparisons failed: {exc}")
    if summaries:
        attach_counters(summaries, exp.recorder.experiment)
        store_profiles(exp.store, exp.exp_id, summaries)
