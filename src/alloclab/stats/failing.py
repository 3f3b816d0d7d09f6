"""A program that fails under the default allocator and runs under others: the answer is the fault,
not an allocator. glibc checks its heap (a double free, a corrupted chunk) and aborts; jemalloc,
tcmalloc and mimalloc do not, so the program runs on under them with the same bug.

In: a workload's runs (the analysis) or the diagnosis's fingerprint runs. Out: the sentence that
tune's answer and compare's recommendation give first, in place of any pick or "keep the default".
"""

from __future__ import annotations

import re
import signal as signals

# How the runner words a run's status (measure/run.py).
_STATUS = {"failed": "failed", "timeout": "timed out", "interrupted": "was interrupted", "error": "could not run"}
# glibc's own words for a heap it found broken (malloc_printerr), as it writes them to stderr.
_GLIBC_SAYS = re.compile(r"(\w+\(\): .+|double free or corruption.*|corrupted .+|free\(\): .+)$")


def failure_words(rec) -> tuple[str, str]:
    """A failed run's status in words ('failed') and its detail ('killed by signal 6 (SIGABRT)'):
    `rec` is a stored Run or a fingerprint's dict."""
    get = rec.get if isinstance(rec, dict) else lambda k, d=None: getattr(rec, k, d)
    status = get("status") or "failed"
    sig = get("signal")
    detail = get("run_error") or get("error") or "no detail"
    if sig:
        detail = f"killed by signal {sig} ({_signal_name(sig)})"
    elif (m := re.search(r"signal (\d+)", detail)) and _signal_name(int(m.group(1))) not in detail:
        detail = detail.replace(m.group(0), f"signal {m.group(1)} ({_signal_name(int(m.group(1)))})", 1)
    return _STATUS.get(status, status), detail


def _signal_name(sig: int) -> str:
    try:
        return signals.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def glibc_message(stderr: str) -> str | None:
    """The last line of stderr in which glibc says what it found wrong with its heap."""
    lines = [line.strip() for line in (stderr or "").splitlines() if _GLIBC_SAYS.search(line.strip())]
    return lines[-1] if lines else None


def default_fails_text(default: str, how: str, stderr: str, ran_under: list[str]) -> str:
    said = glibc_message(stderr)
    others = ", ".join(ran_under[:-1]) + (" and " if len(ran_under) > 1 else "") + ran_under[-1]
    return (f"the program fails under the default ({default}): {how}"
            + (f", and glibc wrote \"{said}\"" if said else "") + f". It ran under {others}, which do not check "
            f"the heap as glibc does: they hide the fault, they do not fix it. Find the bug first: build with "
            f"-fsanitize=address (AddressSanitizer) or run it under valgrind --tool=memcheck; no allocator is "
            f"the answer until it is fixed")


def failing_default(a) -> dict[int, str]:
    """Workload index -> the sentence, for each workload whose baseline failed in every run while
    another variant ran in at least one (an Analysis)."""
    out = {}
    base = a.baseline_idx
    for w in a.workloads:
        failed = w.runs_failed.get(base) or []
        total = w.runs_total.get(base, 0)
        if not failed or len(failed) < total:
            continue
        ran = [a.labels[vi] for vi, n in w.runs_total.items()
               if vi != base and n > len(w.runs_failed.get(vi) or [])]
        if not ran:
            continue
        status, detail = failure_words(failed[-1])
        how = f"every run {status} ({detail})" if total > 1 else f"its run {status} ({detail})"
        out[w.idx] = default_fails_text(a.labels[base], how, failed[-1].stderr or "", ran)
    return out
