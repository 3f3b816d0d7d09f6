"""The one flow behind compare, suite and run: check everything that can be refused, measure
(here or on a fleet), then load the experiment and build its Results once (stats/results.py) and
hand them to every view of it (the table, the reports and exports, the per-host tables, the suite's
summary, the sweeps, the profile's bounds) and to the --fail-if-worse gate.

In: ExperimentOptions and a Plan (what the command measures). Out: the Results, for the gate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.text import Text

from alloclab.cli.app import console, draw_early, err, percent, run_experiment, seconds, show
from alloclab.cli.experiment_options import ExperimentOptions
from alloclab.cli.outputs import check_outputs
from alloclab.defaults import CommandDefaults
from alloclab.fleet import cli_glue as fleet_cli
from alloclab.store.db import Store

if TYPE_CHECKING:
    from alloclab.measure.runner import Settings
    from alloclab.stats.results import Results


@dataclass
class Plan:
    """What one command measures, built from its own options."""

    kind: str
    title: str
    workloads: list
    specs: list   # VariantSpec as read by plan_variants, or text (a file's variants, the defaults)
    sweeps: list[dict]
    target: object                 # what the workloads were built from (measure/targets.py): a fleet's hosts rebuild them
    defaults: CommandDefaults      # run's: its file's values where it has them
    until_precise: str | None = None
    summary: bool = False          # suite's summary across workloads, after the main table


def check_first(opts: ExperimentOptions, **fleet_unsupported) -> None:
    """What can be refused without knowing the workloads: before they are built or compiled."""
    check_outputs(db=opts.db, report=opts.report, report_file=opts.report_file, export_json=opts.export_json,
                  export_markdown=opts.export_markdown, export_csv=opts.export_csv)
    fleet_cli.check(opts.fleet, opts.fleet_mode, profile=opts.profile, setup=opts.setup, prepare=opts.prepare,
                    cleanup=opts.cleanup, **fleet_unsupported)


def settings_of(opts: ExperimentOptions, plan: Plan) -> Settings:
    """How long and how to measure: `--runs N` means exactly N; without it (and without
    --until-precise) blocks are added until every primary comparison is decided, within --budget and
    --max-runs, and what stays open gets a one-run profile per variant (unless --profile profiles
    everything afterwards)."""
    from alloclab.measure.hooks import Hooks
    from alloclab.measure.runner import Settings
    from alloclab.plan.sweep import sweep_config

    d = plan.defaults
    limit = opts.max_runs if opts.max_runs is not None else d.max_runs
    sequential = opts.runs is None and not plan.until_precise
    hooks = Hooks(opts.setup, opts.prepare, opts.cleanup)
    return Settings(
        runs=opts.runs if opts.runs is not None else d.first_look, until_decided=sequential,
        auto_profile=sequential and not opts.profile, first_look=min(d.first_look, limit), early_look=d.early_look, max_runs=limit,
        max_seconds=seconds(opts.budget or d.budget), margin=opts.min_effect,
        until_precise=percent(plan.until_precise) if plan.until_precise else None,
        warmup=opts.warmup if opts.warmup is not None else d.warmup,
        timeout_s=opts.timeout, seed=opts.seed, verify=not opts.no_verify, fingerprint=opts.fingerprint,
        kind=plan.kind, title=plan.title, hooks=hooks, extra_config=sweep_config(plan.sweeps) | hooks.config())


def _check_profiling(opts: ExperimentOptions, workloads: list) -> None:
    if not opts.profile:
        return
    from alloclab.cli.profile import check_profiling
    from alloclab.measure.profile import record
    check_profiling()
    for w in workloads:
        record.check_profilable(w)


def measure_and_show(opts: ExperimentOptions, plan: Plan) -> Results:
    from alloclab.catalog.variants import parse_variants

    settings = settings_of(opts, plan)
    _check_profiling(opts, plan.workloads)
    # Resolved once, here; a fleet's hosts get the specs as read (VariantSpec, serialized) and resolve
    # them against their own catalogs (an allocator need not be installed on this machine).
    variants = [] if opts.fleet else parse_variants(plan.specs)
    store = Store(opts.db)
    err.print(f"Storing results in {store.path.resolve()}", highlight=False)
    if opts.fleet:
        exp_id = fleet_cli.run(store, opts.fleet, opts.fleet_mode, opts.fleet_require_all, plan.kind,
                               plan.target, plan.specs, settings,
                               note=lambda text: err.print(text, highlight=False))
    else:
        exp_id = run_experiment(store, plan.workloads, variants, settings)
    return _show_all(store, exp_id, opts, plan, variants)


def _show_all(store: Store, exp_id: int, opts: ExperimentOptions, plan: Plan, variants: list) -> Results:
    from alloclab.fleet.report import per_host, render_hosts
    from alloclab.report import terminal
    from alloclab.stats.results_cache import keep, results

    draw_early(opts.report, opts.report_file)
    e = store.load(exp_id)
    # Kept in the cache: `alloclab report` of this experiment renders these Results at once.
    r = results(e, min_effect=opts.min_effect, max_rss_increase=opts.max_rss_increase,
                sweeps=bool(plan.sweeps), summary=plan.summary, hosts=per_host(e) if opts.fleet else None)
    show(r, store.path, details=opts.details, exports=opts.exports(), report_format=opts.report,
         report_file=opts.report_file)
    if opts.fleet:
        render_hosts(r, console, details=opts.details)
    if plan.summary and opts.details:   # its geomeans are for the tables, not the short answer
        terminal.summary(r, console)
    if plan.sweeps:
        from alloclab.cli.sweep import render_stored_sweeps
        render_stored_sweeps(r)
    keep(r, every_check=True)
    if opts.profile:
        from alloclab.cli.profile import profile_after
        profile_after(store, r, plan.workloads, variants, runs=opts.profile_runs, call_graph=opts.call_graph,
                      timeout_s=opts.timeout)
    return r


def gate(r: Results, opts: ExperimentOptions) -> None:
    """--fail-if-worse: exit 1 when a variant is decided worse by at least the threshold on a primary
    metric, 3 when a primary comparison stays undecided, else return (exit 0)."""
    import typer

    from alloclab.report.common import primary_comparisons
    from alloclab.stats.estimates import format_comparison

    if not opts.fail_if_worse:
        return
    threshold, text = opts.fail_if_worse_fraction, opts.fail_if_worse
    worse, undecided = [], []
    a = r.analysis
    for w, row, vi, c in primary_comparisons(a):
        bad = (1 - c.ratio) if row.higher_is_better else (c.ratio - 1)
        if c.verdict == "worse" and bad >= threshold - 1e-12:
            worse.append(f"{w.name} {row.name} {a.labels[vi]} ({format_comparison(c)})")
        elif c.verdict == "undecided":
            undecided.append(f"{w.name} {row.name} {a.labels[vi]}")
    if worse:
        err.print(Text.assemble((f"fail-if-worse {text}:", "bold red"), " decided worse: " + "; ".join(worse)),
                  highlight=False)
        raise typer.Exit(1)
    if undecided:
        err.print(Text.assemble((f"fail-if-worse {text}:", "yellow"), " undecided within the budget: "
                                + "; ".join(undecided) + ". Give it more runs (--budget, --max-runs)."),
                  highlight=False)
        raise typer.Exit(3)
    err.print(f"fail-if-worse {text}: every primary comparison decided better, equivalent, or worse by "
              f"less than {text}.", highlight=False)
