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

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from alloclab import defaults
from alloclab.catalog import allocators as cat
from alloclab.catalog.tune_rules import load_rules
from alloclab.errors import AlloclabError
from alloclab.store.config_model import TuneRecord
from alloclab.store.db import Store
from alloclab.tune import screen as screening
from alloclab.tune.bound import quiet_bound
from alloclab.tune.diagnose_run import diagnose, has_phases
from alloclab.tune.prescribe import plain_candidates, prescribe

SCREEN_MODES = ("auto", "always", "never")
# The race's run cap where the budget fits more: at most this many runs per variant.
MOST_RUNS = 300


class UI(Protocol):
    def run(self, store: Store, workloads: list, variants: list, settings, judge=None) -> int: ...

    def note(self, text: str) -> None: ...                  # progress, on stderr

    def say(self, text: str, style: str = "") -> None: ...  # the answer, on stdout


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


@dataclass
class TuneOutcome:
    store_path: Path
    diagnosis_id: int
    stop: str | None = None              # the answer where nothing was raced
    stop_style: str = "bold green"
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


def plain_variants(names: tuple[str, ...]) -> list:
    """The baseline and each installed allocator tune races plainly; `names` restricts them."""
    from alloclab.catalog.variants import installed_variants, parse_variant

    catalog = cat.load_catalog()
    if not names:
        return [v for v in installed_variants(catalog) if v.allocator is None or v.allocator.race_in_tune]
    for n in names:
        if ":" in n or "@" in n:
            raise AlloclabError(f"tune's -a names allocators to consider ({', '.join(catalog.allocators)}), "
                                f"not variants with settings: {n}. tune proposes the settings itself; race "
                                f"your own with `alloclab compare -a ...`.")
        if n not in catalog.allocators:
            parse_variant(n, catalog)   # an unknown name is refused here, with the names compare lists
            raise AlloclabError(f"tune's -a names allocators of the catalog ({', '.join(catalog.allocators)}), "
                                f"whose settings its rules know; {n} is a library of your own: race it with "
                                f"`alloclab compare -a {n} ...`.")
    return [parse_variant(n, catalog) for n in [cat.BASELINE] + [n for n in names if n != cat.BASELINE]]


class TuneRun:
    def __init__(self, opts: TuneOptions, workloads: list, plan_defaults, title: str, ui: UI):
        self.opts, self.workloads, self.defaults, self.title, self.ui = opts, workloads, plan_defaults, title, ui
        self.started = time.monotonic()
        self.budget_s = opts.budget_s or defaults.seconds(plan_defaults.budget)
        self.pace_s: float | None = None   # a timed run's cost, measured by the screen

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)

    def run(self) -> TuneOutcome:
        from alloclab.tune.lines import diagnosis_lines

        opts, ui = self.opts, self.ui
        plain = plain_variants(opts.allocators)
        store = Store(opts.db)
        ui.note(f"Storing results in {store.path.resolve()}")
        diag = diagnose(store, ui, self.workloads, plain, self.title, opts.timeout_s, opts.seed)
        out = TuneOutcome(store.path, diag.exp_id)
        for line in diag.failed:
            ui.note(f"[yellow]{line}[/]")
        if diag.default_fails:
            out.stop, out.stop_style = diag.default_fails[0].upper() + diag.default_fails[1:] + ".", "bold red"
            return out
        readings = diag.readings
        versions = {v.allocator.name: diag.experiment.variants[i].version for i, v in enumerate(plain) if v.allocator}
        others = [v.spec for v in plain[1:]]
        resolved = _Resolved()
        rx = prescribe(readings, others, versions, check=resolved.refusal)
        ui.say(f"[bold]Diagnosis[/] (experiment {diag.exp_id}: one untimed fingerprint run of "
               f"{' and '.join(w.name[:60] for w in diag.experiment.workloads)} per allocator)")
        for line in diagnosis_lines(readings, rx):
            ui.say(f"  {line}")
        candidates = [c for c in rx.candidates if not c.refused]
        # What the allocator's CPU share bounds: nothing fired, or only rules of the allocation rate
        # with no memory phase to hold memory after; a bound needs every raced workload looked at.
        look = not rx.fired or (rx.rate_only and not any(has_phases(w) for w in self.workloads))
        stop, share = (quiet_bound(store, diag.exp_id, diag.chosen, plain, readings, rx, opts.timeout_s, opts.seed,
                                   opts.min_effect, ui.note)
                       if look and len(diag.chosen) == len(self.workloads) else (None, None))
        if stop is not None:
            out.stop = f"Nothing to tune: {stop}"
            return out
        if rx.fired and share:
            ui.say(f"The rules that fired read only the allocation rate, and {share}: they race.")
        if not rx.fired:
            why = "the allocator's share of the CPU is large enough to matter"
            if share:
                ui.say(f"No rule fired, and {share}: the plain allocators race.")
                why = share
            candidates = [c for c in plain_candidates(others, why, resolved.refusal, rule="cpu-share" if share else
                                                      "allocator-bound") if not c.refused]
        if not candidates:
            out.stop, out.stop_style = ("No candidate to race: every proposed setting was refused by the installed "
                                        "allocators (listed above).", "bold yellow")
            return out
        if self.left() <= 0:
            raise AlloclabError(f"The diagnosis took the whole --budget ({self.budget_s:g} s): nothing is left to race "
                                f"the {len(candidates)} candidates. Give a longer --budget.")
        run_s = _run_cost(diag.experiment, len(plain), self.workloads[0])
        finals, screened, screen_id = self._screen(store, plain[0], candidates, resolved, rx.fired, run_s)
        run_s = self.pace_s or run_s
        record = TuneRecord(diagnosis_experiment=diag.exp_id, screen_experiment=screen_id, screened_out=screened,
                            fired=rx.fired, silent=rx.silent, candidates=finals,
                            refused=[c for c in rx.candidates if c.refused],
                            readings={k: r.values for k, r in readings.items()})
        out.race_id = self._race(store, [plain[0]] + [resolved[c.spec] for c in finals], record, run_s)
        from alloclab.stats.results_cache import results
        out.results = results(store.load(out.race_id), min_effect=opts.min_effect,
                              max_rss_increase=opts.max_rss_increase)
        return out

    def _screen(self, store: Store, baseline, candidates: list, resolved, fired: list[str], run_s: float):
        """Where the race of every candidate would not reach its first look in half the budget: a
        short screen of all of them (no warm-up, no verification: it only ranks), then the finalists:
        each fired rule's own setting, and the best of the rest. (finalists, lines for the screened
        out, the screen's experiment or None)."""
        from alloclab.measure.runner import Settings
        from alloclab.stats.results import build_results

        opts, d = self.opts, self.defaults
        left = self.left()
        sp = None if opts.screen == "never" else screening.plan(
            len(candidates), len(self.workloads), run_s, left, d.early_look or d.first_look,
            opts.warmup if opts.warmup is not None else d.warmup, force=opts.screen == "always")
        if sp is None:
            return candidates, [], None
        # The fixes of the default's own mechanisms race whatever a screen says; where the race fits
        # no more than them to its last look, a screen could only choose what is not raced.
        own_rules = {r.name for r in load_rules() if r.name in fired and r.reads == cat.BASELINE}
        own = [c for c in candidates if c.rule in own_rules and ":" in c.spec]
        design = self._cap(3 * run_s, left)[1]
        if own and opts.screen != "always" and len(own) >= screening.race_slots(len(self.workloads), run_s, left,
                                                                                  design):
            self.ui.note(f"No screen: the budget left ({left:.0f} s) takes one candidate to its last look, and the "
                         f"mechanism's own fix goes first: racing {', '.join(c.spec for c in own)}.")
            return own, [f"{c.spec} ({c.rule}, expected {c.expect}): not raced: the budget fits the mechanism's own "
                         f"fix alone; race it with a longer --budget, or with `alloclab compare`" for c in candidates
                         if c not in own], None
        self.ui.note(f"Screening: {sp.why}; {sp.runs} run(s) of each first, then only the finalists race.")
        t = time.monotonic()
        settings = Settings(runs=sp.runs, warmup=0, verify=False, keep_prepared=True, kind="tune-screen",
                            title=self.title, timeout_s=opts.timeout_s, seed=opts.seed)
        screen_id = self.ui.run(store, self.workloads, [baseline] + [resolved[c.spec] for c in candidates], settings)
        spent = time.monotonic() - t
        # What a run costs, measured: the race's cap is sized from it, not from the fingerprint runs.
        self.pace_s = spent / max(1, sp.runs * (len(candidates) + 1) * len(self.workloads))
        slots = screening.race_slots(len(self.workloads), run_s, left - spent, self._cap(3 * run_s, left - spent)[1])
        # The fixes kept through the screen are those of the default's own mechanisms: the glibc
        # setting, for a glibc mechanism (another allocator's setting races if it ranks).
        chosen = screening.finalists(build_results(store.load(screen_id), min_effect=opts.min_effect).analysis,
                                     candidates, slots, sorted(own_rules), sp.runs)
        self.ui.note(f"Screened in {spent:.0f} s (experiment {screen_id}); racing " + ", ".join(c.spec for c in chosen.kept))
        return chosen.kept, chosen.screened_out, screen_id

    def _cap(self, variant_run_s: float, left_s: float):
        """The race's run cap: the user's --max-runs as given; else the file's or the default's, raised
        to what the budget left fits at `variant_run_s` a run of every variant (a race that would need
        more runs than a recipe's cap but has the time for them takes them). (cap, its design)."""
        from alloclab.plan.design import Design

        d = self.defaults
        cap = self.opts.max_runs if self.opts.max_runs is not None else d.max_runs
        block_s = variant_run_s * max(1, len(self.workloads))
        if self.opts.max_runs is None and block_s > 0:
            cap = max(cap, min(MOST_RUNS, int(left_s / block_s)))
        return cap, Design.sequential(min(d.first_look, cap), cap, early=d.early_look)

    def _race(self, store: Store, variants: list, record: TuneRecord, run_s: float) -> int:
        from alloclab.measure.runner import Settings
        from alloclab.tune.race import RaceJudge

        opts, d = self.opts, self.defaults
        left = self.left()
        given = opts.max_runs if opts.max_runs is not None else d.max_runs
        cap, _ = self._cap(run_s * len(variants), left)
        if cap > given:
            record.run_cap = [given, cap]
            self.ui.note(f"Raised the run cap from {given} to {cap} runs per variant: the {left:.0f} s of budget left "
                         f"fit them (at about {run_s:.1f} s a run); the race still stops once decided.")
        settings = Settings(runs=min(d.first_look, cap), until_decided=True, auto_profile=True,
                            first_look=min(d.first_look, cap), early_look=d.early_look, max_runs=cap, max_seconds=left,
                            margin=opts.min_effect, warmup=opts.warmup if opts.warmup is not None else d.warmup,
                            timeout_s=opts.timeout_s, seed=opts.seed, verify=opts.verify, kind="tune", title=self.title,
                            extra_config={"tune": record.to_dict()})
        self.ui.note(f"Racing {len(variants) - 1} candidate(s) against {variants[0].label} for at most {left:.0f} s: "
                     + ", ".join(v.label for v in variants[1:]))
        return self.ui.run(store, self.workloads, variants, settings, judge=RaceJudge())


def _run_cost(diag, n_plain: int, workload) -> float:
    """What one timed run will cost, from the diagnosis: a command's own time under the interposer
    (a little above its plain run's); a server's whole fingerprint run (start, load, stop), whose
    client time is only part of it."""
    from alloclab.measure.executors import CommandExecutor

    walls = sorted(fp["wall_s"] for fp in diag.fingerprints.values() if fp.get("wall_s"))
    if walls and isinstance(workload.executor, CommandExecutor):
        return walls[len(walls) // 2]
    return float(diag.config.fingerprint_s or 0) / max(1, n_plain * len(diag.workloads))


