"""Reports: one exporter per format behind one small interface.

An exporter is a module with `export(results, options) -> str`: it renders the Results that
stats/results.py built (the analysis, the recommendation, ...) and computes no statistic itself.
Modules are imported on first use, so a terminal report never pays for matplotlib.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from alloclab.errors import AlloclabError

if TYPE_CHECKING:  # the CLI imports this package at start; the statistics load when a report is made
    from alloclab.stats.results import Results

# format -> module in this package
FORMATS = {"terminal": "terminal_brief", "md": "markdown", "html": "html", "json": "jsonout", "csv": "csvout"}


# A file holds the renderer's output at unlimited width (`-o answer.txt`): no width cuts or wraps
# a line of it; a reader's editor or pager wraps it.
UNLIMITED = 100_000


def file_console(file):
    """The console a file's text is rendered on: plain, as wide as a line gets, and with rich's markup
    and emoji codes off, as the CLI's (the user's commands and names are printed as given)."""
    from rich.console import Console
    return Console(file=file, width=UNLIMITED, color_system=None, force_terminal=False, markup=False, emoji=False)


@dataclass(frozen=True)
class Options:
    details: bool = False                    # every standard measure, not only the headline ones


SUFFIXES = {".txt": "terminal", ".md": "md", ".markdown": "md", ".html": "html", ".htm": "html",
            ".json": "json", ".csv": "csv"}


def format_for(path: str | Path) -> str:
    """The format a file name asks for, when no format was given."""
    suffix = Path(path).suffix.lower()
    if suffix not in SUFFIXES:
        raise AlloclabError(f"Cannot tell the report format from the file name {path}; name it .md, .html, .json, "
                            f".csv or .txt, or give the format with -f / --format.")
    return SUFFIXES[suffix]


# Other names a format goes by: --export-markdown and .markdown files say "markdown", so -f does too.
ALIASES = {"markdown": "md"}
CHOICES = ", ".join(f"{f} ({a})" if (a := next((k for k, v in ALIASES.items() if v == f), None)) else f
                    for f in FORMATS)   # as every command's help lists them: "terminal, md (markdown), html, ..."


def canonical(fmt: str) -> str:
    return ALIASES.get(fmt, fmt)


def exporter(fmt: str):
    fmt = canonical(fmt)
    if fmt not in FORMATS:
        raise AlloclabError(f"Unknown report format '{fmt}'; choose one of {CHOICES} "
                            f"(e.g. --format md for a mailing list, --format html for a page with charts).")
    return importlib.import_module(f"{__name__}.{FORMATS[fmt]}")


def export(r: Results, fmt: str, options: Options | None = None) -> str:
    return exporter(fmt).export(r, options or Options())


def write_report(r: Results, fmt: str, path: str | Path | None, options: Options | None = None,
                 console=None) -> Path | None:
    """Render `r` as `fmt` into `path`, or onto stdout when path is None (the terminal report
    then keeps its colours through `console`). Returns the path written, if any."""
    options = options or Options()
    if path is None and fmt == "terminal" and console is not None:
        exporter("terminal").render(r, console, details=options.details)
        return None
    text = export(r, fmt, options)
    if path is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
        return None
    path = Path(path)
    try:
        path.write_text(text)
    except OSError as exc:
        raise AlloclabError(f"Cannot write the report to {path}: {exc.strerror}. Give a writable path "
                            f"with -o / --output.") from None
    return path


def check_format_option(value: str | None) -> str | None:
    """Typer callback for -f/--format: a bad format is refused before any run starts."""
    if value is not None:
        exporter(value)
    return None if value is None else canonical(value)
