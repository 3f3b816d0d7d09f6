"""Run an experiment: every workload under every variant, in the planned order, stored as it goes."""

from __future__ import annotations

import math
import os
import random
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from alloclab import defaults
from alloclab.measure import forward, machine, readback, verify
from alloclab.plan.schedule import Job, Planner
from alloclab.measure.padding import PAD_VAR, env_size, pad_env
from alloclab.errors import AlloclabError, Interrupted
from alloclab.measure.run import RunInterrupted, RunResult
from alloclab.measure.standard import standard_values
from alloclab.workloads.metrics import HW_COUNTERS, STANDARD, extract, output_tail
from alloclab.measure.perfstat import parse_perf_stat
from alloclab.catalog.variants import Variant, removed_from_env
from alloclab.workloads.command import Workload
from alloclab.measure.executors import executor_of
from alloclab.measure.blocks import Judge, MoreBlocks
from alloclab.measure.hooks import HookRunner, Hooks
from alloclab.plan.design import Design
from alloclab.store.db import Store
from alloclab.store.records import Recorder


@dataclass
class Settings:
    runs: int = 5
    warmup: int = defaults.WARMUP
    timeout_s: float | None = None
    seed: int = defaults.SEED
    verify: bool = True
    fingerprint: bool = False            # an untimed allocation-fingerprint run per cell (measure/fingerprint.py)
    # Only the fingerprint runs, no timed ones: tune's diagnosis (the race that follows times them).
    fingerprint_only: bool = False
    # Leave the workloads' set-up (a loaded database) up at the end: the caller runs another
    # experiment on it (tune's race after its diagnosis) and tears it down itself.
    keep_prepared: bool = False
    kind: str = "compare"
    title: str = ""
    until_precise: float | None = None   # stop adding blocks when every CI half-width is below this
    until_decided: bool = False          # add blocks until every primary comparison has a verdict
    first_look: int = 10                 # until decided: blocks before the first look
    early_look: int | None = None        # until decided: a race's look before the first (plan/design.py)
    race: bool = False                   # until decided: a race's design over max_runs (Design.race)
    margin: float = defaults.MARGIN      # equivalence margin (--min-effect)
    alpha: float = defaults.ALPHA
    max_runs: int = 50
    max_seconds: float = 1800.0          # the budget of the adaptive modes
    # Until decided: where a primary comparison stays open, one profiled run per variant of its
    # workload before the set-up is torn down (measure/auto_profile.py), within the budget.
    auto_profile: bool = False
    failures_expected: bool = False   # runs made to see whether it fails (tune's plain check): none refused
    hooks: Hooks = field(default_factory=Hooks)   # --setup, --prepare, --cleanup (measure/hooks.py)
    extra_config: dict = field(default_factory=dict)   # e.g. the sweep structure, for reports

    def __post_init__(self) -> None:
        if why := defaults.refusal(runs=self.runs, warmup=self.warmup, timeout_s=self.timeout_s,
                                   max_runs=self.max_runs if self.until_decided else None):
            raise AlloclabError(why)
        if isinstance(self.hooks, dict):   # as it crossed a fleet's wire (fleet/spec.py)
            self.hooks = Hooks(**self.hooks)


@dataclass
class CellKey:
    """Where a cell (one workload under one variant) stands in the experiment; its runs are in the store."""
    workload_idx: int
    variant_idx: int


@dataclass
class Progress:
    """Callbacks the CLI plugs a progress bar into; the runner knows nothing of terminals."""

    start: Callable[[int], None] = lambda total: None
    advance: Callable[[str], None] = lambda text: None
    note: Callable[[str], None] = lambda text: None


@dataclass
class Runner(MoreBlocks):
    store: Store
    workloads: list[Workload]
    variants: list[Variant]
    settings: Settings
    progress: Progress = field(default_factory=Progress)
    base_env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    judge: "Judge | None" = None   # stats.looks.Judge: needed until decided and with --until-precise
    # What the budget is measured with; tests hand in a fake clock that their fake runs advance.
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        s = self.settings   # checked when it was made (Settings.__post_init__)
        self.design = (Design.race(s.max_runs, s.alpha, first=s.first_look) if s.until_decided and s.race
                       else Design.sequential(s.first_look, s.max_runs, s.alpha, early=s.early_look) if s.until_decided
                       else Design.fixed(s.runs, s.alpha))
        if (s.until_decided or s.until_precise) and self.judge is None:
            raise TypeError("measuring until decided or precise needs a judge (alloclab.stats.looks.Judge)")
        for w in self.workloads:
            executor_of(w)
        self.programs = [w.program() for w in self.workloads]
        self.hooks = HookRunner(s.hooks, self.base_env)
        self.cells = [CellKey(w, v) for w in range(len(self.workloads)) for v in range(len(self.variants))]
        self.evidence: dict[tuple[int, int], verify.Evidence] = {}
        self.found_metric: set[tuple[int, str]] = set()
        self.perf_ok = machine.perf_counters()[0]
        self.exp_id: int | None = None
        # The experiment as written so far, kept in memory as each run is stored: what a look reads.
        self.recorder: Recorder | None = None
        self._env_max: dict[int, int] = {}
        self._last_wall: dict[int, float] = {}
        self._filler: tuple[int | None, int] = (None, 0)   # (block, its filler): drawn once per block
        self._env_of: dict[tuple[int, int], tuple[dict[str, str], int]] = {}
        self._cell_variant: dict[tuple[int, int], Variant] = {}
        self._last_pad = 0
        self._labels: dict[tuple[int, bool], str] = {}
        self._stopped: str | None = None   # why a sequential experiment stopped adding blocks
        self._measured = self.design.looks[0]
        self._open_at_end: set[int] = set()   # workloads with a primary comparison still open at the stop

    # --- set-up ----------------------------------------------------------------------------

    def _variant(self, wi: int, vi: int) -> Variant:
        """The variant as this workload's cells run it: the system allocator of a program linked
        against another gets the catalog's forwarding preload (measure/forward.py)."""
        if (wi, vi) not in self._cell_variant:
            self._cell_variant[(wi, vi)] = forward.for_cell(self.variants[vi], self.programs[wi])
        return self._cell_variant[(wi, vi)]

    def _record_setup(self) -> None:
        s = self.settings
        removed = removed_from_env(self.base_env)
        config = {"runs": self.design.looks[0], "warmup": s.warmup, "until_precise": s.until_precise,
                  "until_decided": s.until_decided, "budget_s": s.max_seconds if s.until_decided else None,
                  "max_runs": s.max_runs, "timeout_s": s.timeout_s, "seed": s.seed,
                  "verify": s.verify, "schedule": "randomized interleaved blocks",
                  "design": self.design.to_config(), "margin": s.margin,
                  "env_padding": "ALLOCLAB_PAD: every variant of a block gets the same environment size, "
                                 "plus a filler of 0-4095 bytes drawn per block",
                  "removed_env": removed, "perf_counters": self.perf_ok}
        config.update(s.extra_config)
        meta = machine.snapshot(self.variants)
        self.recorder = Recorder(self.store, s.kind, s.title or self.workloads[0].name, config, meta)
        self.exp_id = self.recorder.id
        self.config = config
        for i, w in enumerate(self.workloads):
            defs = list(w.metrics) + list(STANDARD) + (list(HW_COUNTERS) if self.perf_ok else [])
            self.recorder.add_workload(i, w.name, w.argv, w.params, w.info, defs)
        for i, v in enumerate(self.variants):
            self.recorder.add_variant(i, v, meta["allocators"].get(v.label, "unknown"))
        for c in self.cells:
            ev = verify.static_check(self._variant(c.workload_idx, c.variant_idx), self.programs[c.workload_idx])
            self.evidence[(c.workload_idx, c.variant_idx)] = ev
        self._read_settings_back()
        if removed:
            self.progress.note("Removed inherited allocator settings from the environment of every run: "
                               + ", ".join(f"{k}={v}" for k, v in removed.items()))

    def _read_settings_back(self) -> None:
        """Untimed, before the first run: each setting as the running allocator reports it."""
        for vi, v in enumerate(self.variants):
            results = readback.check(v, v.apply(self.base_env), self.workloads[0].argv) if self.settings.verify else []
            for (cwi, cvi), ev in self.evidence.items():
                if cvi != vi:
                    continue
                for r in results:
                    (ev.fail if r.status == readback.INEFFECTIVE else ev.note)(r.line())
                if v.tunables and not self.settings.verify:
                    ev.note("settings not read back from the allocator (--no-verify)")
                cv = self._variant(cwi, cvi)
                for note in cv.notes:
                    ev.note(note)
                if cv is not v and self.settings.verify:
                    forward.check(cv, self.programs[cwi], cv.apply(self.base_env), ev)

    # --- one job ---------------------------------------------------------------------------

    def _env(self, w: Workload, v: Variant, job: Job, tmp: Path) -> tuple[dict, Path | None]:
        cell = self.cells[job.cell]
        env, size = self._cell_env(cell.workload_idx, cell.variant_idx)
        env = pad_env(env, self._env_target(job), size)
        perf_file = None
        if job.verify:
            env |= verify.ld_debug_env(tmp / "ld")
        elif self.perf_ok:
            perf_file = tmp / "perf.csv"
        return env, perf_file

    def _cell_env(self, wi: int, vi: int) -> tuple[dict[str, str], int]:
        """A cell's environment before padding, and its size: the same for every run, built once."""
        if (wi, vi) not in self._env_of:
            env = self._variant(wi, vi).apply(self.base_env) | self.workloads[wi].env
            self._env_of[(wi, vi)] = env, env_size(env)
        return self._env_of[(wi, vi)]

    def _env_target(self, job: Job) -> int:
        """The environment size every variant of this job's block gets: the largest variant's, plus a
        filler drawn per block. A variant's LD_PRELOAD and settings lengthen the environment, which
        moves the initial stack and can shift timings by itself (Mytkowicz et al., ASPLOS 2009)."""
        wi = self.cells[job.cell].workload_idx
        if wi not in self._env_max:
            self._env_max[wi] = max(self._cell_env(wi, vi)[1] for vi in range(len(self.variants)))
        if self._filler[0] != job.block:
            # An integer seed: a string one is hashed with SHA-512 first, a cost paid every block.
            self._filler = (job.block, random.Random(self.settings.seed * 1_000_003 + job.block).randrange(4096))
        return self._env_max[wi] + len(PAD_VAR) + 2 + self._filler[1]

    def _check_run(self, cell: CellKey, job: Job, result: RunResult, tmp: Path) -> dict:
        v = self._variant(cell.workload_idx, cell.variant_idx)
        ev = self.evidence[(cell.workload_idx, cell.variant_idx)]
        extra: dict = {"load": machine.load_average(), "samples": result.samples, "env_pad": self._last_pad}
        for refusal in verify.preload_refusals(result.stderr):
            ev.fail(refusal)
            extra.setdefault("verification", []).append(refusal)
        if job.verify:
            verify.bindings_check(v, tmp / "ld", ev)
        if not v.is_system:
            # perf (when it wraps the program) is ours, not the program's.
            escaped = [p for p in result.processes if p.mapped is False and p.name != "perf"]
            for p in escaped:
                ev.fail(f"process {p.name} (pid {p.pid}) ran without {v.library.name} mapped: it escaped the preload")
            if escaped:
                extra.setdefault("verification", []).append(f"{len(escaped)} process{'es' if len(escaped) != 1 else ''} escaped the preload")
        return extra

    def _metrics(self, cell: CellKey, job: Job, result: RunResult, perf_file: Path | None) -> dict:
        w = self.workloads[cell.workload_idx]
        values: dict[str, float] = standard_values(result)
        if perf_file is not None:
            values |= parse_perf_stat(perf_file)
        if result.status != "ok":
            return values
        text = result.stdout + "\n" + result.stderr
        for m in w.metrics:
            value = extract(m, text, result.values)
            if value is None:
                if (cell.workload_idx, m.name) not in self.found_metric:
                    raise AlloclabError(
                        f"Metric '{m.name}' ({m.source}: {m.pattern}) matched nothing in the output of run "
                        f"{job.block}.{job.position} ({w.name} under {self.variants[cell.variant_idx].label}). "
                        f"Fix the pattern so its first group captures the number. Output tail:\n"
                        + output_tail(text))
                result.status, result.error = "failed", f"metric {m.name} not found in the output"
            else:
                self.found_metric.add((cell.workload_idx, m.name))
                values[m.name] = value
        return values

    # --- the whole experiment ----------------------------------------------------------------

    def run(self) -> int:
        s = self.settings
        planner = Planner(len(self.cells), s.seed, [c.workload_idx for c in self.cells])
        jobs = planner.initial(self.design.looks[0], s.warmup, s.verify)
        root = Path(tempfile.mkdtemp(prefix="alloclab-"))
        shared_dir = root / "run"
        block0: list[RunResult] = []
        # "failed" until the last run is stored: whatever stops the experiment early (an error in
        # the set-up, a bug, Ctrl-C) must never leave its record "running".
        status = "failed"
        prepared: list[Workload] = []
        try:
            self.hooks.setup()   # before anything runs the program, and before the record: a failure stores nothing
            self._record_setup()
            self.hooks.recorded(self.store.path, self.exp_id)
            self.progress_total = len(jobs)
            self.progress.start(len(jobs))
            started = self.clock()
            for w in self.workloads:
                prepared.append(w)
                w.executor.prepare()
            if s.fingerprint or s.fingerprint_only:
                from alloclab.measure import fingerprint
                t_fp = self.clock()
                fingerprint.run_all(self, root)
                # What a run costs here, set-up apart: tune sizes its screen and its race from it.
                self.config["fingerprint_s"] = self.clock() - t_fp
                self.recorder.set_config(self.config)
            for job in ([] if s.fingerprint_only else self._jobs(planner, jobs, started)):
                self._run_job(job, root, shared_dir, block0)
            status = "complete"
            if s.until_decided and s.auto_profile and self._open_at_end:
                from alloclab.measure import auto_profile
                auto_profile.profile_open(self, self._open_at_end)
        except KeyboardInterrupt:
            status = "interrupted"
            if self.exp_id is None:
                raise Interrupted("Interrupted before the experiment was recorded: nothing was measured.") from None
            raise Interrupted(
                f"Interrupted: every child process was stopped and the runs measured so far are kept in "
                f"{self.store.path} as experiment {self.exp_id}. See them with "
                f"`alloclab report --db {self.store.path} {self.exp_id}`.") from None
        finally:
            for w in ([] if s.keep_prepared and status == "complete" else prepared):
                w.executor.cleanup()
            if self.exp_id is not None:
                self._save_verification()
                if self.settings.until_decided:
                    self.recorder.set_config(self.config | {"stopped": self._stopped or status,
                                                            "runs_done": self._measured})
                self.recorder.finish(status, {"load_end": list(os.getloadavg())})
            shutil.rmtree(root, ignore_errors=True)
            self.hooks.cleanup(self.progress.note)   # last: a Ctrl-C inside it finds the record closed
        return self.exp_id

    def _run_job(self, job: Job, root: Path, shared_dir: Path, block0: list[RunResult]) -> None:
        """One run of the schedule: its environment, the run, its checks and metrics, stored."""
        s = self.settings
        cell = self.cells[job.cell]
        w, v = self.workloads[cell.workload_idx], self._variant(cell.workload_idx, cell.variant_idx)
        # A plain command's files (stdout, stderr, perf's counts) are rewritten by every run:
        # one directory serves them all. Verification (LD_DEBUG writes a file per process)
        # and executors that keep files of their own get a fresh one.
        fresh = job.verify or getattr(w.executor, "fresh_workdir", True)
        tmp = root / f"run-{job.block}-{job.position}" if fresh else shared_dir
        if fresh:
            tmp.mkdir()   # the shared one is made by the run itself, once
        env, perf_file = self._env(w, v, job, tmp)
        if perf_file is not None and not fresh:
            perf_file.unlink(missing_ok=True)   # never read the previous run's counts
        self._last_pad = len(env.get(PAD_VAR, ""))
        self.progress.advance(self._label(job))
        # Before the competition's count starts: the hook's own CPU is not another program's.
        self.hooks.prepare(lambda: f"before run {job.block}.{job.position} ({self._label(job)})")
        accounts_all_cpu = getattr(w.executor, "accounts_all_cpu", False)
        # /proc/stat takes a tenth of a millisecond to read, and runs shorter than
        # machine.OTHER_CPU_MIN_WALL_S cannot tell other work apart anyway: skipped while the
        # workload's runs are that short.
        short = self._last_wall.get(cell.workload_idx, math.inf) < machine.OTHER_CPU_MIN_WALL_S / 2
        busy0 = None if short else machine.busy_cpu_s()
        own = None if short else machine.OwnCpu(not accounts_all_cpu, getattr(w.executor, "background_cpu_s", None))
        try:
            result = w.executor.execute(env, v.env, tmp, timeout_s=s.timeout_s, perf_file=perf_file,
                                        mapped_marker=verify.mapped_marker(v))
        except RunInterrupted as stop:
            self._store(cell, job, stop.result, {}, {"interrupted": True})
            raise KeyboardInterrupt from None
        if result.status == "error":
            raise AlloclabError(f"Could not start the workload '{w.name}': {result.error}.")
        extra = self._check_run(cell, job, result, tmp)
        # A service's load clients (and alloclab itself) are not in the run's own time: take
        # them out too, so that only work outside the measured tree counts as competition.
        self._last_wall[cell.workload_idx] = result.wall_s
        busy1 = machine.busy_cpu_s() if busy0 is not None and result.wall_s >= machine.OTHER_CPU_MIN_WALL_S else None
        extra["other_cpu"] = machine.other_cpu(result, busy0, busy1, own.used() if own else 0.0)
        values = self._metrics(cell, job, result, perf_file)
        self._store(cell, job, result, values, extra)
        if result.status != "ok":
            self.progress.note(f"run {job.block}.{job.position} ({w.name} | {v.label}) {result.status}: "
                               f"{result.error}")
        if job.block == 0:
            block0.append(result)
            if not s.failures_expected:
                self._check_first_block(block0, result)
        if fresh:
            shutil.rmtree(tmp, ignore_errors=True)

    def _check_first_block(self, block0: list[RunResult], result: RunResult) -> None:
        """Stop at once where every run of the first block timed out or failed: the command, not an allocator."""
        if len(block0) < len(self.cells):
            return
        if all(r.status == "timeout" for r in block0):
            raise AlloclabError(
                f"Every run of the first block timed out (--timeout {self.settings.timeout_s:g} s), under every "
                f"variant: the limit is too short for this command, whatever the allocator (last "
                f"error: {result.error}). Raise --timeout or make the workload smaller. The runs "
                f"so far are kept in {self.store.path} as experiment {self.exp_id}.")
        if all(r.status != "ok" for r in block0):
            raise AlloclabError(
                f"Every run of the first block failed, under every variant: the command itself "
                f"is failing, not an allocator. Last error: {result.error}. Stderr tail:\n"
                + output_tail(result.stderr))

    def _label(self, job: Job) -> str:
        key = (job.cell, job.warmup)
        if key not in self._labels:
            cell = self.cells[job.cell]
            w, v = self.workloads[cell.workload_idx], self.variants[cell.variant_idx]
            self._labels[key] = f"{w.name[:30]} | {v.label}" + (" (warm-up)" if job.warmup else "")
        return self._labels[key]

    def _store(self, cell: CellKey, job: Job, result: RunResult, values: dict, extra: dict) -> None:
        self.recorder.add_run(cell.workload_idx, cell.variant_idx, job.block, job.position, job.warmup,
                              result, values, extra)

    def _save_verification(self) -> None:
        for (wi, vi), ev in self.evidence.items():
            self.recorder.set_verification(wi, vi, ev.status, ev.reasons, ev.notes)
