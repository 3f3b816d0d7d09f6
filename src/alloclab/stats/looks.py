"""What the runner asks the statistics while an experiment runs, at the design's looks.

In: the experiment as stored so far. Out: the comparisons still open (until decided, the default without --runs), or
whether a cell's median is already precise enough (--until-precise). The runner (measure stage)
gets this object handed in, so measuring never imports the statistics.
"""

from __future__ import annotations

from alloclab.stats import decide
from alloclab.stats.analysis import analyze
from alloclab.stats.estimates import precise_enough
from alloclab.workloads.primary import primary_metrics


class Judge:
    def __init__(self) -> None:
        # Per workload, the variants the last look closed as futile: the runner says "bounded",
        # not "decided", when they are what ended the experiment.
        self.futile: dict[int, set[int]] = {}
        # Per workload, the variants a racing judge (tune/race.py) closed below a leader, and its label
        # ("" where it closed them for the budget: still open, not ruled out).
        self.dropped: dict[int, dict[int, str]] = {}
        # Set by the runner before each look: (seconds left, a run's cost, runs so far, the next look,
        # the look after it or None).
        self.budget: tuple[float, float, int, int, int | None] | None = None

    def open_comparisons(self, experiment, workload_idxs: set[int], margin: float,
                         reachable: int | None = None) -> dict[int, set[int]]:
        """Per workload asked about, the variants with a primary comparison not yet decided.

        A variant with no comparison at all (every run failed) counts as decided: more runs will
        not help it; nor will they help a futile one (undecided, and not decidable within the
        `reachable` blocks the budget or --max-runs leave), which is closed and reported as a bound."""
        a = analyze(experiment, only_primary=True, min_effect=margin, workload_idxs=workload_idxs,
                    reachable=reachable)
        return self.open_in(a)

    def open_in(self, a) -> dict[int, set[int]]:
        """open_comparisons on an analysis already made (with at least the primary metrics)."""
        out: dict[int, set[int]] = {}
        self.futile = {}
        for w in a.workloads:
            out[w.idx] = set()
            self.futile[w.idx] = set()
            for vi in range(len(a.labels)):
                if vi == a.baseline_idx:
                    continue
                comps = [c for r in primary_metrics(w.rows) if (c := r.comparison(vi))]
                if not all(c.verdict in decide.DECIDED or c.futile for c in comps):
                    out[w.idx].add(vi)
                elif any(c.futile and c.verdict not in decide.DECIDED for c in comps):
                    self.futile[w.idx].add(vi)
        return out

    def precise_enough(self, values: list[float], target: float) -> bool:
        return precise_enough(values, target)
