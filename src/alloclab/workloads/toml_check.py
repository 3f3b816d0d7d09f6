"""Line numbers and typed checks for a TOML text: the tools the experiment-file parser checks with.

In: a TOML file's text (and its parsed tables). Out: `KeyLocator`, the line of each key, and
`_Checker`, which checks a table's keys and values and builds an AlloclabError naming the file,
the line and the key, with the fix.
"""

from __future__ import annotations

import re
from pathlib import Path

from alloclab.errors import AlloclabError


# --- line numbers for keys ---------------------------------------------------------------------

_KEY_PART = r'(?:[A-Za-z0-9_-]+|"[^"]*"|\'[^\']*\')'
_HEADER = re.compile(rf"^\s*(\[\[|\[)\s*({_KEY_PART}(?:\s*\.\s*{_KEY_PART})*)\s*\]\]?")
_KEYLINE = re.compile(rf"^\s*({_KEY_PART}(?:\s*\.\s*{_KEY_PART})*)\s*=")


def _split_dotted(text: str) -> list[str]:
    parts = re.findall(_KEY_PART, text)
    return [p[1:-1] if p[:1] in "\"'" else p for p in parts]


class KeyLocator:
    """Where (1-based line) each table header and key of a TOML text is, by concrete path.

    Paths index arrays of tables like the parsed data does: ("client", 1, "metrics", 0, "name").
    Keys inside inline tables are found by searching forward from their nearest located parent.
    """

    def __init__(self, text: str):
        self.lines = text.splitlines()
        self.where: dict[tuple, int] = {}
        counters: dict[tuple, int] = {}
        latest: dict[tuple, int] = {}
        table: tuple = ()
        in_multiline = None
        for no, line in enumerate(self.lines, 1):
            if in_multiline:
                if line.count(in_multiline) % 2 == 1:
                    in_multiline = None
                continue
            m = _HEADER.match(line)
            if m and not _KEYLINE.match(line):
                names = _split_dotted(m.group(2))
                if m.group(1) == "[[":
                    parent = self._concrete(names[:-1], latest)
                    key = parent + (names[-1],)
                    idx = counters.get(key, 0)
                    counters[key] = idx + 1
                    latest[tuple(names)] = idx
                    table = key + (idx,)
                    self.where.setdefault(key, no)
                else:
                    table = self._concrete(names, latest)
                self.where.setdefault(table, no)
                continue
            m = _KEYLINE.match(line)
            if m:
                path = table + tuple(_split_dotted(m.group(1)))
                self.where.setdefault(path, no)
                rest = line[m.end():]
                for quote in ('"""', "'''"):
                    if rest.count(quote) % 2 == 1:
                        in_multiline = quote

    @staticmethod
    def _concrete(names: list[str], latest: dict[tuple, int]) -> tuple:
        path: list = []
        for i, n in enumerate(names):
            path.append(n)
            idx = latest.get(tuple(names[: i + 1]))
            if idx is not None:
                path.append(idx)
        return tuple(path)

    def line_of(self, path: tuple) -> int | None:
        if path in self.where:
            return self.where[path]
        # The nearest ancestor that has a line, then the key itself after it (inline tables).
        for cut in range(len(path) - 1, -1, -1):
            start = self.where.get(path[:cut])
            if start is None and cut:
                continue
            key = next((p for p in reversed(path) if isinstance(p, str)), None)
            if key is None:
                return start
            pattern = re.compile(rf"(^|[{{,\s]){re.escape(key)}\s*=")
            for no in range(start or 1, len(self.lines) + 1):
                if pattern.search(self.lines[no - 1]):
                    return no
            return start
        return None

    def line_of_text(self, needle: str) -> int | None:
        for no, line in enumerate(self.lines, 1):
            if needle in line:
                return no
        return None


# --- validation ---------------------------------------------------------------------------------

def _fmt_path(path: tuple) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else p)
    return out


class _Checker:
    def __init__(self, path: Path, text: str, locator: KeyLocator):
        self.path, self.text, self.loc = path, text, locator

    def error(self, where: tuple, message: str, fix: str, line: int | None = None) -> AlloclabError:
        line = line if line is not None else self.loc.line_of(where)
        place = f"{self.path}:{line}" if line else str(self.path)
        return AlloclabError(f"{place}: {message} {fix}")

    def table(self, data, where: tuple, allowed: dict[str, str], required: tuple[str, ...] = ()) -> dict:
        if not isinstance(data, dict):
            raise self.error(where, f"'{_fmt_path(where)}' must be a table.",
                             f"Write it as [{_fmt_path(where)}] or {{ key = value }}.")
        for key in data:
            if key not in allowed:
                known = ", ".join(f"{k} ({v})" for k, v in allowed.items())
                raise self.error(where + (key,), f"unknown key '{key}' in [{_fmt_path(where) or 'top level'}].",
                                 f"Known keys there: {known}. Fix the spelling or remove the key.")
        for key in required:
            if key not in data:
                raise self.error(where, f"[{_fmt_path(where)}] needs the key '{key}' ({allowed[key]}).",
                                 f"Add `{key} = ...` to it.")
        return data

    def typed(self, data: dict, key: str, where: tuple, kinds, what: str, default=None):
        if key not in data:
            return default
        value = data[key]
        ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in _as_tuple(kinds))
        if not ok:
            raise self.error(where + (key,), f"'{_fmt_path(where + (key,))}' must be {what} (got {value!r}).",
                             "Fix its value.")
        return value

    def number(self, data: dict, key: str, where: tuple, default: float | None, minimum: float = 0.0):
        value = self.typed(data, key, where, (int, float), "a number", default)
        if value is not None and value < minimum:
            raise self.error(where + (key,), f"'{_fmt_path(where + (key,))}' must be at least {minimum:g} "
                                             f"(got {value}).", "Fix its value.")
        return float(value) if value is not None else None

    def argv(self, value, where: tuple) -> tuple[str, ...]:
        if not isinstance(value, list) or not value or not all(isinstance(a, str) for a in value):
            raise self.error(where, f"'{_fmt_path(where)}' must be a non-empty list of strings, one per "
                                    f"argument (got {value!r}).",
                             'Write it like ["pgbench", "-c", "2"]: alloclab never runs commands through a shell.')
        return tuple(value)


def _as_tuple(kinds) -> tuple:
    return kinds if isinstance(kinds, tuple) else (kinds,)
