"""The CLI starts in a blink: `alloclab --help` and `alloclab allocators` load no statistics,
plotting, templating or process-watching library (issue 14: start at most 0.3 s).

Checked by what is imported, not by a stopwatch, so the test cannot be flaky on a busy machine;
bench/overhead.py times the start itself."""

from __future__ import annotations

import json
import subprocess
import sys

# What costs 0.03-1.1 s to import and no start-up path needs. pydantic comes with typer >= 0.29,
# which coerces every option through it (pyproject pins typer below that).
HEAVY = ("scipy", "numpy", "matplotlib", "jinja2", "psutil", "elftools", "pydantic", "rich.progress")

PROBE = """
import json, sys
import alloclab.cli as cli
args, heavy = json.loads(sys.argv[1]), json.loads(sys.argv[2])
sys.argv = ["alloclab", *args]
try:
    cli.main()
except SystemExit:
    pass
loaded = [m for m in heavy if m in sys.modules]
print("LOADED=" + json.dumps(loaded), file=sys.stderr)
"""


def loaded_after(args: list[str]) -> list[str]:
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(args), json.dumps(HEAVY)],
                         capture_output=True, text=True, timeout=60)
    line = [s for s in out.stderr.splitlines() if s.startswith("LOADED=")]
    assert line, f"the probe did not finish: {out.stderr[-2000:]}"
    return json.loads(line[-1].removeprefix("LOADED="))


def test_importing_the_cli_loads_no_heavy_library():
    assert loaded_after([]) == []


def test_help_lists_every_command_without_heavy_libraries():
    out = subprocess.run([sys.executable, "-m", "alloclab.cli", "--help"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    for command in ("allocators", "compare", "suite", "report", "experiments", "diff", "run", "recipes",
                    "profile", "sweep"):
        assert command in out.stdout
    assert loaded_after(["--help"]) == []


def test_allocators_loads_no_heavy_library():
    assert loaded_after(["allocators"]) == []
