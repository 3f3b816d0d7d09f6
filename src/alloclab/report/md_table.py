"""A Markdown pipe table padded to line up in monospace: it reads as a table in a plain-text mail
as well as rendered. Shared by the full report, its short answer and diff."""

from __future__ import annotations


def _escape(text: str) -> str:
    return str(text).replace("|", "\\|")


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A pipe table whose columns line up in monospace; the first column left, the rest right."""
    cells = [[_escape(c) for c in header]] + [[_escape(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    fmt = lambda r: "| " + " | ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i])  # noqa: E731
                                      for i, c in enumerate(r)) + " |"
    rule = "|" + "|".join(("-" * (w + 2)) if i == 0 else ("-" * (w + 1) + ":") for i, w in enumerate(widths)) + "|"
    return [fmt(cells[0]), rule] + [fmt(r) for r in cells[1:]]
