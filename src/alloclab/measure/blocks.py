"""The blocks an experiment runs after the planned ones: until decided (the default without
--runs), until every primary comparison has a verdict (at the design's looks only), the budget
is spent or --max-runs; with --until-precise, until every median's interval is narrow enough.

In: the runner's state and the statistics' answers at each look (its `judge`). Out: more jobs.
A mixin of measure.runner.Runner, kept apart because when to stop is its own question.
"""

from __future__ import annotations

from typing import Protocol

from alloclab.plan.schedule import Job, Planner
from alloclab.workloads.primary import primary_metrics


class Judge(Protocol):
    """What the runner asks the statistics at a look (implemented by alloclab.stats.looks)."""

    futile: dict[int, set[int]]   # set by open_comparisons: what it closed as undecidable in time
    dropped: dict[int, dict[int, str]]   # what a racing judge closed below a leader (and the leader's label)

    def open_comparisons(self, experiment, workload_idxs: set[int], margin: float,
                         reachable: int | None = None) -> dict[int, set[int]]: ...

    def precise_enough(self, values: list[float], target: float) -> bool: ...


PROFILE_COST = 1.5   # a profiled run against a timed one: perf record, then perf script over its samples
# Time is kept for the profile of what stays open only where the budget fits this many blocks: under
# a tight one the runs come first (PostgreSQL under 15 minutes: 147 s kept out of a race that got 2
# blocks). The profile still runs at the end where time is left (measure/auto_profile.py).
RESERVE_FROM_BLOCKS = 10


def profile_reserve(auto_profile: bool, budget_s: float, block_s: float, share: float = 1.0) -> float:
    """The seconds kept for the profile: `share` of a block's runs at perf's cost, or none."""
    if not auto_profile or block_s <= 0 or budget_s < RESERVE_FROM_BLOCKS * block_s:
        return 0.0
    return PROFILE_COST * block_s * share


class MoreBlocks:
    def _jobs(self, planner: Planner, jobs: list[Job], started: float):
        """The planned jobs, then, until decided or with --until-precise, more interleaved blocks
        while needed. Until decided, the first look is sized to the budget once the warm-up block
        has shown what a block costs. The budget starts here: after the set-up (a recipe's data
        load) and any --fingerprint runs, which are not measured blocks."""
        s = self.settings
        started = self.clock()
        self._budget_started = started
        warm = [j for j in jobs if j.warmup]
        yield from warm
        measured = [j for j in jobs if not j.warmup]
        if s.until_decided and warm and measured:
            measured = self._fit_first_look(measured, self.clock() - started, started)
        t_measured = self.clock()
        yield from measured
        # The pace of a block, for the first decision to add one (before it, none was timed).
        n_blocks = len({j.block for j in measured})
        self._pace_s = (self.clock() - t_measured) / n_blocks if n_blocks else 0.0
        if s.until_decided:
            yield from self._until_decided(planner, started)
            return
        if not s.until_precise:
            return
        measured = s.runs
        while measured < s.max_runs and self.clock() - started < s.max_seconds:
            imprecise = self._imprecise_cells(s.until_precise)
            if not imprecise:
                self.progress.note(f"every interval is within ±{s.until_precise:.1%} after {measured} runs")
                return
            self.progress.note(f"{len(imprecise)} cell{'s' if len(imprecise) != 1 else ''} not yet within ±{s.until_precise:.1%}; adding a block")
            block = planner.block()
            self.progress_total += len(block)
            self.progress.start(self.progress_total)
            yield from block
            measured += 1
        self.progress.note(f"stopped at {measured} runs per cell (--max-runs {s.max_runs} / "
                           f"{s.max_seconds:.0f} s) before every interval was within ±{s.until_precise:.1%}")

    def _fit_first_look(self, measured: list[Job], warm_s: float, started: float) -> list[Job]:
        """The first look's blocks, fewer where they would overrun the budget at the warm-up
        block's pace (a warm-up block runs every cell, as a measured one does); said either way
        when the plan does not fit. The budget covers the warm-up and the measured blocks, not a
        --fingerprint run (the fingerprint is timed apart)."""
        s = self.settings
        blocks = sorted({j.block for j in measured})
        warm_blocks = max(1, measured[0].block)
        block_s = max(warm_s / warm_blocks, 1e-9)
        # Kept for the profile of what stays open at the end: a block's runs, perf's cost beside them.
        reserve_s = profile_reserve(s.auto_profile, s.max_seconds, block_s)
        left = s.max_seconds - reserve_s - (self.clock() - started)
        fits = int(left // block_s)
        if fits >= len(blocks):
            return measured
        keep = max(2, fits)
        kept = f" less {reserve_s:.0f} s kept for a profile" if reserve_s else ""
        plan = (f"{len(blocks)} runs x {len(self.variants)} variants x {block_s / len(self.variants):.1f} s a run "
                f"= {len(blocks) * block_s:.0f} s > the {s.max_seconds:.0f} s budget{kept}")
        if keep >= len(blocks):
            return measured
        self.progress.note(f"{plan}: the first look sized down to {keep} runs per variant"
                           + ("" if fits >= 2 else f" (2 is the fewest that can decide anything: about "
                                                   f"{2 * block_s:.0f} s)"))
        self.design = (type(self.design).race(s.max_runs, s.alpha, first=keep) if s.race
                       else type(self.design).sequential(keep, s.max_runs, s.alpha))
        self._measured = keep
        self.config |= {"runs": keep, "design": self.design.to_config(), "first_look_sized": plan}
        self.recorder.set_config(self.config)
        return [j for j in measured if j.block < blocks[0] + keep]

    def _until_decided(self, planner: Planner, started: float):
        """Blocks until every primary comparison has a verdict, the budget is spent, or --max-runs.

        Looks happen only at the design's planned block counts (see stats/decide.py: each look is tested
        at its share of alpha, so looking cannot inflate the false-positive rate). A decided comparison stops
        running; a workload whose comparisons are all decided stops, so the budget goes to what is
        still open. Blocks keep their random order and hold the baseline with every open variant."""
        s, design = self.settings, self.design
        base = 0
        open_: dict[int, set[int]] = {wi: set(range(1, len(self.variants))) for wi in range(len(self.workloads))}
        measured, block_s, t_block = design.looks[0], getattr(self, "_pace_s", 0.0), self.clock()
        run_s = block_s / max(1, len(self.cells))   # a run's share of the last block's time
        bounded: set[tuple[int, int]] = set()   # closed as futile: no answer beyond their interval
        self._stopped = "max-runs"
        while True:
            # Time is kept for the profile of what stays open (measure/auto_profile.py): a run per
            # variant of each open workload, half as long again for perf's start, stop and script.
            profiled = len(self._open_at_end or self.workloads) * len(self.variants)
            reserve_s = profile_reserve(s.auto_profile, s.max_seconds, block_s,
                                        profiled / max(1, len(self.cells)))
            if measured in design.looks:
                # The blocks the budget still allows, at the last block's pace: a comparison that
                # cannot be decided within them is futile and closed (stats.looks.Judge).
                left_s = s.max_seconds - reserve_s - (self.clock() - started)
                reachable = (min(design.looks[-1], measured + int(max(0.0, left_s) / block_s)) if block_s > 0
                             else design.looks[-1])
                # What a racing judge may narrow the race to: the time left, a run's cost, the next look.
                following = next((k for k in design.looks if k > measured), None)
                after = next((k for k in design.looks if following and k > following), None)
                self.judge.budget = (max(0.0, left_s), run_s, measured, following, after) if following else None
                still = self.judge.open_comparisons(self.recorder.experiment,
                                                    {wi for wi, vs in open_.items() if vs}, s.margin,
                                                    reachable=reachable)
                for wi, vs in still.items():
                    bounded |= {(wi, vi) for vi in self.judge.futile.get(wi, ()) if vi in open_[wi]}
                    dropped = {vi: leader for vi, leader in self.judge.dropped.get(wi, {}).items() if vi in open_[wi]}
                    if dropped:
                        self._record_dropped(wi, dropped, measured)
                    open_[wi] &= vs
                left = sum(len(vs) for vs in open_.values())
                self._open_at_end = {wi for wi, vs in open_.items() if vs} | {wi for wi, _ in bounded}
                if not left:
                    self._stopped = "bounded" if bounded else "decided"
                    self.progress.note(f"every primary comparison decided, or bounded where more runs could not "
                                       f"decide it, after {measured} runs per variant")
                    return
                self.progress.note(f"look at {measured} runs: {left} comparison{'s' if left != 1 else ''} undecided")
            if measured >= design.looks[-1]:
                self.progress.note(f"stopped at --max-runs {measured} with comparisons still undecided")
                return
            elapsed = self.clock() - started
            self._pace_s = block_s
            if elapsed + block_s + reserve_s > s.max_seconds:
                self._stopped = "budget"
                self.progress.note(f"stopped by the {s.max_seconds:.0f} s budget after {measured} runs per variant, "
                                   f"with comparisons still undecided")
                return
            cells = [i for i, c in enumerate(self.cells)
                     if open_[c.workload_idx] and (c.variant_idx == base or c.variant_idx in open_[c.workload_idx])]
            block = planner.block(cells=cells)
            self.progress_total += len(block)
            self.progress.start(self.progress_total)
            t_block = self.clock()
            yield from block
            block_s = self.clock() - t_block
            run_s = block_s / max(1, len(block))
            measured += 1
            self._measured = measured

    def _record_dropped(self, wi: int, dropped: dict[int, str], measured: int) -> None:
        """Stored with the experiment, so that its analysis says "dropped below the leader" for
        these comparisons rather than a verdict or a bound."""
        for vi, leader in dropped.items():
            self.progress.note(f"look at {measured} runs: {self.variants[vi].label} dropped, "
                               + (f"below {leader}" if leader else "for the budget (the own fix and the leaders go on)"))
        self.config["dropped"] = [*self.config.get("dropped", []),
                                  *([wi, vi, leader, measured] for vi, leader in sorted(dropped.items()))]
        self.recorder.set_config(self.config)

    def _imprecise_cells(self, target: float) -> list:
        """Cells whose primary metrics' median CI is still wider than the target.

        Only precision decides, never significance: stopping when p first drops below alpha
        would inflate the false-positive rate."""
        runs = self.recorder.experiment.runs
        out = []
        for c in self.cells:
            w = self.workloads[c.workload_idx]
            names = [m.name for m in primary_metrics(w.metrics)] or ["wall_s"]
            ok_runs = [r for r in runs if r.workload_idx == c.workload_idx and r.variant_idx == c.variant_idx
                       and not r.warmup and r.status == "ok"]
            for name in names:
                values = [r.metrics[name] for r in ok_runs if name in r.metrics]
                if not self.judge.precise_enough(values, target):
                    out.append(c)
                    break
        return out
