"""The note that names the allocator which really served malloc when it is not the variant's own.

Verification writes it among a variant's notes (stored as text, like every note); the reports
read it back to say, in their first line, what an ineffective baseline's comparisons are
against. One module owns the wording so that the two sides cannot drift apart."""

from __future__ import annotations

import re

PREFIX = "in use instead: "
_NOTE = re.compile(r"^in use instead: (?P<allocator>\S+) \((?P<why>.*)\)$")


def note(allocator: str, why: str) -> str:
    """e.g. note("jemalloc", "redis-server links libjemalloc.so.2")."""
    return f"{PREFIX}{allocator} ({why})"


def parse(notes: list[str]) -> tuple[str, str] | None:
    """(allocator, why) from the first such note, or None."""
    for text in notes:
        m = _NOTE.match(text)
        if m:
            return m.group("allocator"), m.group("why")
    return None
