"""One tune session as one object: diagnose -> prescribe -> bound -> screen -> race -> answer.

Two or three experiments are stored: the diagnosis (one untimed fingerprint run of each workload per
plain allocator, and, where no rule fires or only rules of the allocation rate, one profiled look),
the screen where the race of every candidate would not fit (tune/screen.py) and the race, measured
until decided like compare's, with its typed record (store/config_model.py's TuneRecord). The budget
covers all of them; the race takes as many runs as the budget left fits, above a recipe's cap.

In: TuneOptions, the workloads (cli/tune.py builds them), their defaults (a file's own, else
defaults.TUNE), a UI: how an experiment is run with its progress shown, and how lines are said.
Out: a TuneOutcome: the race's Results, or the stop in words (nothing to tune, the default fails,
no candidate the installed allocators take).
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from alloclab import defaults
from alloclab.catalog.tune_rules import load_rules
from alloclab.errors import AlloclabError
from alloclab.store.config_model import TuneRecord
from alloclab.store.db import Store
from alloclab.tune import screen as screening
from alloclab.tune.baseline import SYSTEM, baseline_of, plain_variants
from alloclab.tune.bound import quiet_bound
from alloclab.tune.diagnose_run import diagnose, has_phases
from alloclab.tune.styled import Line
from alloclab.tune.prescribe import plain_candidates, prescribe

SCREEN_MODES = ("auto", "always", "never")
# The race's run cap where the budget fits more: at most this many runs per variant.
MOST_RUNS = 300


class UI(Protocol):
    def run(self, store: Store, workloads: list, variants: list, settings, judge=None) -> int: ...

    # A Line's styles are its fields; a str is shown as it is, styled as a whole by `style` alone.
    def note(self, text: str | Line) -> None: ...                  # progress, on stderr

    def say(self, text: str | Line, style: str = "") -> None: ...  # the answer, on stdout

    def tell(self, fact: dict) -> None: ...                # a fact of the answer, as stored (report/ words it)


@dataclass(frozen=True)
class TuneOptions:
    db: Path
    budget_s: float | None = None       # None: the workloads' own (a file's, else defaults.TUNE's)
    allocators: tuple[str, ...] = ()    # -a: the catalog allocators to consider (none: every installed one)
    screen: str = "auto"
    min_effect: float = defaults.MARGIN
    max_rss_increase: float | None = None
    timeout_s: float | None = None
    seed: int = defaults.SEED
    warmup: int | None = None
    max_runs: int | None = None         # --max-runs: the user's cap, never raised
    verify: bool = True

    def __post_init__(self) -> None:
        if self.screen not in SCREEN_MODES:
            raise AlloclabError(f"--screen takes {', '.join(SCREEN_MODES)} (got {self.screen!r}): auto screens only "
                                f"where racing every candidate would not fit half the budget.")


class Stop(enum.Enum):
    """Why tune raced nothing, with the exit status the command gives (report/tune.py words it)."""
    NOTHING_TO_TUNE = ("nothing to tune", 0)     # the allocator's share bounds every change below the margin
    DEFAULT_FAILS = ("the default fails", 1)     # the program's fault, which the other allocators hide
    NO_CANDIDATE = ("no candidate", 3)           # every proposed setting refused, or none proposed (-a)

    @property
    def exit_code(self) -> int:
        return self.value[1]


@dataclass
class TuneOutcome:
    store_path: Path
    diagnosis_id: int
    stop: Stop | None = None             # why nothing was raced
    stop_data: dict = field(default_factory=dict)   # its figures (report/tune.py's stop_line)
    race_id: int | None = None
    results: object | None = None        # stats/results.py's Results of the race
    notes: list[str] = field(default_factory=list)

    def keep(self) -> None:
        """Kept, as compare keeps its Results: `alloclab report` of the race renders them at once."""
        if self.results is not None:
            from alloclab.stats.results_cache import keep
            keep(self.results, every_check=True)


class _Resolved(dict):
    """Each candidate's spec resolved once (spec -> Variant): the check of what the installed
    allocators refuse, then the screen and the race take the same Variant."""

    def __missing__(self, spec: str):
        from alloclab.catalog.variants import parse_variant
        self[spec] = variant = parse_variant(spec)
        return variant

    def refusal(self, spec: str) -> str | None:
        try:
            self[spec]
        except AlloclabError as exc:
            return str(exc)
        return None


class TuneRun:
    def __init__(self, opts: TuneOptions, workloads: list, plan_defaults, title: str, ui: UI, clock=time.monotonic,
                 started: float | None = None, question: list[str] | None = None):
        """`started`: when the user's command began, on `clock` (the CLI passes its process's start: a
        budget timed from outside includes the interpreter's start and the answer's rendering).
        `question`: an experiment file's own variants, what its author asks (PostgreSQL's recipe: the
        pad and tcmalloc against glibc); those among the candidates race whatever a screen says."""
        self.opts, self.workloads, self.defaults, self.title, self.ui = opts, workloads, plan_defaults, title, ui
        self.clock = clock
        self.started = clock() if started is None else min(started, clock())
        self.budget_s = opts.budget_s or defaults.seconds(plan_defaults.budget)
        self.pace_s: float | None = None   # a timed run's cost, measured by the screen
        self.question = set(question or ())

    def left(self) -> float:
        return self.budget_s - (self.clock() - self.started)

    def run(self) -> TuneOutcome:
        from alloclab.tune.lines import diagnosis_lines

        opts, ui = self.opts, self.ui
        base = baseline_of(self.workloads)
        plain = plain_variants(opts.allocators, base)
        store = Store(opts.db)
        ui.note(f"Storing results in {store.path.resolve()}")
        if base.how != SYSTEM:
            ui.tell(base.record())
        reads = [base.reads] + [v.allocator.name if v.allocator else v.label for v in plain[1:]]
        diag = diagnose(store, ui, self.workloads, plain, self.title, opts.timeout_s, opts.seed, reads)
        out = TuneOutcome(store.path, diag.exp_id)
        for line in diag.failed:
            ui.note(Line.of(line, "yellow"))
        for failure in diag.failures:
            if failure.alloclabs:
                ui.tell(failure.record())
        if diag.default_fails:
            out.stop, out.stop_data = Stop.DEFAULT_FAILS, diag.default_fails
            return out
        readings = diag.readings
        versions = {reads[i]: diag.experiment.variants[i].version for i, v in enumerate(plain) if v.allocator}
        versions[base.reads] = base.version or versions.get(base.reads, "")
        others = [v.spec for v in plain[1:]]
        resolved = _Resolved()
        rx = prescribe(readings, others, versions, check=resolved.refusal, baseline=base.reads)
        ui.say(Line((("Diagnosis", "bold"), (f" (experiment {diag.exp_id}: one untimed fingerprint run of "
                                             f"{' and '.join(w.name[:60] for w in diag.experiment.workloads)} "
                                             f"per allocator)", ""))))
        for line in diagnosis_lines(readings, rx):
            ui.say(f"  {line}")
        candidates = [c for c in rx.candidates if not c.refused]
        # What the allocator's CPU share bounds: nothing fired, or only rules of the allocation rate
        # with no memory phase to hold memory after; a bound needs every raced workload looked at.
        look = not rx.fired or (rx.rate_only and not any(has_phases(w) for w in self.workloads))
        qb = (quiet_bound(store, diag.exp_id, diag.chosen, plain, readings.get(base.reads), rx, opts.timeout_s,
                          opts.seed, opts.min_effect, ui.note)
              if look and len(diag.chosen) == len(self.workloads) else None)
        if qb is not None and qb.stops:
            out.stop, out.stop_data = Stop.NOTHING_TO_TUNE, qb.record()
            return out
        if qb is not None:
            ui.tell(qb.record())
        if not rx.fired:
            why = "the allocator's share of the CPU is large enough to matter"
            if qb is not None:
                why = (f"the allocator's functions and the kernel's memory management took "
                       f"{qb.bound.share * 100:.2f}% of the CPU in the profiled runs (at most {qb.bound.upper * 100:.2f}%)")
            candidates = [c for c in plain_candidates(others, why, resolved.refusal, rule="cpu-share" if qb else
                                                      "allocator-bound") if not c.refused]
        if not candidates:
            out.stop = Stop.NO_CANDIDATE
            out.stop_data = {"refused": sum(1 for c in rx.candidates if c.refused), "fired": rx.fired,
                             "allocators": list(opts.allocators)}
            return out
        if self.left() <= 0:
            raise AlloclabError(f"The diagnosis took the whole --budget ({self.budget_s:g} s): nothing is left to race "
                                f"the {len(candidates)} candidates. Give a longer --budget.")
        run_s = _run_cost(diag.experiment, len(plain), self.workloads[0])
        finals, screened, screen_id = self._screen(store, plain[0], candidates, resolved, rx.fired, run_s, base.reads)
        run_s = self.pace_s or run_s
        record = TuneRecord(diagnosis_experiment=diag.exp_id, screen_experiment=screen_id, screened_out=screened,
                            fired=rx.fired, silent=rx.silent, candidates=finals,
                            refused=[c for c in rx.candidates if c.refused],
                            readings={k: r.values for k, r in readings.items()},
                            baseline=base.record() if base.how != SYSTEM else None,
                            failures=[f.record() for f in diag.failures if f.alloclabs],
                            question=sorted(self.question))
        out.race_id = self._race(store, [plain[0]] + [resolved[c.spec] for c in finals], record, run_s)
        from alloclab.stats.results_cache import results
        out.results = results(store.load(out.race_id), min_effect=opts.min_effect,
                              max_rss_increase=opts.max_rss_increase)
        return out

    def _screen(self, store: Store, baseline, candidates: list, resolved, fired: list[str], run_s: float,
                own_reads: str):
        """Where racing every candidate to its first look would not fit the budget left: a short screen
        of all of them (no warm-up, no verification: it only ranks), then the finalists: each fired
        rule's own setting for the default's allocator (`own_reads`), and the best of the rest, as many
        as reach the first look. (finalists, lines for the screened out, the screen's experiment or
        None)."""
        from alloclab.measure.runner import Settings
        from alloclab.stats.results import build_results

        opts, d = self.opts, self.defaults
        left = self.left()
        first = d.early_look or d.first_look
        warmup = opts.warmup if opts.warmup is not None else d.warmup
        # The fixes of the default's own mechanisms race whatever a screen says (the glibc setting for
        # a glibc mechanism; another allocator's setting races if it ranks).
        own_rules = {r.name for r in load_rules() if r.name in fired and r.reads == own_reads}
        own = [c for c in candidates if c.rule in own_rules and ":" in c.spec]
        asked = [c for c in candidates if c.spec in self.question and c not in own]
        own += asked
        own_runs = min(d.max_runs, 4 * first)
        sp = None if opts.screen == "never" else screening.plan(
            len(candidates), len(self.workloads), run_s, left, first, warmup, force=opts.screen == "always",
            own=len(own), own_runs=own_runs)
        if sp is None:
            return candidates, [], None
        if opts.screen != "always" and asked and not screening.screen_fits(
                sp.runs, len(candidates), len(own), len(self.workloads), run_s, left, warmup, own_runs):
            # The screen would leave the question too few runs to be answered: it is raced alone.
            self.ui.note(f"Not screening: {sp.why}; a screen of every candidate would leave too few runs to decide "
                         f"{', '.join(c.spec for c in own)}, which race alone.")
            return own, screening.not_raced([c for c in candidates if c not in own], resolved), None
        self.ui.note(f"Screening: {sp.why}; {sp.runs} run{'s' if sp.runs != 1 else ''} of each first, then only the finalists race.")
        t = self.clock()
        settings = Settings(runs=sp.runs, warmup=0, verify=False, keep_prepared=True, kind="tune-screen",
                            title=self.title, timeout_s=opts.timeout_s, seed=opts.seed)
        screen_id = self.ui.run(store, self.workloads, [baseline] + [resolved[c.spec] for c in candidates], settings)
        spent = self.clock() - t
        # What a run costs, measured: the race's cap is sized from it, not from the fingerprint runs.
        self.pace_s = spent / max(1, sp.runs * (len(candidates) + 1) * len(self.workloads))
        # The own fixes are to be decided (to the file's cap of runs, or the first looks a command's
        # budget fits); the others race to their first look where the budget allows.
        slots = screening.race_slots(len(self.workloads), self.pace_s, left - spent, first, warmup, len(own),
                                     own_runs)
        if opts.screen == "always":   # asked for: the finalists alone race, at most two besides the own fixes
            slots = min(slots, screening.ALWAYS_SLOTS)
        chosen = screening.finalists(build_results(store.load(screen_id), min_effect=opts.min_effect).analysis,
                                     candidates, slots, sorted(own_rules), sp.runs)
        self.ui.note(f"Screened in {spent:.0f} s (experiment {screen_id}); racing " + ", ".join(c.spec for c in chosen.kept))
        return chosen.kept, chosen.screened_out, screen_id

    def _cap(self, variant_run_s: float, left_s: float):
        """The race's run cap and its design: the user's --max-runs as given; else the file's or the
        default's, raised to what the budget left fits at `variant_run_s` a run of every variant (a race
        that would need more runs than a recipe's cap but has the time for them takes them). The
        design's looks are planned over at most twice what the budget fits (a decided candidate
        leaves, so later blocks are shorter), not over the 300 a command may reach: alpha spent over
        looks that the budget never reaches is alpha the looks it does reach lack. (cap, its design)."""
        from alloclab.plan.design import RACE_TRIM_FROM, Design

        d = self.defaults
        cap = self.opts.max_runs if self.opts.max_runs is not None else d.max_runs
        block_s = variant_run_s * max(1, len(self.workloads))
        if self.opts.max_runs is None and block_s > 0:
            fits = int(left_s / block_s)
            cap = max(cap, min(MOST_RUNS, fits))
            cap = min(cap, max(RACE_TRIM_FROM - 1, 2 * fits))
        return cap, Design.race(cap, first=self._first_look(cap))

    def _first_look(self, cap: int) -> int:
        d = self.defaults
        return max(2, min(d.early_look or d.first_look, d.first_look, cap))

    def _race(self, store: Store, variants: list, record: TuneRecord, run_s: float) -> int:
        from alloclab.measure.runner import Settings
        from alloclab.tune.race import RaceJudge

        opts, d = self.opts, self.defaults
        left = self.left()
        given = opts.max_runs if opts.max_runs is not None else d.max_runs
        cap, design = self._cap(run_s * len(variants), left)
        if cap > given:
            record.run_cap = [given, cap]
            self.ui.note(f"Raised the run cap from {given} to {cap} runs per variant: the {left:.0f} s of budget left "
                         f"fit them (at about {run_s:.1f} s a run); the race still stops once decided.")
        elif cap < given:
            self.ui.note(f"The race's looks are planned over {cap} runs per variant ({', '.join(map(str, design.looks))}): "
                         f"twice what the {left:.0f} s of budget left fit at about {run_s:.1f} s a run.")
        first = self._first_look(cap)
        settings = Settings(runs=first, until_decided=True, auto_profile=True, race=True,
                            first_look=first, max_runs=cap, max_seconds=left,
                            margin=opts.min_effect, warmup=opts.warmup if opts.warmup is not None else d.warmup,
                            timeout_s=opts.timeout_s, seed=opts.seed, verify=opts.verify, kind="tune", title=self.title,
                            extra_config={"tune": record.to_dict()})
        self.ui.note(f"Racing {len(variants) - 1} candidate{'s' if len(variants) != 2 else ''} against {variants[0].label} for at most {left:.0f} s: "
                     + ", ".join(v.label for v in variants[1:]))
        return self.ui.run(store, self.workloads, variants, settings, judge=RaceJudge(opts.max_rss_increase))


def _run_cost(diag, n_plain: int, workload) -> float:
    """What one timed run will cost, from the diagnosis: a command's own time under the interposer
    (a little above its plain run's); a server's whole fingerprint run (start, load, stop), whose
    client time is only part of it."""
    from alloclab.measure.executors import CommandExecutor

    walls = sorted(fp["wall_s"] for fp in diag.fingerprints.values() if fp.get("wall_s"))
    if walls and isinstance(workload.executor, CommandExecutor):
        return walls[len(walls) // 2]
    return float(diag.config.fingerprint_s or 0) / max(1, n_plain * len(diag.workloads))


