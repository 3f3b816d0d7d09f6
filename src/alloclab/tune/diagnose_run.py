"""tune's first step: the diagnosis. Which workloads are fingerprinted, one untimed run of each under
every plain allocator, what each run read (tune/diagnosis.py's Readings), and the two stops it can
make: the command fails under every allocator (nothing to tune), or it fails under the default alone
(the answer is that the program fails, not an allocator that hides it).

In: the store, the workloads, the plain variants, a UI (tune/session.py). Out: a Diagnosis.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from alloclab.errors import AlloclabError
from alloclab.measure.runner import Settings
from alloclab.stats.failing import failure_words
from alloclab.tune.diagnosis import Reading, merged, reading

# A file's commands fingerprinted at most (a sweep of many values would take a run per value and
# allocator before the budget is even checked); tune stops on a bound only where all were.
DIAGNOSED_COMMANDS = 4


@dataclass
class Diagnosis:
    exp_id: int
    experiment: object
    readings: dict[str, Reading]
    chosen: list                   # the workloads diagnosed
    default_fails: str | None = None   # the answer where the program fails under the default alone
    failed: list[str] = field(default_factory=list)   # cells whose fingerprint failed, in words


def has_phases(workload) -> bool:
    return bool(getattr(getattr(workload.executor, "load", None), "phases", None))


def diagnosed(workloads: list) -> list:
    """The workloads the diagnosis fingerprints: a file's commands, up to DIAGNOSED_COMMANDS (a
    fingerprint run costs about a measured run: qemu-img's qcow2 and raw images); where a server runs
    (a fingerprint run is a whole session, start to stop), the first, and the first with memory
    phases where the first has none (redis: the benchmark, and the fill whose FLUSHALL shows what is
    held)."""
    from alloclab.measure.profile.record import is_service

    if not any(is_service(w) for w in workloads):
        return list(workloads[:DIAGNOSED_COMMANDS])
    out = workloads[:1]
    if out and not has_phases(out[0]):
        out += [w for w in workloads[1:] if has_phases(w)][:1]
    return out


def diagnose(store, ui, workloads: list, plain: list, title: str, timeout_s: float | None, seed: int) -> Diagnosis:
    """The fingerprint of the diagnosed workloads under each plain allocator, untimed."""
    settings = Settings(runs=1, warmup=0, verify=False, fingerprint_only=True, keep_prepared=True,
                        kind="tune-diagnosis", title=title, timeout_s=timeout_s, seed=seed)
    chosen = diagnosed(workloads)
    exp_id = ui.run(store, chosen, plain, settings)
    exp = store.load(exp_id)
    labels = [v.label for v in plain]
    out = Diagnosis(exp_id, exp, {}, chosen)
    _stop_if_the_command_fails(store, exp_id, exp.fingerprints, chosen)
    out.default_fails = _default_fails(exp.fingerprints, labels, chosen)
    for vi, v in enumerate(plain):
        name = v.allocator.name if v.allocator else v.label
        parts = []
        for wi in range(len(chosen)):
            fp = exp.fingerprints.get((wi, vi))
            if fp and "error" not in fp and fp.get("status", "ok") == "ok":
                parts.append(reading(name, v.label, fp))
            elif fp:
                out.failed.append(f"{labels[vi]}: no fingerprint of {chosen[wi].name[:60]} "
                                  f"({fp.get('run_error') or fp.get('error')})")
        if parts:
            out.readings[name] = merged(parts)
    return out


def _status(fp: dict) -> str | None:
    """A fingerprint run's status: the run's own, or, where it wrote nothing, the one it reported."""
    return fp.get("status") if fp else None


def _stop_if_the_command_fails(store, exp_id: int, fingerprints: dict, chosen: list) -> None:
    """Before any rule reads them: runs that failed under every allocator are the command's failure,
    not the allocators' (racing them would only fail again)."""
    ran = {key: fp for key, fp in fingerprints.items() if _status(fp)}
    failed = {key: fp for key, fp in ran.items() if _status(fp) != "ok"}
    if ran and len(failed) == len(ran):
        status, detail = failure_words(next(reversed(failed.values())))
        raise AlloclabError(
            f"The program's fingerprint run {status} under every allocator ({detail}): it fails whatever the "
            f"allocator, so there is nothing to tune. Run it by hand to see why (if it runs by hand, it refuses "
            f"the fingerprint's interposer or perf; raise --timeout if it needs longer). The diagnosis is kept in "
            f"{store.path} as experiment {exp_id}.")


def _default_fails(fingerprints: dict, labels: list[str], chosen: list) -> str | None:
    """The answer where the default (variant 0) fails in every diagnosed workload while another
    allocator runs: the program's fault, which the others hide (tune/session.py says it first)."""
    from alloclab.stats.failing import default_fails_text

    for wi, w in enumerate(chosen):
        base = fingerprints.get((wi, 0))
        if _status(base) in (None, "ok"):
            return None
    ran = [labels[vi] for vi in range(1, len(labels))
           if all(_status(fingerprints.get((wi, vi))) == "ok" for wi in range(len(chosen)))]
    if not ran:
        return None
    status, detail = failure_words(fingerprints[(0, 0)])
    return default_fails_text(labels[0], f"its fingerprint run {status} ({detail})",
                              fingerprints[(0, 0)].get("run_stderr") or "", ran)
