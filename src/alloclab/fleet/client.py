"""The client of a fleet run: check the hosts, hand out whole sessions, merge what comes back.

Tasks are whole randomized interleaved sessions on one host (per-host mode) or a host's share of
whole blocks (split mode); each is pinned to its host by address, with the `alloclab` resource.
A worker that dies has its task resubmitted once (to the same host once its nanny brings it back,
in split mode else to another host) or recorded as failed with the host's name. Ctrl-C stops
every session (each returns the runs it has), keeps what came back, and cancels the rest.
"""

from __future__ import annotations

import dataclasses
import re
import socket
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

from alloclab import __version__
from alloclab.errors import AlloclabError, Interrupted
from alloclab.report.numbers import count
from alloclab.store.db import Store
from alloclab.fleet import hosts as H
from alloclab.fleet.address import FleetAddress
from alloclab.fleet.cluster import RESOURCE, open_client
from alloclab.fleet.merge import Merged, combine_verifications, update_experiment, verification_json
from alloclab.store.merge import merge_session
from alloclab.fleet.spec import SessionSpec, from_wire

PREFLIGHT_TIMEOUT_S = 180
RETURN_GRACE_S = 30        # how long a dead worker's nanny has to bring it back
STOP_WAIT_S = 60           # after Ctrl-C: how long stopped sessions have to hand back their runs
MAX_ATTEMPTS = 2
LOCAL_WARNING = ("local workers share this machine's CPUs: a local fleet is for trying fleet runs out and for "
                 "tests, not for timing (its runs compete with each other)")


@dataclass
class Preflight:
    """A worker's answer to the pre-flight check (fleet.worker.preflight)."""

    hostname: str = ""
    alloclab: str = ""
    python: str = ""
    snapshot: dict = field(default_factory=dict)   # measure.machine.snapshot of that host
    problems: list[str] = field(default_factory=list)


@dataclass
class SessionResult:
    """What one task hands back (fleet.worker.run_session)."""

    returncode: int = 0
    stderr: str = ""
    error: str = ""       # alloclab's own error, apart from the program's output
    db: bytes = b""       # the session's SQLite file
    host: str = ""
    task: str = ""
    hostname: str = ""


@dataclass
class TaskRecord:
    """A task as the experiment's config keeps it, under fleet.tasks."""

    host: str
    runs: int
    attempt: int
    returncode: int


@dataclass
class FleetRecord:
    """The experiment config's "fleet" entry (stored as JSON; the reports and hosts.for_host read it)."""

    address: str
    mode: str
    client: str
    hosts: list[str]
    left_out: dict[str, str]
    token: str
    tasks: dict[str, TaskRecord] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    runs_per_host: dict[str, int] = field(default_factory=dict)   # measured blocks each host brought back


@dataclass
class Host:
    label: str
    address: str
    name: str
    snapshot: dict


@dataclass
class Task:
    key: str
    spec: SessionSpec
    host: Host
    attempt: int = 1
    future: object = None
    lost_at: float | None = None
    taken: bool = False      # its runs are in the store


@dataclass
class FleetRun:
    store: Store
    address: FleetAddress
    mode: str
    require_all: bool
    spec: SessionSpec
    title: str
    note: Callable[[str], None] = print
    exp_id: int | None = None
    hosts: list[Host] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)
    verifications: dict[str, dict] = field(default_factory=dict)   # host -> (wi, vi) -> Verification

    # --- hosts -----------------------------------------------------------------------------

    def _preflight(self, client) -> list[Host]:
        from alloclab.fleet.worker import preflight
        info = _workers(client)
        futures, left_out = {}, {}
        for addr, w in info.items():
            name, threads = str(w.get("name", addr)), w.get("nthreads", 1)
            if (w.get("resources") or {}).get(RESOURCE, 0) < 1:
                left_out[name] = f"started without the resource {RESOURCE}=1 (start it with `dask worker --nthreads 1 --resources {RESOURCE}=1`)"
            elif threads != 1:
                left_out[name] = f"runs {threads} threads (start it with --nthreads 1: one benchmark at a time)"
            else:
                futures[addr] = client.submit(preflight, self.spec.to_json(), key=f"alloclab-{self.token}-preflight-{name}",
                                              pure=False, workers=[addr], allow_other_workers=False,
                                              resources={RESOURCE: 1})
        checked = {}
        for addr, f in futures.items():
            name = str(info[addr].get("name", addr))
            try:
                r = from_wire(Preflight, f.result(timeout=PREFLIGHT_TIMEOUT_S))
            except ModuleNotFoundError as exc:
                left_out[name] = (f"alloclab is not importable there ({exc}): install it with "
                                  f"`pip install 'alloclab[fleet]=={__version__}'`")
                continue
            except Exception as exc:  # the host's own failure, named and left out
                left_out[name] = f"pre-flight check failed: {type(exc).__name__}: {exc}"
                continue
            if r.alloclab != __version__:
                left_out[name] = f"runs alloclab {r.alloclab}, this client {__version__}: install the same version"
            elif r.problems:
                left_out[name] = " ".join(r.problems)
            else:
                checked[addr] = (name, r)
        hostnames = [r.hostname for _, r in checked.values()]
        hosts = []
        for addr, (name, r) in checked.items():
            # Local workers (or several per machine) share a hostname: the worker's name tells them apart.
            label = r.hostname if hostnames.count(r.hostname) == 1 else _label(r.hostname, name, addr)
            hosts.append(Host(label, addr, name, r.snapshot))
        for name, why in left_out.items():
            self.note(f"fleet: worker {name} left out: {why}")
        if left_out and self.require_all:
            raise AlloclabError(f"--fleet-require-all: {count(len(left_out), 'worker')} of {self.address.text} failed the "
                                f"pre-flight check: " + "; ".join(f"{n}: {w}" for n, w in left_out.items())
                                + ". Fix them, or drop --fleet-require-all to run on the others.")
        if not hosts:
            raise AlloclabError(f"No worker of {self.address.text} can run this experiment"
                                + (": " + "; ".join(f"{n}: {w}" for n, w in left_out.items()) if left_out else
                                   " (the scheduler has no workers)") + ". See docs/fleet.md for what each host needs.")
        self.left_out = left_out
        return sorted(hosts, key=lambda h: h.label)

    # --- tasks -----------------------------------------------------------------------------

    def _tasks(self) -> list[Task]:
        s = self.spec.settings
        if self.mode == "per-host":
            return [Task(f"{self._key_prefix()}-{h.label}-blocks-all", self.spec, h) for h in self.hosts]
        runs, n = s.runs, min(len(self.hosts), s.runs)
        sizes = [runs // n + (1 if i < runs % n else 0) for i in range(n)]
        tasks, first = [], 0
        for i, size in enumerate(sizes):
            spec = self.spec.with_settings(runs=size, seed=s.seed + i)
            tasks.append(Task(f"{self._key_prefix()}-{self.hosts[i].label}-blocks-{first}-{first + size - 1}",
                              spec, self.hosts[i]))
            first += size
        return tasks

    def _key_prefix(self) -> str:
        # Two clients may share a scheduler and both have an experiment 1: equal keys would be taken
        # for the same computation, so the keys also carry this run's random token.
        return f"alloclab-{self.token}-e{self.exp_id}"

    def _submit(self, client, t: Task) -> None:
        from alloclab.fleet.worker import run_session
        key = t.key if t.attempt == 1 else f"{t.key}-try{t.attempt}"
        t.future = client.submit(run_session, t.spec.to_json(), t.host.label, key, key=key, pure=False,
                                 workers=[t.host.address], allow_other_workers=False, resources={RESOURCE: 1})
        t.lost_at = None

    # --- results ---------------------------------------------------------------------------

    def _take(self, t: Task, result: dict) -> None:
        res = from_wire(SessionResult, result)
        host = t.host.label
        got = Merged(**merge_session(self.store, self.exp_id, res.db, host))
        t.taken = True
        if got.verifications:
            self.verifications[host] = self.verifications.get(host, {}) | got.verifications
            for (wi, vi), v in combine_verifications(self.verifications).items():
                self.store.set_verification(self.exp_id, wi, vi, v.status, v.reasons, v.notes)
        if got.config:
            per_host = self.fleet.runs_per_host
            per_host[host] = per_host.get(host, 0) + got.measured_blocks
            # The pooled analysis has every host's runs: "runs" counts them; each host's own in runs_per_host.
            # In split mode each task ran with a seed of its own.
            seed = {"seed": f"{self.spec.settings.seed} + task number"} if self.mode == "split" else {}
            self.config = got.config | {"runs": sum(per_host.values())} | seed
            if got.machine:
                per_host_ver = {f"{wi},{vi}": verification_json(v)
                                for (wi, vi), v in self.verifications.get(host, {}).items()}
                self.host_machines[host] = got.machine | {"verifications": per_host_ver}
        tail = res.stderr.strip().splitlines()
        if res.returncode not in (0, 130):
            # The first line of alloclab's own error is the reason (the rest is the program's output tail).
            why = [re.sub(r"\s*(Output|Stderr) tail:$", ".", line) for line in res.error.strip().splitlines()[:1]] or tail[-6:]
            self._fail(t, "the session stopped: " + (" ".join(why) or f"exit status {res.returncode}"))
        self.fleet.tasks[t.key] = TaskRecord(host, got.runs, t.attempt, res.returncode)
        update_experiment(self.store, self.exp_id, config=self._config(), machine=self._machine())
        self.note(f"fleet: {host}: {got.runs} runs back" + (" (stopped)" if res.returncode == 130 else ""))

    def _config(self) -> dict:
        """The experiment's config as stored: the session's (or the spec's) settings and the fleet's record."""
        return self.config | {"fleet": dataclasses.asdict(self.fleet)}

    def _machine(self) -> dict:
        """The experiment's machine record as stored: what the hosts share, and each host's own."""
        return self.machine | {"hosts": self.host_machines}

    def _fail(self, t: Task, why: str) -> None:
        self.failures[t.key] = f"{t.host.label}: {why}"
        self.fleet.failed = dict(self.failures)
        update_experiment(self.store, self.exp_id, config=self._config())
        self.note(f"fleet: task {t.key} on {t.host.label} failed: {why}")

    def _worker_lost(self, client, t: Task, alive: dict[str, str]) -> bool:
        """True while the task waits for its host (or another) to take it again."""
        now = time.monotonic()
        t.lost_at = t.lost_at or now
        if t.future is not None:
            t.future.cancel()
            t.future = None
        if t.attempt >= MAX_ATTEMPTS:
            self._fail(t, f"its worker died ({count(t.attempt, 'attempt')}); that host's runs of this task are lost")
            return False
        back = alive.get(t.host.name)
        if back is None and self.mode == "split" and now - t.lost_at > RETURN_GRACE_S:
            others = [h for h in self.hosts if h.name in alive]
            if others:
                t.host = dataclasses.replace(others[0], address=alive[others[0].name])
                back = t.host.address
        if back is None:
            if now - t.lost_at > RETURN_GRACE_S:
                self._fail(t, f"its worker died and did not come back within {RETURN_GRACE_S} s")
                return False
            return True
        t.host = dataclasses.replace(t.host, address=back)
        t.attempt += 1
        self.note(f"fleet: the worker of {t.host.label} died during {t.key}; running the task again there "
                  f"(attempt {t.attempt})")
        self._submit(client, t)
        return True

    def _wait(self, client, tasks: list[Task]) -> None:
        from distributed import wait
        pending = list(tasks)
        while pending:
            futures = [t.future for t in pending if t.future is not None]
            if futures:
                try:
                    wait(futures, timeout=1, return_when="FIRST_COMPLETED")
                except TimeoutError:
                    pass
            else:
                time.sleep(1)
            alive = {str(w.get("name")): a for a, w in _workers(client).items()}
            for t in list(pending):
                f = t.future
                if f is not None and f.status == "finished":
                    self._take(t, f.result())
                    pending.remove(t)
                elif f is None or f.status in ("error", "cancelled", "lost") or t.host.address not in alive.values():
                    if f is not None and f.status == "error" and not _killed_worker(f):
                        self._fail(t, f"{type(f.exception()).__name__}: {f.exception()}")
                        pending.remove(t)
                    elif not self._worker_lost(client, t, alive):
                        pending.remove(t)

    def _stop(self, client, tasks: list[Task]) -> None:
        """Ctrl-C: every session stops and hands back its runs; what does not come back in time is cancelled."""
        from distributed import wait
        from alloclab.fleet.worker import stop_sessions
        self.note("fleet: stopping every session; keeping the runs they hand back")
        # A finished task whose merge the Ctrl-C cut short (rolled back) is taken again below.
        open_tasks = [t for t in tasks if t.future is not None and not t.taken]
        for t in open_tasks:
            if t.future.status == "pending" and not _started(client, t):
                t.future.cancel()
        try:
            client.run(stop_sessions, on_error="ignore")   # a dead worker's session stops itself
            wait([t.future for t in open_tasks], timeout=STOP_WAIT_S)
        except (KeyboardInterrupt, TimeoutError):
            pass
        except Exception as exc:  # the fleet itself is failing: keep what is here, name why
            self.note(f"fleet: could not reach every worker to stop it: {type(exc).__name__}: {exc}")
        for t in open_tasks:
            if t.future.status == "finished":
                self._take(t, t.future.result())
            else:
                t.future.cancel()

    # --- the whole run ---------------------------------------------------------------------

    def run(self) -> int:
        if self.address.kind == "local":
            self.note(f"fleet: {LOCAL_WARNING}")
        status = "complete"
        self.token = uuid.uuid4().hex[:8]
        with open_client(self.address) as client:
            try:
                client.wait_for_workers(self.address.expected_workers, timeout=120)
            except TimeoutError:
                self.note(f"fleet: fewer than {count(self.address.expected_workers, 'worker')} joined within 120 s; going on with those there")
            self.hosts = self._preflight(client)
            snapshots = {h.label: h.snapshot for h in self.hosts}
            if self.mode == "split":
                diffs = H.fingerprint_differences(snapshots)
                if diffs:
                    raise AlloclabError("--fleet-mode split spreads one experiment's blocks over hosts, so they must be the "
                                        "same machine; these differ: " + " | ".join(diffs) + ". Use --fleet-mode per-host "
                                        "(the whole experiment on every host), or a fleet of identical hosts.")
            self.machine = H.combined_machine(snapshots, self.address.text)
            self.host_machines = dict(snapshots)   # each host's machine record, once its session is back
            s = self.spec.settings
            self.config = {"runs": s.runs, "warmup": s.warmup, "seed": s.seed, "verify": s.verify,
                           "schedule": "randomized interleaved blocks", **s.extra_config}
            self.fleet = FleetRecord(self.address.text, self.mode, socket.gethostname(), [h.label for h in self.hosts],
                                     self.left_out, self.token)
            self.exp_id = self.store.new_experiment(s.kind, self.title, self._config(), self._machine())
            self.note(f"fleet: {self.mode} on {count(len(self.hosts), 'host')}: {', '.join(h.label for h in self.hosts)}")
            tasks = self._tasks()
            try:
                for t in tasks:
                    self._submit(client, t)
                self._wait(client, tasks)
            except KeyboardInterrupt:
                status = "interrupted"
                self._stop(client, tasks)
            finally:
                if status != "interrupted" and self.failures:
                    status = "failed"
                self.store.finish(self.exp_id, status, {"fleet_failed": self.failures})
        if status == "interrupted":
            raise Interrupted(f"Interrupted: every session on the fleet was stopped; the runs that came back are kept "
                              f"in {self.store.path} as experiment {self.exp_id}. See them with "
                              f"`alloclab report --db {self.store.path} {self.exp_id}`.")
        if len(self.failures) == len(tasks):
            by_reason: dict[str, list[str]] = {}
            for t in tasks:
                by_reason.setdefault(self.failures[t.key].split(": ", 1)[1], []).append(t.host.label)
            raise AlloclabError("Every task of the fleet failed: " + " | ".join(
                f"on {', '.join(hosts)}: {why}" for why, hosts in by_reason.items())
                + f" What came back is in {self.store.path} as experiment {self.exp_id}.")
        return self.exp_id


def _label(hostname: str, name: str, addr: str) -> str:
    """A worker's label where its host runs several: local:N names them 0..N-1; `dask worker` names
    them after their address unless given --name."""
    if name.isdigit():
        return f"{hostname}/w{name}"
    return f"{hostname}/{name}" if name != addr else f"{hostname}:{addr.rsplit(':', 1)[-1]}"


def _killed_worker(f) -> bool:
    return type(f.exception()).__name__ == "KilledWorker"


def _started(client, t: Task) -> bool:
    return any(t.future.key in keys for keys in client.processing().values())


def _workers(client) -> dict:
    """Every worker the scheduler knows (newer Dask lists five unless asked for all)."""
    import inspect
    everyone = {"n_workers": -1} if "n_workers" in inspect.signature(client.scheduler_info).parameters else {}
    return client.scheduler_info(**everyone)["workers"]   # Dask's own dict
