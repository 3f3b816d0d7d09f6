"""Formatting shared by every exporter: numbers, metadata lines, warnings grouped for reading.

Longer than 400 lines because every format must say the same words (the runs line, the warnings and
their advice for the run they describe, the verification's notes, the baseline that ran): one module
is the one place a sentence is written, so that terminal, Markdown, HTML and JSON cannot disagree."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field

from alloclab.catalog import in_use
from alloclab.stats import estimates as stats
from alloclab.stats.processes import WRAPPERS, VariantPrograms, Wrapped
from alloclab.stats.analysis import DEFAULT_STANDARD, Analysis, MetricRow
from alloclab.stats.findings import PER_VARIANT_FINDINGS
from alloclab.workloads.primary import primary_metrics
from alloclab.report import fingerprint
from alloclab.report.numbers import count, fmt_value  # noqa: F401 (the exporters' number format)

STATUS_MARK = {"verified": "verified", "ineffective": "INEFFECTIVE", "unknown": "unknown"}

# Most serious first: a reader who stops after the first warning should have read the worst one.
FINDING_ORDER = ("all-failed", "failed-runs", "high-load", "drift", "warmup-trend", "too-few-runs",
                 "high-cv", "short-runs", "outliers")


def metric_title(row: MetricRow) -> str:
    arrow = "higher is better" if row.higher_is_better else "lower is better"
    unit = f" ({row.unit})" if row.unit else ""
    return f"{row.name}{unit}", arrow


def delta_text(row: MetricRow, vi: int) -> str:
    c = row.comparison(vi)
    return stats.format_comparison(c) if c else ""


def full_delta(c: stats.Comparison | None) -> str:
    """Change, interval and adjusted p (scaled to the level the verdict used: the look and the
    family), shown even when not significant (reviewers want the numbers; the verdict says whether
    they count): "+4.0% [+2.1, +5.9] p=0.003"."""
    if c is None or not math.isfinite(c.ratio):
        return "n/a"
    pct = lambda r: f"{(r - 1) * 100:+.1f}"  # noqa: E731
    interval = f"[{pct(c.ci_low)}, {pct(c.ci_high)}]" if math.isfinite(c.ci_low) and math.isfinite(c.ci_high) \
        else "[n/a]"
    p = stats.format_p(c.p_adjusted) if math.isfinite(c.p_adjusted) else "p=n/a"
    return f"{pct(c.ratio)}% {interval} {p}"


def verdict_word(c: stats.Comparison | None) -> str:
    return c.verdict if c else ""


def primary_rows(w) -> list[MetricRow]:
    """The rows a workload's verdict rests on: every primary metric (a service has one per client),
    else the first program metric, else wall time."""
    return primary_metrics(w.rows)


def primary_comparisons(a: Analysis):
    """(workload, row, variant index, comparison) for every primary comparison, in report order."""
    for w in a.workloads:
        for row in primary_rows(w):
            for vi in variant_order(a)[1:]:
                c = row.comparison(vi)
                if c is not None:
                    yield w, row, vi, c


# Measures that barely vary between runs: counts decided in a few runs where time needs hundreds.
# They explain a verdict (the mechanism), never replace it.
MECHANISM_METRICS = {"minflt": "faults", "majflt": "major faults", "peak_rss_mb": "peak RSS",
                     "nvcsw": "waits", "nivcsw": "preemptions", "instructions": "instructions"}


def mechanism_comparisons(w, vi: int, limit: int = 3) -> list[tuple[MetricRow, stats.Comparison]]:
    """Decided changes of the counts that barely vary, for variant `vi` (the JSON's numbers)."""
    out = []
    for row in w.rows:
        if row.primary or row.name not in MECHANISM_METRICS:
            continue
        c = row.comparison(vi)
        if c is None or c.verdict not in ("better", "worse") or not math.isfinite(c.ratio):
            continue
        out.append((row, c))
    return out[:limit]


def mechanism(w, vi: int, limit: int = 3) -> list[str]:
    """The same in words: "faults -90%"."""
    return [f"{MECHANISM_METRICS[row.name]} {(c.ratio - 1) * 100:+.0f}%" for row, c in mechanism_comparisons(w, vi, limit)]


@dataclass
class Answer:
    workload: str
    metric: str
    variant: str
    verdict: str
    text: str           # effect and interval, or the equivalence statement
    more_runs: int | None
    mechanism: list[str]


def answers(a: Analysis) -> list[Answer]:
    """The answer first: one line per primary comparison."""
    out = []
    for w, row, vi, c in primary_comparisons(a):
        name, _ = metric_title(row)
        out.append(Answer(w.name, name, a.labels[vi], c.verdict, stats.format_comparison(c),
                          c.more_runs if c.verdict == "undecided" else None,
                          mechanism(w, vi) + fingerprint.mechanism(a.experiment, w.idx, vi, a.baseline_idx, a.labels)))
    return out


def wrapper_answers(a: Analysis) -> list[str]:
    """One sentence per workload whose named program is a wrapper that carries the runs."""
    out = []
    for w in a.workloads:
        line = answer_line(w.wrapped, w.argv, len(a.workloads) > 1) if w.wrapped else None
        if line:
            out.append(line)
    return out


def process_lines(a: Analysis, w) -> list[str]:
    """Which programs ran under the allocator per run, where more than one did."""
    x = w.wrapped
    if x is None:
        return []
    return ["programs under the allocator (as sampled; shares of the run's CPU and faults are lower bounds): "
            + "; ".join(cell_line(c, x.programs) for c in x.cells)]


def _pct(x: float | None) -> str:
    return f"{x * 100:.0f}%" if x is not None else "n/a"


def cell_line(c: VariantPrograms, programs: list[str]) -> str:
    """"tcmalloc: per run 1 python3.11, 5 bash, 2 env; python3.11 itself 13% of the CPU, 5% of the faults"."""
    procs = ", ".join(f"{n:g} {i}" for i, n in c.per_run.items())
    own = " and ".join(programs) or "no program but wrappers"
    shares = f"; {own} itself {_pct(c.program_cpu)} of the CPU, {_pct(c.program_faults)} of the faults" \
        if c.program_faults is not None else ""
    return f"{c.label}: {procs} seen per run{shares}"


def answer_line(x: Wrapped, argv: list[str], with_workload: bool = True) -> str | None:
    """The sentence for the answer when wrappers carry the runs, with the command to measure instead."""
    if not x.dominated or not x.program_exe:   # stored before images were recorded: counts only
        return None
    n = max(sum(v for i, v in c.per_run.items() if i in WRAPPERS) for c in x.cells)
    kinds = sorted({i for c in x.cells for i in c.per_run if i in WRAPPERS})
    shares = [c.program_faults for c in x.cells if c.program_faults is not None]
    span = "" if not shares else _pct(min(shares)) if _pct(min(shares)) == _pct(max(shares)) else \
        f"{_pct(min(shares))} to {_pct(max(shares))}"
    carried = f"; {x.programs[0]} itself accounts for only {span} of the faults seen" if shares else ""
    cmd = x.command(argv)
    return ((f"{x.workload}: " if with_workload else "") +
            f"{os.path.basename(argv[0])} is a wrapper, not the program: up to {n:g} {'/'.join(kinds)} processes "
            f"per run started under the allocator besides {' and '.join(x.programs)}{carried}, so the effect is "
            f"largely the wrappers' start-up" + (f"; measure `{cmd}` directly" if cmd else ""))


def shown_rows(w, details: bool = False) -> list[MetricRow]:
    """The rows a report shows: the program's own metrics and the default standard measures."""
    return [r for r in w.rows if details or r.source != "run" or r.name in DEFAULT_STANDARD]


def variant_order(a: Analysis) -> list[int]:
    return [a.baseline_idx] + [i for i in range(len(a.labels)) if i != a.baseline_idx]


def findings_for(w, metrics=None) -> list[tuple[int, str, stats.Finding]]:
    """(variant index, metric, finding), each finding once per cell, per-variant ones once per
    variant; with `metrics`, the other rows give only their per-variant findings (the rest is
    then never computed)."""
    out, seen = [], set()
    for row in w.rows:
        for c in row.cells:
            for f in (c.findings if metrics is None or row.name in metrics else c.per_variant_findings()):
                key = (c.variant_idx, f.code) if f.code in PER_VARIANT_FINDINGS \
                    else (c.variant_idx, row.name, f.code)
                if key in seen:
                    continue
                seen.add(key)
                out.append((c.variant_idx, row.name, f))
    return out


# --- metadata ---------------------------------------------------------------------------------

def statistics_line(a: Analysis) -> str:
    d = a.design
    looks = d.describe() if d is not None and len(d.looks) > 1 else f"fixed runs, alpha {a.alpha:g}"
    return (f"median per variant; change against {baseline_ran(a)}: 20% trimmed mean of the within-block "
            f"ratios with Yuen's interval, simultaneous over the comparisons of each workload and metric "
            f"(Bonferroni) and over the looks ({looks}); verdicts better / worse (interval excludes no change), "
            f"equivalent (interval within ±{a.min_effect * 100:g}%), undecided (otherwise)")


def runs_line(a: Analysis, brief: bool = False) -> str:
    """How the runs were taken; `brief`: their count, what stopped them and the warm-up, the
    schedule and the verification's method left to the full report."""
    c = a.experiment.config
    if brief:
        stored = c.to_dict()
        stop = stored.get("stopped")
        by = {"budget": f"the {c.budget_s or 0:.0f} s budget", "max-runs": "--max-runs"}.get(stop, stop)
        how = (f"until decided: {stored.get('runs_done', c.runs)} runs each" + (f" (stopped by {by})" if stop else "")
               if c.until_decided else f"{c.runs} runs each")
        return f"{how}, {count(c.warmup, 'warm-up block')}"
    # With no warm-up block asked for, verification runs one untimed block of its own (plan/schedule.py).
    where = "first warm-up block" if c.warmup else "an untimed block of its own"
    verify = f"on ({where} under LD_DEBUG=bindings)" if c.verify else "off (--no-verify)"
    timeout = f", timeout {c.timeout_s} s" if c.timeout_s else ""
    if c.until_decided:
        stored = c.to_dict()   # absent and null differ here: "n/a" only where the runner never wrote it
        how = (f"until decided: {stored.get('runs_done', c.runs)} runs per variant at most "
               f"(stopped: {stored.get('stopped', 'n/a')}; budget {c.budget_s or 0:.0f} s, --max-runs {c.max_runs})")
    else:
        how = f"{c.runs} measured runs per variant"
    return (f"{how} after {count(c.warmup, 'warm-up block')}; "
            f"{c.schedule or 'randomized interleaved blocks'} (seed {c.seed}); "
            f"verification {verify}{timeout}")


def allocator_lines(a: Analysis) -> list[str]:
    e = a.experiment
    versions = e.machine.allocators
    out = []
    for v in e.variants:
        lib = v.library or "libc (no preload)"
        version = v.version or versions.get(v.label, "unknown")
        settings = " ".join(f"{k}={val}" for k, val in v.env.items() if k != "LD_PRELOAD")
        out.append(f"{v.label}: {v.allocator or 'custom'} {version}, {lib}"
                   + (f", {settings}" if settings else ""))
    return out


def metadata(a: Analysis) -> list[tuple[str, str]]:
    """(key, value) lines describing where and how the numbers were taken, in reading order."""
    e = a.experiment
    m = e.machine
    cores = m.usable_cores
    cores_text = f"{cores} usable of {m.cores} cores" if cores != m.cores else f"{cores} cores"
    mem = m.memory_total_mb
    items = [
        ("experiment", f"{e.id} ({e.row.kind}, {e.row.status}): {e.row.title}"),
        ("date", f"{e.row.created} to {e.row.finished or 'unfinished'}"),
        ("host", f"{m.host}: {m.cpu_model}, {cores_text}"
                 + (f", {mem / 1024:.1f} GiB" if mem else "")),
        ("kernel", f"{m.kernel} ({m.os or 'unknown OS'})"),
        ("memory", f"THP {m.thp} (defrag {m.thp_defrag}), governor {m.governor or 'n/a'}"),
        ("glibc", str(m.glibc)),
        ("perf", m.perf_counters_note or ("hardware counters" if m.perf_counters else "none")),
        ("runs", runs_line(a)),
        ("statistics", statistics_line(a)),
        ("tool", f"alloclab {m.alloclab}, Python {m.python}"),
    ]
    fleet = e.config.fleet
    if fleet:
        per_host = fleet.get("runs_per_host") or {}
        items.append(("fleet", f"{fleet.get('mode')} on {fleet.get('address')}: "
                               + ", ".join(f"{h} ({per_host.get(h, '?')} runs per variant)" for h in fleet.get("hosts", []))
                               + "".join(f"; {h} left out: {why}" for h, why in (fleet.get("left_out") or {}).items())
                               + "".join(f"; failed: {why}" for why in (fleet.get("failed") or {}).values())))
    removed = e.config.removed_env or {}
    if removed:
        items.append(("removed env", ", ".join(f"{k}={v}" for k, v in removed.items())))
    hooks = e.config.get("hooks") or {}
    if hooks:   # hyperfine's, run around the runs (measure/hooks.py)
        items.append(("hooks", "; ".join(f"--{k} {v}" for k, v in hooks.items())))
    return items


# --- warnings and verification -----------------------------------------------------------------

@dataclass
class WarningGroup:
    """One kind of finding, with every place it was seen; identical messages collapse."""

    code: str
    advice: str
    lines: list[tuple[str, str]] = field(default_factory=list)  # (where, message)

    @property
    def serious(self) -> bool:
        return self.code in ("all-failed", "failed-runs", "high-load", "drift")


def _where(pairs: list[tuple[int, str]], a: Analysis, metrics: list[str]) -> str:
    variants = sorted({vi for vi, _ in pairs})
    by_variant = {vi: {m for v, m in pairs if v == vi} for vi in variants}
    if all(ms == {""} for ms in by_variant.values()):
        return "every variant" if len(variants) == len(a.labels) > 1 else ", ".join(a.labels[v] for v in variants)
    if len(metrics) > 1 and all(ms >= set(metrics) for ms in by_variant.values()):
        who = "every variant" if len(variants) == len(a.labels) > 1 else ", ".join(a.labels[v] for v in variants)
        return f"{who}, every metric"
    metric_sets = {frozenset(ms) for ms in by_variant.values()}
    if len(metric_sets) == 1:
        who = "every variant" if len(variants) == len(a.labels) > 1 else ", ".join(a.labels[v] for v in variants)
        return f"{who} / {', '.join(m for m in metrics if m in next(iter(metric_sets)))}"
    return "; ".join(f"{a.labels[vi]} / {', '.join(m for m in metrics if m in by_variant[vi])}" for vi in variants)


def stored_note(note: str) -> str:
    """A verification note as stored by an older alloclab ("in 1 process(es)"), its count in words."""
    return re.sub(r"\b(\d+) process\(es\)", lambda m: count(int(m[1]), "process", "processes"), note)


def advice(a: Analysis, f) -> str:
    """The finding's advice for this experiment: "add --warmup 1" to a run that had warm-up blocks
    would be stale advice, so such a run is told what its warm-up did not settle."""
    warmup = a.experiment.config.warmup if a.experiment.config else 0
    if f.code == "warmup-trend" and warmup:
        return (f"already after {count(warmup, 'discarded warm-up block')}: what settles outlasts a block (a cache "
                f"the program fills, a JIT, the page cache of its files); the first runs stay in the statistics")
    return f.advice


def warning_groups(a: Analysis, w, details: bool = False, limit: int | None = None,
                   only: set[str] | None = None) -> list[WarningGroup]:
    """Findings grouped by kind, most serious first; at most `limit` lines per kind (the rest
    counted in a last line); with `only`, the findings of those metrics (and the per-variant ones)."""
    rows = shown_rows(w, details)
    metrics = [r.name for r in rows if only is None or r.name in only]
    groups: dict[str, WarningGroup] = {}
    places: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for vi, metric, f in findings_for(w, set(metrics)):
        if metric not in metrics and f.code not in PER_VARIANT_FINDINGS:
            continue
        groups.setdefault(f.code, WarningGroup(f.code, advice(a, f)))
        places.setdefault((f.code, f.message), []).append((vi, "" if f.code in PER_VARIANT_FINDINGS else metric))
    for (code, message), pairs in places.items():
        groups[code].lines.append((_where(pairs, a, metrics), message))
    if limit:
        for g in groups.values():
            if len(g.lines) > limit:
                g.lines[limit:] = [("...", f"and {len(g.lines) - limit} more of the same kind (all with --details "
                                           f"or --format json)")]
    rank = {c: i for i, c in enumerate(FINDING_ORDER)}
    return sorted(groups.values(), key=lambda g: rank.get(g.code, len(rank)))


@dataclass
class VerificationRow:
    label: str
    status: str
    reasons: list[str]
    notes: list[str]


def verification_rows(a: Analysis, w) -> list[VerificationRow]:
    out = []
    for vi in variant_order(a):
        v = w.verification[vi]
        out.append(VerificationRow(a.labels[vi], v.status, list(v.reasons), [stored_note(n) for n in v.notes]))
    return out


def verification_summary(a: Analysis) -> tuple[str, str]:
    """(level, sentence) over the whole experiment: level is ok, warn or bad."""
    bad, unknown = [], []
    for w in a.workloads:
        for vi, v in w.verification.items():
            if v.status == "ineffective":
                bad.append(f"{a.labels[vi]} ({w.name})")
            elif v.status != "verified":
                unknown.append(f"{a.labels[vi]} ({w.name})")
    if bad:
        return "bad", (f"Allocator INEFFECTIVE for {', '.join(bad)}: those columns did not measure the named "
                       f"allocator and must not be used.")
    if unknown:
        return "warn", f"Allocator not verified for {', '.join(unknown)} (verification was off or inconclusive)."
    settings, unread = _settings_read(a)
    if unread:
        return "warn", (f"Setting not read back for {', '.join(unread)}: passed as asked, but the allocator could not "
                        f"confirm it (alloclab report --details says why); malloc and free were bound to the named "
                        f"allocator in every process.")
    read = f", and {count(settings, 'setting')} read back in effect" if settings else ""
    return "ok", f"Every variant verified: malloc and free were bound to the named allocator in every process{read}."


def _settings_read(a: Analysis) -> tuple[int, list[str]]:
    """How many settings the allocators read back as asked (each variant's once), and the variants
    with a setting passed but not confirmed (the Ceph seed's thread cache was silently ignored)."""
    read: set[tuple[int, str]] = set()
    unread: dict[str, None] = {}
    for w in a.workloads:
        for vi, v in w.verification.items():
            for note in v.notes:
                if note.endswith(": in effect"):
                    read.add((vi, note.split(" = ", 1)[0]))
                elif ": passed as asked, not confirmed" in note:
                    unread[a.labels[vi]] = None
    return len(read), list(unread)


def baseline_warning(a: Analysis) -> str | None:
    """The answer's first line when the baseline is not what its label says: every comparison is
    against what really ran ("glibc is not in use: redis-server links libjemalloc.so.2; every
    comparison below is against jemalloc, not glibc."). None when the baseline is not ineffective."""
    base = a.labels[a.baseline_idx]
    known: dict[tuple[str, str], list[str]] = {}   # (what ran, why) -> workloads
    other: dict[str, list[str]] = {}               # first reason -> workloads
    for w in a.workloads:
        v = w.verification.get(a.baseline_idx)
        if not v or v.status != "ineffective":
            continue
        ran = in_use.parse(v.notes)
        if ran:
            known.setdefault(ran, []).append(w.name)
        else:
            other.setdefault((v.reasons or ["no reason recorded"])[0], []).append(w.name)
    if not known and not other:
        return None
    where = lambda names: "" if len(names) == len(a.workloads) == 1 else f" on {', '.join(names)}"  # noqa: E731
    parts = [f"{base} is not in use{where(names)}: {why}; every comparison below is against {ran}, not {base}"
             for (ran, why), names in known.items()]
    parts += [f"The baseline {base} is INEFFECTIVE{where(names)} ({reason}); the comparisons below measure "
              f"against what ran in its place, not {base}'s allocator" for reason, names in other.items()]
    return ". ".join(parts) + "."


def baseline_ran(a: Analysis) -> str:
    """The baseline as the answer's title names it: its label, or what ran in its place (never "against
    glibc" where glibc did not run)."""
    return a.baseline_as_ran()


def failed_run_lines(a: Analysis, w, limit: int = 3) -> list[str]:
    out = []
    for vi, failed in w.runs_failed.items():
        for r in failed[:limit]:
            tail = (r.stderr or "").strip().splitlines()[-3:]
            out.append(f"{a.labels[vi]}: run {r.block}.{r.position} {r.status}: {r.error}"
                       + "".join(f"\n    {line}" for line in tail))
        if len(failed) > limit:
            out.append(f"{a.labels[vi]}: {count(len(failed) - limit, 'more failed run')}")
    return out
