"""The source tree shows the data flow: one package per stage, imports only down the flow, small
modules. Read from the source files, so a violation names the file and line to fix."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "alloclab"
# The stages in the order data flows through them; a stage may import itself and earlier ones.
STAGES = ("catalog", "workloads", "plan", "store", "measure", "stats", "tune", "report", "fleet", "cli")
# Used by every stage: the error type, the default settings, the version.
SHARED = ("errors", "defaults", "__init__", "__version__")
LONG = 400
LONG_REASON = "Longer than 400 lines because"


def modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def stage_of(dotted: str) -> str | None:
    """The stage of `alloclab.X...`, or None for the shared top-level modules."""
    parts = dotted.split(".")
    if parts[0] != "alloclab" or len(parts) == 1:
        return None
    return None if parts[1] in SHARED else parts[1]


def imports(path: Path) -> list[tuple[int, str]]:
    """Every import of an alloclab module in the file: at the top, inside a function and under
    TYPE_CHECKING alike (an import made late or for annotations only hides a dependency; it does
    not remove it). `from alloclab.x import y` names alloclab.x.y where y is a module."""
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path.relative_to(SRC)}:{node.lineno}: relative import; write it absolute")
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("alloclab"):
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                found.append((node.lineno, sub if module_file(sub) else node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("alloclab")]
    return found


def module_file(dotted: str) -> Path | None:
    if "." not in dotted:
        return SRC / "__init__.py"
    rel = Path(*dotted.split(".")[1:])
    for candidate in (SRC / rel.with_suffix(".py"), SRC / rel / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def dotted(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(("alloclab",) + (parts[:-1] if parts[-1] == "__init__" else parts))


def test_the_top_level_holds_the_stages_and_nothing_else():
    entries = {p.stem for p in SRC.iterdir() if p.name != "__pycache__"}
    assert entries == set(STAGES) | {"errors", "defaults", "__init__"}, sorted(entries)
    for stage in STAGES:
        doc = ast.get_docstring(ast.parse((SRC / stage / "__init__.py").read_text()))
        assert doc and len(doc.splitlines()) >= 2, f"{stage}/__init__.py: say the stage's job (in, out)"


def test_no_stage_imports_a_later_one():
    wrong = []
    for path in modules():
        me = stage_of(dotted(path))
        for line, target in imports(path):
            them = stage_of(target)
            if me is None:
                if them is not None:
                    wrong.append(f"{path.relative_to(SRC)}:{line} (shared) imports {target}")
            elif them is not None and STAGES.index(them) > STAGES.index(me):
                wrong.append(f"{path.relative_to(SRC)}:{line} ({me}) imports {target} ({them}, a later stage)")
    assert not wrong, "\n".join(wrong)


def test_no_import_circles():
    """No files that import each other, directly or around a loop, counting every import."""
    graph = {dotted(p): {t for _, t in imports(p) if module_file(t) and t != dotted(p)} for p in modules()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(v: str) -> None:   # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not circles, "files that import each other: " + "; ".join(" <-> ".join(c) for c in circles)


def test_modules_are_small_or_say_why_not():
    long = []
    for path in modules():
        text = path.read_text()
        n = text.count("\n")
        if n > LONG and LONG_REASON not in (ast.get_docstring(ast.parse(text)) or ""):
            long.append(f"{path.relative_to(SRC)}: {n} lines")
    assert not long, "\n".join(long)


def test_the_checker_sees_a_violation():
    # The rules above are only worth something if they can fail: an import of a later stage,
    # as the parser reads it, is one.
    tree = ast.parse("from alloclab.stats.analysis import analyze\n")
    (node,) = tree.body
    assert STAGES.index(stage_of(node.module)) > STAGES.index("measure")
    assert stage_of("alloclab.errors") is None and stage_of("alloclab.catalog.variants") == "catalog"
