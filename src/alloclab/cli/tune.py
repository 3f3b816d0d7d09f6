"""`alloclab tune`: diagnose the program from its fingerprint, prescribe settings by the rules in
catalog/tune_rules.toml, race them against the default on the real program, answer.

Two experiments are stored: the diagnosis (one untimed fingerprint run per plain allocator, and,
where no rule fires or only rules of the allocation rate, one profiled look) and the race
(measured until decided, like compare's). The budget covers both.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

import typer
from typer.core import TyperCommand

from alloclab import defaults
from alloclab.catalog import allocators as cat
from alloclab.cli import experiment_flow as flow
from alloclab.cli.app import MetricOption, ShellOption, app, console, draw_early, err, run_experiment, seconds, show
from alloclab.cli.experiment_options import ExperimentOptions, budget_option, experiment_options
from alloclab.cli.tune_diagnose import diagnose, has_phases
from alloclab.errors import AlloclabError
from alloclab.store.db import Store

if TYPE_CHECKING:
    from alloclab.catalog.variants import Variant

# Where no rule fires, or only rules of the allocation rate, one profiled run per plain allocator
# bounds what any of them could change.
QUIET_FREQUENCY = 4999   # samples a second: a program of a tenth of a second still gives hundreds
SCREEN_MODES = ("auto", "always", "never")


def _is_file(arg: str) -> bool:
    return arg.startswith("recipe:") or arg.endswith(".toml")


class _TuneCommand(TyperCommand):
    """Whatever follows a program's name is the program's (no `--` needed, as in compare); whatever
    follows a recipe or an experiment file is tune's own options, as `run recipe:NAME --db x.db`
    reads: the file is moved behind them before click parses."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        valued = {name for p in self.params if p.param_type_name == "option" and not p.is_flag and not p.count
                  for name in p.opts}
        i = 0
        while i < len(args) and args[i] != "--":
            if args[i].startswith("-"):
                i += 2 if args[i] in valued else 1
                continue
            if _is_file(args[i]) and i + 1 < len(args):
                args = [*args[:i], *_options_after(args[i], args[i + 1:], valued), args[i]]
            break
        return super().parse_args(ctx, args)


def _options_after(target: str, rest: list[str], valued: set[str]) -> list[str]:
    """What follows a recipe or a file, checked to be tune's options with their values."""
    j = 0
    while j < len(rest):
        if rest[j] == "--" or not rest[j].startswith("-"):
            raise AlloclabError(f"{target} is a recipe or an experiment file, which names its own commands: what "
                                f"follows it must be tune's options, and {rest[j]!r} is not one. To tune a program "
                                f"instead: alloclab tune [OPTIONS] -- CMD [ARGS]...")
        if rest[j] in valued and j + 1 == len(rest):
            raise AlloclabError(f"{rest[j]} needs a value (it ends the command line, after {target}).")
        j += 2 if rest[j] in valued else 1
    return rest


@app.command(cls=_TuneCommand, context_settings={"allow_interspersed_args": False})
@experiment_options(budget=budget_option(None, f"default: a command's {defaults.TUNE.budget}, a file's own"))
def tune(
    target: list[str] = typer.Argument(..., metavar="recipe:NAME | FILE.toml | -- CMD [ARGS]...",
                                       help="A recipe or experiment file, or the program to run after --."),
    metric: list[str] = MetricOption,
    shell: bool = ShellOption,
    param: list[str] = typer.Option([], "--param", "-p", help="A file's parameter: NAME=VALUE; repeat."),
    screen: str = typer.Option("auto", "--screen", help="auto: screen the candidates with a few runs each, then race "
                               "the finalists, where racing them all would not fit half the budget; always; never."),
    *, opts: ExperimentOptions,
) -> None:
    """Find the allocator and the tuning for your program: fingerprint it under each allocator, turn
    what it does (heap trimmed and regrown, blocks mapped and unmapped, memory held beyond live) into
    settings to try, race them on the real program, and say which is best and why."""
    flow.check_first(opts)
    for flag, given in (("--fleet", opts.fleet), ("--ablate", opts.ablate), ("--runs", opts.runs is not None)):
        if given:
            raise AlloclabError(f"tune does not take {flag}: it races its candidates until decided on this machine. "
                                f"Use compare or run with the variants tune proposed.")
    if screen not in SCREEN_MODES:
        raise AlloclabError(f"--screen takes {', '.join(SCREEN_MODES)} (got {screen!r}): auto screens only where "
                            f"racing every candidate would not fit half the budget.")
    is_file = len(target) == 1 and _is_file(target[0])
    started = time.monotonic()
    if is_file:
        workloads, session, plan_defaults, title = _file_workloads(target[0], param)
    else:
        workloads, session, plan_defaults, title = _command_workloads(target, metric, shell, param), None, \
            defaults.TUNE, " ".join(target)
    try:
        _tune(opts, workloads, plan_defaults, title, started, screen)
    finally:
        if session is not None:
            session.cleanup()
        else:
            for w in workloads:
                if w.executor is not None:   # set where it ran: an option refused first leaves it unset
                    w.executor.cleanup()


def _command_workloads(command: list[str], metric: list[str], shell: bool, param: list[str]) -> list:
    from alloclab.plan import param_sweep
    from alloclab.workloads.metrics import parse_metric_option
    if param:
        raise AlloclabError("tune takes --param for an experiment file only; write the command's arguments as "
                            "they should run.")
    metrics = [parse_metric_option(m) for m in metric]
    return param_sweep.command_workloads(command, param_sweep.expand_params([]), metrics, shell)


def _file_workloads(target: str, param: list[str]):
    from alloclab.cli.service import file_defaults
    from alloclab.measure.service import executors as service_executors
    from alloclab.workloads import experiment_file

    ef = experiment_file.resolve(target)
    ef.check_requirements()
    params = ef.with_params(experiment_file.param_options(param))
    workloads, session = service_executors.workloads(
        ef, params, note=lambda text: err.print(f"[yellow]{text}[/]", highlight=False))
    return workloads, session, file_defaults(ef), ef.name


def _plain_variants(opts: ExperimentOptions) -> list[Variant]:
    """The baseline and each installed allocator tune races plainly; -a NAME restricts them."""
    from alloclab.catalog.variants import installed_variants, parse_variant

    catalog = cat.load_catalog()
    if opts.allocator:
        names = [a.strip() for a in opts.allocator]
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
        names = [cat.BASELINE] + [n for n in names if n != cat.BASELINE]
        return [parse_variant(n, catalog) for n in names]
    return [v for v in installed_variants(catalog) if v.allocator is None or v.allocator.race_in_tune]


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


def _tune(opts: ExperimentOptions, workloads: list, plan_defaults, title: str, started: float,
          screen_mode: str = "auto") -> None:
    from alloclab.report import tune as tune_report
    from alloclab.tune.prescribe import plain_candidates, prescribe

    budget_s = seconds(opts.budget or plan_defaults.budget)
    plain = _plain_variants(opts)
    store = Store(opts.db)
    err.print(f"Storing results in {store.path.resolve()}", highlight=False)
    diag_id, diag, readings, chosen = diagnose(store, opts, workloads, plain, title)
    versions = {v.allocator.name: diag.variants[i].version for i, v in enumerate(plain) if v.allocator}
    others = [v.spec for v in plain[1:]]
    resolved = _Resolved()
    rx = prescribe(readings, others, versions, check=resolved.refusal)
    console.print(f"[bold]Diagnosis[/] (experiment {diag_id}: one untimed fingerprint run of "
                  f"{' and '.join(w.name[:60] for w in diag.workloads)} per allocator)", highlight=False)
    for line in tune_report.diagnosis_lines(readings, rx):
        console.print(f"  {line}", highlight=False)
    candidates = [c for c in rx.candidates if not c.refused]
    # What the allocator's CPU share bounds: nothing fired, or only rules of the allocation rate
    # with no memory phase to hold memory after; a bound needs every raced workload looked at.
    look = not rx.fired or (rx.rate_only and not any(has_phases(w) for w in workloads))
    stop, share = (_quiet_bound(store, diag_id, chosen, plain, readings, rx, opts)
                   if look and len(chosen) == len(workloads) else (None, None))
    if stop is not None:
        console.print(f"[bold green]Nothing to tune:[/] {stop}", highlight=False)
        console.print(f"Results stored in {store.path} (diagnosis: experiment {diag_id}).", highlight=False)
        _no_report(opts, diag_id)
        return
    if rx.fired and share:
        console.print(f"The rules that fired read only the allocation rate, and {share}: they race.", highlight=False)
    if not rx.fired:
        why = "the allocator's share of the CPU is large enough to matter"
        if share:
            console.print(f"No rule fired, and {share}: the plain allocators race.", highlight=False)
            why = share
        candidates = [c for c in plain_candidates(others, why, resolved.refusal, rule="cpu-share" if share else
                                                  "allocator-bound") if not c.refused]
    if not candidates:
        console.print("[bold yellow]No candidate to race[/]: every proposed setting was refused by the installed "
                      "allocators (listed above).", highlight=False)
        _no_report(opts, diag_id)
        return
    left = budget_s - (time.monotonic() - started)
    if left <= 0:
        raise AlloclabError(f"The diagnosis took the whole --budget ({budget_s:g} s): nothing is left to race the "
                            f"{len(candidates)} candidates. Give a longer --budget.")
    run_s = _run_cost(diag, len(plain), workloads[0])
    candidates, screened, screen_id = _screen(store, opts, workloads, plain[0], candidates, resolved, plan_defaults,
                                              title, run_s, left, screen_mode)
    left = budget_s - (time.monotonic() - started)
    variants = [plain[0]] + [resolved[c.spec] for c in candidates]
    _race(store, opts, workloads, variants, candidates, rx, readings, diag_id, plan_defaults, title, left,
          screened, screen_id)


def _no_report(opts: ExperimentOptions, diag_id: int) -> None:
    """A report was asked for and nothing was raced: say so, rather than leave the file unwritten unsaid."""
    if opts.report or opts.report_file:
        err.print(f"[yellow]No report written: tune raced nothing, so there is no race to report; its answer is the "
                  f"lines above (the diagnosis is experiment {diag_id}).[/]", highlight=False)


def _run_cost(diag, n_plain: int, workload) -> float:
    """What one timed run will cost, from the diagnosis: a command's own time under the interposer
    (a little above its plain run's); a server's whole fingerprint run (start, load, stop), whose
    client time is only part of it."""
    from alloclab.measure.executors import CommandExecutor

    walls = sorted(fp["wall_s"] for fp in diag.fingerprints.values() if fp.get("wall_s"))
    if walls and isinstance(workload.executor, CommandExecutor):
        return walls[len(walls) // 2]
    return float(diag.config.fingerprint_s or 0) / max(1, n_plain * len(diag.workloads))


def _screen(store: Store, opts: ExperimentOptions, workloads: list, baseline: Variant, candidates: list,
            resolved: dict, plan_defaults, title: str, run_s: float, left_s: float, mode: str = "auto"):
    """Where the race of every candidate would not reach its first look in half the budget: a short
    screen of all of them (no warm-up, no verification: it only ranks), then the finalists. Returns
    (finalists, lines for the screened out, the screen's experiment or None)."""
    from alloclab.measure.runner import Settings
    from alloclab.plan.design import Design
    from alloclab.stats.results import build_results
    from alloclab.tune import screen

    sp = None if mode == "never" else screen.plan(
        len(candidates), len(workloads), run_s, left_s, plan_defaults.early_look or plan_defaults.first_look,
        opts.warmup if opts.warmup is not None else plan_defaults.warmup, force=mode == "always")
    if sp is None:
        return candidates, [], None
    err.print(f"Screening: {sp.why}; {sp.runs} run(s) of each first, then only the finalists race.",
              highlight=False)
    t = time.monotonic()
    settings = Settings(runs=sp.runs, warmup=0, verify=False, keep_prepared=True, kind="tune-screen", title=title,
                        timeout_s=opts.timeout, seed=opts.seed)
    screen_id = run_experiment(store, workloads, [baseline] + [resolved[c.spec] for c in candidates], settings)
    spent = time.monotonic() - t
    limit = opts.max_runs if opts.max_runs is not None else plan_defaults.max_runs
    design = Design.sequential(min(plan_defaults.first_look, limit), limit, early=plan_defaults.early_look)
    slots = screen.race_slots(len(workloads), run_s, left_s - spent, design)
    chosen = screen.finalists(build_results(store.load(screen_id), min_effect=opts.min_effect).analysis,
                              candidates, slots)
    err.print(f"Screened in {spent:.0f} s (experiment {screen_id}); racing "
              + ", ".join(c.spec for c in chosen.kept), highlight=False)
    return chosen.kept, chosen.screened_out, screen_id


def _quiet_bound(store: Store, diag_id: int, chosen: list, plain: list[Variant], readings: dict, rx,
                 opts) -> tuple[str | None, str | None]:
    """Where nothing the allocator does was seen beyond how often it is called: one profiled run per
    plain allocator and diagnosed workload (with an unprofiled run beside each: the one look).
    (The sentence that stops tune when the upper limit of their allocator and kernel
    memory-management share bounds every change below the margin in every workload, None to race;
    the share in words where it was measured.)"""
    from alloclab.measure import auto_profile
    from alloclab.measure.profile.perf import read_int
    from alloclab.measure.profile.record import profile_workload
    from alloclab.measure.profile.summary import store_profiles
    from alloclab.tune.bound import CONFIDENCE, share_bound
    from alloclab.workloads.primary import primary_metric

    base = readings.get(cat.BASELINE)
    if base is None:
        return None, None
    if why := auto_profile.unavailable():
        err.print(f"[yellow]No profile to bound the allocator's share ({why}); racing.[/]", highlight=False)
        return None, None
    limit = read_int("/proc/sys/kernel/perf_event_max_sample_rate") or QUIET_FREQUENCY
    bounds = []
    for wi, workload in enumerate(chosen):
        try:
            summaries = profile_workload(workload, plain, runs=1, baseline=None, timeout_s=opts.timeout,
                                         keep_session=True, seed=opts.seed, frequency=min(QUIET_FREQUENCY, limit),
                                         workload_idx=wi)
        except AlloclabError as exc:   # a workload profiling cannot run (run_as, ...): no bound, race
            err.print(f"[yellow]No profile of {workload.name} to bound the allocator's share ({exc}); "
                      f"racing.[/]", highlight=False)
            return None, None
        store_profiles(store, diag_id, summaries)
        # The default's profile: what any change could take away from it.
        b = share_bound(workload.name, summaries[0], primary_metric(workload.metrics))
        if b is None:
            return None, None
        bounds.append(b)
    b = max(bounds, key=lambda x: x.bound)
    what = (f"{b.metric} (a rate: at most 1/(1 - share) - 1)" if b.rate
            else f"{b.metric or 'wall time'} (a time: at most the share)")
    where = f" of {b.workload}" if len(chosen) > 1 else ""
    most = f", the most of its {len(chosen)} workloads" if where else ""
    share_text = (f"the allocator's functions and the kernel's memory management took {b.share * 100:.2f}% of "
                  f"{plain[0].label}'s CPU in the profiled runs{where} ({b.samples:,} samples{most}; at most "
                  f"{b.upper * 100:.2f}% at {CONFIDENCE:.0%} confidence): no allocator or setting can improve "
                  f"{what} by more than about {b.bound * 100:.2f}%")
    if b.bound >= opts.min_effect:
        return None, share_text
    calls = f"the program makes {base.get('allocs_per_s') or 0:,.0f} allocation calls a second"
    seen = (f"{calls}, no rule of the catalog fired" if not rx.fired else
            f"{calls}, the rules that fired ({', '.join(rx.fired)}) read only that rate, no workload has a memory phase")
    return f"{seen}, and {share_text}, below the {opts.min_effect * 100:g}% margin.", share_text


def _race(store: Store, opts: ExperimentOptions, workloads: list, variants: list[Variant], candidates, rx, readings,
          diag_id: int, plan_defaults, title: str, left_s: float, screened: list[str], screen_id: int | None) -> None:
    from alloclab.stats.results_cache import keep, results
    from alloclab.tune.race import RaceJudge

    plan = flow.Plan("tune", title, workloads, [v.spec for v in variants], [], {}, plan_defaults)
    settings = dataclasses.replace(
        flow.settings_of(opts, plan), max_seconds=left_s, kind="tune",
        extra_config={"tune": {"diagnosis_experiment": diag_id, "screen_experiment": screen_id,
                               "screened_out": screened, "fired": rx.fired, "silent": rx.silent,
                               "candidates": [dataclasses.asdict(c) for c in candidates],
                               "refused": [dataclasses.asdict(c) for c in rx.candidates if c.refused],
                               "readings": {k: r.values for k, r in readings.items()}}})
    err.print(f"Racing {len(variants) - 1} candidate(s) against {variants[0].label} for at most {left_s:.0f} s: "
              + ", ".join(v.label for v in variants[1:]), highlight=False)
    race_id = run_experiment(store, workloads, variants, settings, judge=RaceJudge())
    draw_early(opts.report, opts.report_file)
    # Kept, as compare keeps its Results: `alloclab report` of the race renders them at once, tune's
    # answer first (Results.tune), as here.
    r = results(store.load(race_id), min_effect=opts.min_effect, max_rss_increase=opts.max_rss_increase)
    show(r, store.path, details=opts.details, export_json=opts.export_json, report_format=opts.report,
         report_file=opts.report_file)
    keep(r, every_check=True)

