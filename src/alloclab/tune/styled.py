"""A line tune/ shows with styles of its own (the CLI renders it, tests read its text). It imports
nothing of alloclab's: the CLI's start, `alloclab --help` included, loads it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Line:
    """A line tune/ shows with styles of its own: each style is a field beside its text, never a tag
    in it, so that no text of a line (the user's command, a workload's name, `x=[bytearray(9)]`) is
    ever read as markup. `parts`: (text, style) in reading order, "" for unstyled."""

    parts: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, text: str, style: str) -> Line:
        return cls(((text, style),))

    @property
    def plain(self) -> str:
        return "".join(text for text, _ in self.parts)

    def __str__(self) -> str:
        return self.plain
