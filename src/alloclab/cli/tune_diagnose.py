"""tune's first step: the diagnosis. Which workloads are fingerprinted, one untimed run of each under
every plain allocator, what each run read (tune/diagnosis.py's Readings), and the stop where the
command fails under every allocator: then there is nothing to tune, and nothing is raced."""

from __future__ import annotations

from typing import TYPE_CHECKING

from alloclab.cli.app import err, run_experiment
from alloclab.cli.experiment_options import ExperimentOptions
from alloclab.errors import AlloclabError
from alloclab.store.db import Store

if TYPE_CHECKING:
    from alloclab.catalog.variants import Variant
    from alloclab.tune.diagnosis import Reading

# A file's commands fingerprinted at most (a sweep of many values would take a run per value and
# allocator before the budget is even checked); tune stops on a bound only where all were.
DIAGNOSED_COMMANDS = 4
# A run's status (measure/run.py) as the sentence says it.
_WORDS = {"failed": "failed", "timeout": "timed out", "interrupted": "was interrupted", "error": "could not run"}


def has_phases(workload) -> bool:
    return bool(getattr(getattr(workload.executor, "load", None), "phases", None))


def diagnosed(workloads: list) -> list:
    """The workloads the diagnosis fingerprints: a file's commands, up to DIAGNOSED_COMMANDS (a
    fingerprint run costs about a measured run: qemu-img's qcow2 and raw images); where a server runs (a fingerprint run
    is a whole session, start to stop), the first, and the first with memory phases where the first
    has none (redis: the benchmark, and the fill whose FLUSHALL shows what is held)."""
    from alloclab.measure.profile.record import is_service

    if not any(is_service(w) for w in workloads):
        return list(workloads[:DIAGNOSED_COMMANDS])
    out = workloads[:1]
    if out and not has_phases(out[0]):
        out += [w for w in workloads[1:] if has_phases(w)][:1]
    return out


def diagnose(store: Store, opts: ExperimentOptions, workloads: list, plain: list[Variant], title: str):
    """The fingerprint of the diagnosed workloads under each plain allocator, untimed: (experiment
    id, experiment, readings per allocator, the workloads diagnosed)."""
    from alloclab.measure.runner import Settings
    from alloclab.tune.diagnosis import merged, reading

    settings = Settings(runs=1, warmup=0, verify=False, fingerprint_only=True, keep_prepared=True,
                        kind="tune-diagnosis", title=title, timeout_s=opts.timeout, seed=opts.seed)
    chosen = diagnosed(workloads)
    exp_id = run_experiment(store, chosen, plain, settings)
    exp = store.load(exp_id)
    _stop_if_the_command_fails(store, exp_id, exp.fingerprints, [v.label for v in plain], chosen)
    readings: dict[str, Reading] = {}
    for vi, v in enumerate(plain):
        name = v.allocator.name if v.allocator else v.label
        parts = []
        for wi in range(len(chosen)):
            fp = exp.fingerprints.get((wi, vi))
            if fp and "error" not in fp:
                parts.append(reading(name, v.label, fp))
            elif fp:
                err.print(f"[yellow]{v.label}: no fingerprint of {chosen[wi].name} ({fp['error']})[/]", highlight=False)
        if parts:
            readings[name] = merged(parts)
    return exp_id, exp, readings, chosen


def _stop_if_the_command_fails(store: Store, exp_id: int, fingerprints: dict, labels: list[str], chosen: list) -> None:
    """Before any rule reads them: runs that failed under every allocator are the command's failure,
    not the allocators' (racing them would only fail again); under some, a fact the answer needs."""
    ran = {key: fp for key, fp in fingerprints.items() if fp and fp.get("status")}
    failed = {key: fp for key, fp in ran.items() if fp.get("status") != "ok"}
    if ran and len(failed) == len(ran):
        last = next(reversed(failed.values()))
        status, detail = _how(last)
        raise AlloclabError(
            f"The program's fingerprint run {status} under every allocator ({detail}): it fails whatever the "
            f"allocator, so there is nothing to tune. Run it by hand to see why (if it runs by hand, it refuses "
            f"the fingerprint's interposer or perf; raise --timeout if it needs longer). The diagnosis is kept in "
            f"{store.path} as experiment {exp_id}.")
    for (wi, vi), fp in sorted(failed.items()):
        status, detail = _how(fp)
        err.print(f"[yellow]{chosen[wi].name[:60]} | {labels[vi]}: the fingerprint run {status} ({detail}) under "
                  f"this allocator alone[/]", highlight=False)


def _how(fp: dict) -> tuple[str, str]:
    """A failed fingerprint run's status in words ('timed out') and its detail."""
    status = fp.get("status")
    return _WORDS.get(status, status), fp.get("run_error") or "no detail"
