"""From stored runs to decisions: per cell summaries, comparisons against the baseline with their
verdicts (decide.py: paired within blocks, sequential looks, four verdicts) and findings, as plain
data the reports render. The multiplicity family is, by default, one workload and one metric: every
variant against the baseline on that metric (`family="experiment"` pools every headline comparison
of the experiment instead, which is stricter and needs more runs)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from alloclab import defaults
from alloclab.errors import AlloclabError
from alloclab.stats import decide, estimates as stats, processes
from alloclab.stats.findings import PER_VARIANT_FINDINGS, cell_findings
from alloclab.store.db import Experiment
from alloclab.stats.processes import Wrapped
from alloclab.stats.stopping import Stop, block_key, measured_blocks, stop_of as _stop, stopped_as
from alloclab.store.model import Run, StoredMetric, Verification
from alloclab.workloads.primary import primary_metric, primary_metrics

# Shown by default; the rest of the standard measures appear with details=True.
HEADLINE_STANDARD = ("wall_s", "cpu_s", "peak_rss_mb")
DEFAULT_STANDARD = HEADLINE_STANDARD + ("minflt",)
BOOTSTRAP_BUDGET = 400_000  # resampled values per group and comparison


@dataclass
class Cell:
    variant_idx: int
    values: list[float]
    blocks: list          # (host, block) of each value: the pairing key
    summary: stats.CellSummary
    comparison: stats.Comparison | None = None
    n_blocks: int = 0     # blocks the variant took part in (failed runs too): the look it is at
    # The quality checks, run when first asked for: a report that shows one metric's warnings
    # (the terminal's default) need not run them on every metric of every cell. Both kept.
    check: Callable[[bool], list[stats.Finding]] | None = field(default=None, repr=False, compare=False)
    _findings: list[stats.Finding] | None = field(default=None, repr=False, compare=False)
    _per_variant: list[stats.Finding] | None = field(default=None, repr=False, compare=False)

    @property
    def findings(self) -> list[stats.Finding]:
        if self._findings is None:
            self._findings = self.check(False) if self.check else []
        return self._findings

    def per_variant_findings(self) -> list[stats.Finding]:
        """The findings about the variant's runs as a whole (PER_VARIANT_FINDINGS), in order."""
        if self._findings is not None or self.check is None:
            return [f for f in self.findings if f.code in PER_VARIANT_FINDINGS]
        self._per_variant = self._per_variant if self._per_variant is not None else self.check(True)
        return self._per_variant

    def checked(self) -> int:   # of its two kinds of checks, those run (results_cache keeps them)
        return (self._findings is not None) + (self._per_variant is not None)


@dataclass
class MetricRow:
    name: str
    unit: str
    higher_is_better: bool
    source: str
    primary: bool
    cells: list[Cell]

    @property
    def headline(self) -> bool:
        return self.source != "run" or self.name in HEADLINE_STANDARD

    def comparison(self, vi: int) -> stats.Comparison | None:   # the one accessor of a variant's comparison
        return self.cells[vi].comparison if 0 <= vi < len(self.cells) else None


@dataclass
class WorkloadResult:
    idx: int
    name: str
    argv: list[str]
    info: dict
    params: dict
    rows: list[MetricRow]
    runs_total: dict[int, int]
    runs_failed: dict[int, list[Run]]
    verification: dict[int, Verification]
    wrapped: Wrapped | None = None   # more than one program ran under the allocator (stats/processes.py)

    def row(self, name: str) -> MetricRow | None:
        return next((r for r in self.rows if r.name == name), None)

    def comparison(self, metric: str | None, vi: int) -> stats.Comparison | None:   # None where none
        return row.comparison(vi) if (row := self.row(metric or "")) else None

    def cell(self, metric: str, vi: int) -> Cell | None:
        """A variant's cell of a metric (its runs' values and summary); None where the metric is absent."""
        row = self.row(metric)
        return next((c for c in row.cells if c.variant_idx == vi), None) if row is not None else None

    def primary(self) -> MetricRow | None:
        return primary_metric(self.rows)

    def primary_rows(self) -> list[MetricRow]:
        """Every metric the verdict rests on (workloads.primary's rule): a user's memory metric may be one."""
        return primary_metrics(self.rows)

    def speed_rows(self) -> list[MetricRow]:
        """Every primary metric that is not memory: a command may mark several (the Ceph client's
        IOPS and CPU per I/O), and each is judged at the looks and on the speed axis."""
        from alloclab.workloads.metrics import is_memory
        return [r for r in primary_metrics(self.rows) if not is_memory(r)]


@dataclass
class Analysis:
    experiment: Experiment
    baseline_idx: int
    labels: list[str]
    workloads: list[WorkloadResult]
    alpha: float
    min_effect: float
    design: decide.Design | None = None

    def baseline_as_ran(self) -> str:
        """The baseline as an answer names it: its label, or what ran in its place where the
        verification found it not in effect (never "faster than glibc" where glibc did not run)."""
        from alloclab.catalog import in_use
        base = self.labels[self.baseline_idx]
        vs = [v for w in self.workloads if (v := w.verification.get(self.baseline_idx)) is not None]
        if not any(v.status == "ineffective" for v in vs):
            return base
        ran = {r[0] for v in vs if v.status == "ineffective" and (r := in_use.parse(v.notes))}
        return f"{ran.pop()} (which ran in {base}'s place)" if len(ran) == 1 else f"what ran in {base}'s place"


def bootstrap_size(*ns: int) -> int:
    """2000 resamples for the usual run counts; fewer for thousands a cell (narrow intervals anyway)."""
    return int(min(2000, max(400, BOOTSTRAP_BUDGET // max(1, max(ns)))))


def _values(runs: list[Run], metric: str) -> tuple[list[float], list[tuple]]:
    vals, blocks = [], []
    for r in runs:
        if r.status == "ok" and metric in r.metrics:
            vals.append(r.metrics[metric])
            blocks.append(block_key(r))
    return vals, blocks


def comparison(base: Cell, cand: Cell, higher_is_better: bool, *, design: decide.Design, blocks: int,
               family_size: int, margin: float, reachable: int | None = None) -> stats.Comparison:
    """The candidate's effect against the baseline (decide.judge, paired within blocks), judged at the
    alpha its look has, Bonferroni over the `family_size` comparisons of its family."""
    return decide.judge(base.values, cand.values, higher_is_better, margin=margin, design=design, blocks=blocks,
                        family=family_size, base_blocks=base.blocks, cand_blocks=cand.blocks, reachable=reachable,
                        n_boot=bootstrap_size(len(base.values), len(cand.values)))


def judge_cells(a: "Analysis", base: Cell, cand: Cell, higher_is_better: bool, family: int) -> stats.Comparison:
    """A verdict between two cells of this experiment beyond the answer's own (sweeps, ablations):
    the same engine, paired in the blocks both ran in, at the alpha the design's looks left where
    the later of the two stopped, Bonferroni over the `family` comparisons the caller makes."""
    return comparison(base, cand, higher_is_better, design=a.design or decide.Design.fixed(1, a.alpha),
                      blocks=max(base.n_blocks, cand.n_blocks), family_size=family, margin=a.min_effect)


@dataclass(frozen=True)
class RunFacts:
    """What the checks read from a cell's runs rather than from one metric: the same for every row."""
    n_failed: int
    durations_s: list[float] | None = None
    load_avg: list[float] | None = None
    other_cpu: list[float] | None = None   # recorded (possibly None: too short to tell) for commands only

    @classmethod
    def of(cls, runs: list[Run]) -> "RunFacts":
        return cls(n_failed=_failed(runs),
                   durations_s=[r.wall_s for r in runs if r.status == "ok"],
                   load_avg=[x for r in runs if (x := r.extra.get("load")) is not None],
                   other_cpu=([x for r in runs if (x := r.extra.get("other_cpu")) is not None]
                              if any("other_cpu" in r.extra for r in runs) else None))


def _failed(runs: list[Run]) -> int:
    return sum(1 for r in runs if r.status != "ok")


def _checks(vals, blocks, facts: RunFacts, per_variant_only: bool, *, alpha: float, n_comparisons: int,
            n_cores, floor: float) -> list[stats.Finding]:
    return cell_findings(vals, alpha=alpha, n_comparisons=n_comparisons, blocks=[b for _, b in blocks],
                         n_cores=n_cores, floor=floor, per_variant_only=per_variant_only,
                         durations_s=facts.durations_s, load_avg=facts.load_avg, n_failed=facts.n_failed,
                         other_cpu=facts.other_cpu)


def analyze(exp: Experiment, baseline: str | int | None = None, alpha: float = defaults.ALPHA,
            min_effect: float | None = None, family: str = "metric",
            only_primary: bool = False, workload_idxs: set[int] | None = None,
            reachable: int | None = None) -> Analysis:
    """`only_primary` and `workload_idxs` give the cheap analysis a sequential look needs.
    `reachable`: the blocks a comparison could still reach (the runner's budget); by default a
    sequential design's --max-runs, so that what cannot be decided within it is said to be futile."""
    labels = [v.label for v in exp.variants]
    base, min_effect = question(exp, baseline, min_effect)
    design = decide.Design.of_stored(exp.config.design, exp.config.runs)
    if exp.config.design:
        alpha = design.alpha
    else:
        design = decide.Design(alpha, design.looks, design.spending, design.df_drop, trim_from=design.trim_from)
    cores = exp.machine.usable_cores or exp.machine.cores
    n_cmp = max(1, len(labels) - 1)
    workloads: list[WorkloadResult] = []
    # (family key, row, cell, blocks, (workload, judged at the looks)): comparisons to make once
    # the families are known
    pending: list[tuple] = []
    for w in exp.workloads:
        wi = w.idx
        if workload_idxs is not None and wi not in workload_idxs:
            continue
        cell_runs = {vi: exp.cell_runs(wi, vi) for vi in range(len(labels))}
        blocks_of = {vi: measured_blocks(runs) for vi, runs in cell_runs.items()}
        rows = []
        defs = exp.defs_for(wi)
        judged = {d.name for d in primary_metrics(defs)}   # what the runner's looks judge
        if only_primary:
            defs = primary_metrics(defs)
        facts = {vi: RunFacts(_failed(runs)) if only_primary else RunFacts.of(runs) for vi, runs in cell_runs.items()}
        for d in defs:
            row = _row(d, cell_runs, blocks_of, facts, only_primary=only_primary, alpha=alpha,
                       n_cmp=n_cmp, cores=cores, floor=min_effect)
            if row is None:
                continue  # e.g. hardware counters on a machine without them
            for c in row.cells:
                if c.variant_idx != base and c.values and row.cells[base].values:
                    key = (("headline",) if row.headline else ("detail",)) if family == "experiment" \
                        else (wi, d.name)
                    pending.append((key, row, c, blocks_of[c.variant_idx], (wi, d.name in judged)))
            rows.append(row)
        workloads.append(WorkloadResult(
            wi, w.name, w.argv, w.info, w.params, rows,
            runs_total={vi: len(r) for vi, r in cell_runs.items()},
            runs_failed={vi: [r for r in runs if r.status != "ok"] for vi, runs in cell_runs.items()},
            verification={vi: exp.verifications.get((wi, vi)) or Verification(wi, vi)
                          for vi in range(len(labels))},
            wrapped=None if only_primary else processes.wrapped(exp, labels, wi, w.name)))
    # A sequential experiment that has stopped adds no more runs: what it left undecided is said as
    # what ended it (closed by the futility rule: a bound; cut short by the budget or --max-runs:
    # stopped by it), with the runs a verdict would have needed.
    stop = _stop(exp, base, min_effect)
    _judge(pending, base, design, min_effect, stop,
           reachable if reachable is not None else (design.looks[-1] if len(design.looks) > 1 else None))
    return Analysis(exp, base, labels, workloads, alpha, min_effect, design)


def _row(d: StoredMetric, cell_runs: dict, blocks_of: dict, facts: dict[int, RunFacts], *, only_primary: bool,
         alpha: float, n_cmp: int, cores, floor: float) -> MetricRow | None:
    """One metric's cells, one per variant; None where no run has a value for it."""
    cells = []
    for vi, runs in cell_runs.items():
        vals, blocks = _values(runs, d.name)
        summary = stats.summarize(vals, n_failed=facts[vi].n_failed)
        check = None if only_primary else functools.partial(
            _checks, vals, blocks, facts[vi], alpha=alpha, n_comparisons=n_cmp, n_cores=cores, floor=floor)
        cells.append(Cell(vi, vals, blocks, summary, n_blocks=blocks_of[vi], check=check))
    if not any(c.values for c in cells):
        return None
    return MetricRow(d.name, d.unit, bool(d.higher_is_better), d.source, bool(d.primary), cells)


def _judge(pending: list[tuple], base: int, design, margin: float, stop: Stop | None,
           reachable: int | None) -> None:
    """Each comparison judged once its family's size is known (the families span workloads)."""
    sizes: dict[tuple, int] = {}
    for key, *_ in pending:
        sizes[key] = sizes.get(key, 0) + 1
    for key, row, c, blocks, (wi, judged) in pending:
        c.comparison = comparison(row.cells[base], c, row.higher_is_better, design=design, blocks=blocks,
                                  family_size=sizes[key], margin=margin, reachable=reachable)
        if c.comparison.verdict != "undecided" or c.comparison.futile:
            continue   # decided, or futile by the rule itself at this analysis: a bound
        if stop is not None and stop.same_question and judged and (wi, c.variant_idx) in stop.dropped | stop.for_budget:
            leader = (wi, c.variant_idx) in stop.dropped   # below a leader, else closed for the budget
            c.comparison = dataclasses.replace(c.comparison, stopped="leader" if leader else "budget",
                                               more_runs=None if leader else c.comparison.more_runs)
            continue
        how = stopped_as(stop, judged, blocks, design.looks)
        # A bound only where the rule could have closed it: an interval it calls informative.
        if how == "bounded" and c.comparison.more_runs and decide.narrow(c.comparison.ci_low,
                                                                          c.comparison.ci_high, margin):
            c.comparison = dataclasses.replace(c.comparison, futile=True)
        elif how in ("budget", "max-runs"):
            c.comparison = dataclasses.replace(c.comparison, stopped=how)


def question(exp: Experiment, baseline: str | int | None, min_effect: float | None) -> tuple[int, float]:
    """(baseline index, margin) as analyze reads what was asked: none means the first variant and
    the experiment's own margin."""
    labels = [v.label for v in exp.variants]
    if isinstance(baseline, str) and baseline not in labels:
        raise AlloclabError(f"Baseline '{baseline}' is not a variant of this experiment; its variants are: "
                            f"{', '.join(labels)}.")
    margin = min_effect if min_effect is not None else exp.config.margin
    base = labels.index(baseline) if isinstance(baseline, str) else baseline or 0
    return base, float(margin if margin is not None else defaults.MARGIN)


# --- across workloads -------------------------------------------------------------------------

SPEED_UNITS = ("ns", "us", "ms", "s")


def is_speed(row: MetricRow) -> bool:
    """Throughput (x/s) or time per operation: the metrics a speed score may average."""
    return row.unit.endswith("/s") or row.unit in SPEED_UNITS


@dataclass
class VariantSummary:
    variant_idx: int
    label: str
    speed: stats.GeoMean | None       # >1: faster than the baseline
    memory: stats.GeoMean | None      # peak RSS ratio, >1: more memory than the baseline
    better: list[str]                 # workloads where the primary metric is significantly better
    worse: list[str]
    statuses: set[str]


def summarize_variants(a: Analysis) -> list[VariantSummary]:
    out = []
    base = a.baseline_idx
    for vi, label in enumerate(a.labels):
        speed_pairs, mem_pairs, better, worse, statuses = [], [], [], [], set()
        for w in a.workloads:
            statuses.add(w.verification[vi].status)
            p = w.primary()
            if p is not None:
                if is_speed(p):
                    speed_pairs.append((p.cells[base].values, p.cells[vi].values, p.higher_is_better))
                c = p.cells[vi].comparison
                if c and c.verdict == "better":
                    better.append(w.name)
                elif c and c.verdict == "worse":
                    worse.append(w.name)
            rss = w.row("peak_rss_mb")
            if rss is not None:
                # Oriented as "more memory" so that 1.3 reads as +30% RSS.
                mem_pairs.append((rss.cells[base].values, rss.cells[vi].values, True))
        out.append(VariantSummary(vi, label,
                                  stats.geomean_ratio(speed_pairs) if speed_pairs else None,
                                  stats.geomean_ratio(mem_pairs) if mem_pairs else None,
                                  better, worse, statuses))
    return out


def winners(a: Analysis) -> list[tuple[str, str | None, MetricRow | None]]:
    """Per workload: the variant with the best primary median among the significantly better."""
    out = []
    for w in a.workloads:
        p = w.primary()
        if p is None:
            out.append((w.name, None, None))
            continue
        better = [c for c in p.cells if c.comparison and c.comparison.verdict == "better"]
        if not better:
            out.append((w.name, None, p))
            continue
        best = max(better, key=lambda c: c.comparison.ratio if p.higher_is_better else -c.comparison.ratio)
        out.append((w.name, a.labels[best.variant_idx], p))
    return out
