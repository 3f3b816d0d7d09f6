"""tune's first step: the diagnosis. Which workloads are fingerprinted, one untimed run of each under
every plain allocator, what each run read (tune/diagnosis.py's Readings), and the two stops it can
make: the command fails under every allocator (nothing to tune), or it fails under the default alone
(the answer is that the program fails, not an allocator that hides it).

In: the store, the workloads, the plain variants, a UI (tune/session.py). Out: a Diagnosis.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from alloclab.errors import AlloclabError
from alloclab.measure.runner import Settings
from alloclab.stats.failing import failure_words
from alloclab.tune.diagnosis import Reading, merged, reading

# A file's commands fingerprinted at most (a sweep of many values would take a run per value and
# allocator before the budget is even checked); tune stops on a bound only where all were.
DIAGNOSED_COMMANDS = 4


@dataclass(frozen=True)
class Failure:
    """A fingerprint run that failed, and what plain runs of the same cell said: where they all ran,
    the failure is alloclab's (its interposer, perf), not the program's."""
    variant: str
    workload: str
    status: str            # in words: failed, timed out, ...
    detail: str            # killed by signal 6 (SIGABRT), ...
    plain_runs: int = 0    # runs without the interposer, of the default, made to tell
    plain_failed: int = 0

    @property
    def alloclabs(self) -> bool:
        return self.plain_runs > 0 and self.plain_failed == 0

    def record(self) -> dict:
        return {"fact": "alloclab-failure"} | dataclasses.asdict(self) | {"alloclabs": self.alloclabs}


@dataclass
class Diagnosis:
    exp_id: int
    experiment: object
    readings: dict[str, Reading]
    chosen: list                   # the workloads diagnosed
    default_fails: dict | None = None   # where the program fails under the default alone: the figures
    failed: list[str] = field(default_factory=list)   # cells whose fingerprint failed, in words
    failures: list[Failure] = field(default_factory=list)   # the default's, told apart by plain runs


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


def diagnose(store, ui, workloads: list, plain: list, title: str, timeout_s: float | None, seed: int,
             reads: list[str] | None = None) -> Diagnosis:
    """The fingerprint of the diagnosed workloads under each plain allocator, untimed. `reads`: the
    allocator each variant's fingerprint is read as (the baseline's is the allocator it runs).

    Where the default's fingerprint fails, or every one does, the default runs plain (no interposer,
    no LD_DEBUG) as often as its fingerprint failed and at least twice, before anything is said of
    the program: runs that succeed make the failure alloclab's, and the diagnosis goes on without
    the readings it lacks."""
    settings = Settings(runs=1, warmup=0, verify=False, fingerprint_only=True, keep_prepared=True,
                        kind="tune-diagnosis", title=title, timeout_s=timeout_s, seed=seed)
    chosen = diagnosed(workloads)
    exp_id = ui.run(store, chosen, plain, settings)
    exp = store.load(exp_id)
    labels = [v.label for v in plain]
    out = Diagnosis(exp_id, exp, {}, chosen)
    ran = {key: fp for key, fp in exp.fingerprints.items() if _status(fp)}
    failed = {key: fp for key, fp in ran.items() if _status(fp) != "ok"}
    every = bool(ran) and len(failed) == len(ran)
    told = {wi: fp for (wi, vi), fp in failed.items() if vi == 0 or every}
    plain_runs, said = _plain_runs(store, ui, chosen, plain[0], sorted(told), title, timeout_s, seed, len(failed))
    for wi, fp in sorted(told.items()):
        status, detail = failure_words(fp)
        n, bad = plain_runs.get(wi, (0, 0))
        out.failures.append(Failure(labels[0], chosen[wi].name[:60], status, detail, n, bad))
    program_fails = [f for f in out.failures if not f.alloclabs]
    if every and program_fails:
        _stop_if_the_command_fails(store, exp_id, failed, said)
    if program_fails:
        out.default_fails = _default_fails(exp.fingerprints, labels, chosen)
    for vi, v in enumerate(plain):
        name = reads[vi] if reads else v.allocator.name if v.allocator else v.label
        parts = []
        for wi in range(len(chosen)):
            fp = exp.fingerprints.get((wi, vi))
            if fp and "error" not in fp and fp.get("status", "ok") == "ok":
                parts.append(reading(name, v.label, fp))
            elif fp and not (vi == 0 and wi in told):
                out.failed.append(f"{labels[vi]}: no fingerprint of {chosen[wi].name[:60]} "
                                  f"({fp.get('run_error') or fp.get('error')})")
        if parts:
            out.readings[name] = merged(parts)
    return out


def _plain_runs(store, ui, chosen: list, default, workload_idxs: list[int], title: str, timeout_s: float | None,
                seed: int, failed: int) -> tuple[dict[int, tuple[int, int]], str | None]:
    """Plain runs of the default in the workloads whose fingerprint failed: {workload: (runs, failed)},
    and the last line a failed one wrote to stderr (what the program said of its failure)."""
    if not workload_idxs:
        return {}, None
    runs = max(2, failed)
    settings = Settings(runs=runs, warmup=0, verify=False, keep_prepared=True, kind="tune-check", title=title,
                        timeout_s=timeout_s, seed=seed, failures_expected=True)
    check_id = ui.run(store, [chosen[wi] for wi in workload_idxs], [default], settings)
    out: dict[int, tuple[int, int]] = {}
    said = None
    for run in store.load(check_id).runs:
        if run.warmup:
            continue
        wi = workload_idxs[run.workload_idx]
        n, bad = out.get(wi, (0, 0))
        out[wi] = (n + 1, bad + (run.status != "ok"))
        if run.status != "ok" and (lines := [x.strip() for x in (run.stderr or "").splitlines() if x.strip()]):
            said = lines[-1][:300]
    return out, said


def _status(fp: dict) -> str | None:
    """A fingerprint run's status: the run's own, or, where it wrote nothing, the one it reported."""
    return fp.get("status") if fp else None


def _stop_if_the_command_fails(store, exp_id: int, failed: dict, said: str | None) -> None:
    """Before any rule reads them: runs that failed under every allocator, and plain, are the
    command's failure, not the allocators' (racing them would only fail again)."""
    status, detail = failure_words(next(reversed(failed.values())))
    raise AlloclabError(
        f"The program's fingerprint run {status} under every allocator ({detail}), and so did plain runs of "
        f"it under the default, without alloclab's interposer: it fails whatever the allocator, so there is "
        f"nothing to tune. " + (f"Its last line on stderr: {said!r}. " if said else "") +
        f"Run it by hand to see why (raise --timeout if it needs longer). The diagnosis is "
        f"kept in {store.path} as experiment {exp_id}.")


def _default_fails(fingerprints: dict, labels: list[str], chosen: list) -> dict | None:
    """Where the default (variant 0) fails in every diagnosed workload while another allocator runs:
    the program's fault, which the others hide (report/tune.py says it first), as figures."""
    for wi, w in enumerate(chosen):
        base = fingerprints.get((wi, 0))
        if _status(base) in (None, "ok"):
            return None
    ran = [labels[vi] for vi in range(1, len(labels))
           if all(_status(fingerprints.get((wi, vi))) == "ok" for wi in range(len(chosen)))]
    if not ran:
        return None
    status, detail = failure_words(fingerprints[(0, 0)])
    return {"default": labels[0], "status": status, "detail": detail,
            "stderr": fingerprints[(0, 0)].get("run_stderr") or "", "ran_under": ran}
