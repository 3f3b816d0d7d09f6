"""hyperfine's --setup, --prepare and --cleanup, around an experiment's runs.

An experiment is one schedule of rotated blocks over every workload and variant, not a benchmark
per command as in hyperfine, so: --setup runs once before anything runs the program (a recipe's
servers, the settings read back, the first run), --prepare before each run of the program (warm-up,
verification and measured runs, the --fingerprint runs and the profile of what stays undecided),
outside the run's measurement, and --cleanup once after the last run and the workloads' own
teardown, also where the experiment failed or was interrupted; not where --setup failed (as a
context manager's exit follows only a successful enter).

Each is the user's command line as hyperfine takes it: one string, run by /bin/sh -c as one
argument (never pasted into another shell line), in the current directory and alloclab's own
environment (no variant's preload or settings), stdin closed, its output kept for the error alone.
In: Hooks (the options). Out: nothing, or a HookFailed that names the command, the fix and the runs kept.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from alloclab.errors import AlloclabError, Interrupted

class HookFailed(AlloclabError):
    pass


@dataclass(frozen=True)
class Hooks:
    setup: str | None = None
    prepare: str | None = None
    cleanup: str | None = None

    def __bool__(self) -> bool:
        return any(asdict(self).values())

    def config(self) -> dict:
        """What the experiment's config stores, the given ones: its exports (-f json, --export-json) say
        what ran around its runs."""
        given = {k: v for k, v in asdict(self).items() if v}
        return {"hooks": given} if given else {}


def run_hook(command: str, env: dict[str, str]) -> str | None:
    """Runs one hook to its end: None where it succeeded, else what went wrong in a clause ("exit
    status 1; its output ended: ..."). Ctrl-C (KeyboardInterrupt) kills its whole process group."""
    with tempfile.TemporaryFile() as out:
        try:
            # A session of its own: the terminal's Ctrl-C reaches alloclab, which then stops the
            # hook's whole tree (a shell's children too), as it stops a run's.
            child = subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.DEVNULL, stdout=out,
                                     stderr=subprocess.STDOUT, env=env, start_new_session=True)
        except OSError as exc:
            return f"/bin/sh not started ({exc})"
        try:
            code = child.wait()
        except BaseException:
            _kill(child)
            raise
        if code == 0:
            return None
        # Its last line is what is said: a hook that printed gigabytes is not read whole.
        out.seek(max(0, out.seek(0, os.SEEK_END) - 4096))
        tail = [line for line in out.read().decode(errors="replace").splitlines() if line.strip()]
        said = f"; its output ended: {tail[-1].strip()[:300]}" if tail else "; it printed nothing"
        how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        return how + said


def _kill(child: subprocess.Popen) -> None:
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    child.wait()


class HookRunner:
    """The hooks of one experiment: setup once, prepare before each run, cleanup once if setup ran."""

    def __init__(self, hooks: Hooks, env: dict[str, str]):
        self.hooks, self.env = hooks, env
        self.set_up = False
        self.kept = "Nothing was measured or stored."   # what a failure keeps, said in its error

    def setup(self) -> None:
        if self.hooks.setup:
            self._run("setup", "before the experiment's first run")
        self.set_up = True

    def recorded(self, db: Path, exp_id: int) -> None:
        self.kept = (f"The runs measured so far are kept in {db} as experiment {exp_id} (see them with "
                     f"`alloclab report --db {db} {exp_id}`).")

    def prepare(self, when: Callable[[], str]) -> None:
        """`when`: the run it comes before, in words; asked for only where the hook fails."""
        if self.hooks.prepare:
            self._run("prepare", when)

    def preparing(self, advance: Callable[[str], None]) -> Callable[[str], None]:
        """`advance` (a progress callback called just before each run), then --prepare."""
        if not self.hooks.prepare:
            return advance

        def both(text: str) -> None:
            advance(text)
            self.prepare(lambda: f"before the run {text}")
        return both

    def cleanup(self, note: Callable[[str], None]) -> None:
        """After the last run, whatever stopped the experiment. A failure is said (`note`), not raised:
        it must neither hide why the experiment stopped nor keep its results from being shown."""
        if not (self.set_up and self.hooks.cleanup):
            return
        self.set_up = False
        try:
            why = run_hook(self.hooks.cleanup, self.env)
        except KeyboardInterrupt:
            raise Interrupted(f"Interrupted inside --cleanup, which was stopped: finish its work by hand. "
                              f"{self.kept}") from None
        if why:
            note(f"The --cleanup command failed after the experiment's last run, with {why}. The command was: "
                 f"{self.hooks.cleanup}. The runs are stored; finish its work by hand, and fix the command (it "
                 f"runs through /bin/sh -c in the current directory).")

    def _run(self, option: str, when: str | Callable[[], str]) -> None:
        command = getattr(self.hooks, option)
        why = run_hook(command, self.env)
        if why:
            raise HookFailed(
                f"The --{option} command failed {when if isinstance(when, str) else when()}, with {why}. The "
                f"command was: {command}. Fix it (it runs through /bin/sh -c in the current directory, with "
                f"alloclab's environment and no allocator of the experiment) or leave --{option} out. {self.kept}")
