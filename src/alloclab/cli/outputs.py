"""Where a command's output goes, checked before anything is measured: an experiment of an hour
must not end in a traceback because --export-json names a directory that does not exist.

In: the output options of a command. Out: nothing, or an AlloclabError naming the option, the
problem and the fix.
"""

from __future__ import annotations

import os
from pathlib import Path

from alloclab.errors import AlloclabError


def check_outputs(*, db: Path | None = None, report: str | None = None, report_file: Path | None = None,
                  **files: Path | None) -> None:
    """`files`: option name (export_json, output, ...) -> the file it writes, or None."""
    if db is not None:
        _check_file("--db", db, must_write=False)   # an existing database may be opened read-only
    if report_file is not None:
        _check_file("--output", report_file)
        if report is None:
            from alloclab.report import format_for   # the exporters load matplotlib: only when asked
            format_for(report_file)
    for name, path in files.items():
        if path is not None:
            _check_file("--" + name.replace("_", "-"), path)


def output_format(fmt: str | None, output: Path | None, allowed: tuple[str, ...] | None = None) -> str:
    """The format a command writes: -f where given, else the suffix of -o's file, else the terminal's.
    `allowed`: the formats the command has (diff: terminal, md, json); None: every report format."""
    from alloclab.report import FORMATS, format_for   # the exporters load matplotlib: only when asked

    allowed = allowed or tuple(FORMATS)
    chosen = fmt or (format_for(output) if output is not None else "terminal")
    if chosen not in allowed:
        how = f"-f {fmt}" if fmt else f"The file name {output}"
        raise AlloclabError(f"{how} asks for {chosen}, which this command does not write: it writes "
                            f"{', '.join(allowed)}. Give one of them with -f, or name the file .md, .json or .txt.")
    return chosen


def _check_file(option: str, path: Path, must_write: bool = True) -> None:
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise AlloclabError(f"{option} {path} is a directory, not a file: give a file name in it, "
                            f"e.g. {option} {path / _example(option)}.")
    if not parent.exists():
        raise AlloclabError(f"{option} {path}: the directory {parent} does not exist. Create it first "
                            f"(mkdir -p {parent}) or give a path in an existing directory.")
    if not parent.is_dir():
        raise AlloclabError(f"{option} {path}: {parent} is not a directory. Give a path in a directory.")
    if not must_write:
        return
    writable = os.access(path, os.W_OK) if path.exists() else os.access(parent, os.W_OK | os.X_OK)
    if not writable:
        raise AlloclabError(f"{option} {path}: {'the file' if path.exists() else 'the directory ' + str(parent)} "
                            f"is not writable by this user. Give a path where you can write.")


def _example(option: str) -> str:
    return {"--db": "alloclab.db", "--export-json": "results.json", "--export-markdown": "report.md", "--export-csv": "report.csv", "--output": "report.html"}.get(
        option, "report.txt")


def plain_text(draw) -> str:
    """What `draw(console)` prints, as plain text at unlimited width (a file, or a pipe): nothing cut."""
    import io

    from alloclab.report import file_console
    buf = io.StringIO()
    draw(file_console(buf))
    return buf.getvalue()


def emit(text: str, output: Path | None, what: str) -> None:
    """`text` to stdout, or to the -o file (then "WHAT written to FILE" on stderr)."""
    import typer

    from alloclab.cli.app import err
    if output is None:
        typer.echo(text, nl=False)
        return
    try:
        output.write_text(text)
    except OSError as exc:
        raise AlloclabError(f"Cannot write {output}: {exc.strerror}. Give a writable path with -o.") from None
    err.print(f"{what} written to {output}", highlight=False)
