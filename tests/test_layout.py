"""The source tree shows the data flow: one package per stage, imports only down the flow, small
modules. Read from the source files, so a violation names the file and line to fix."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "alloclab"
# The stages in the order data flows through them; a stage may import itself and earlier ones.
STAGES = ("catalog", "workloads", "plan", "measure", "store", "stats", "tune", "report", "fleet", "cli")
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


def _type_checking_only(node: ast.AST, parents: dict) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path.relative_to(SRC)}:{node.lineno}: relative import; write it absolute")
        if _type_checking_only(node, parents):
            continue   # annotations only: no import at run time
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("alloclab"):
            if node.module == "alloclab":
                found += [(node.lineno, f"alloclab.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("alloclab")]
    return found


def test_the_top_level_holds_the_stages_and_nothing_else():
    entries = {p.stem for p in SRC.iterdir() if p.name != "__pycache__"}
    assert entries == set(STAGES) | {"errors", "defaults", "__init__"}, sorted(entries)
    for stage in STAGES:
        doc = ast.get_docstring(ast.parse((SRC / stage / "__init__.py").read_text()))
        assert doc and len(doc.splitlines()) >= 2, f"{stage}/__init__.py: say the stage's job (in, out)"


def test_no_stage_imports_a_later_one():
    wrong = []
    for path in modules():
        me = stage_of("alloclab." + ".".join(path.relative_to(SRC).with_suffix("").parts))
        for line, target in imports(path):
            them = stage_of(target)
            if me is None:
                if them is not None:
                    wrong.append(f"{path.relative_to(SRC)}:{line} (shared) imports {target}")
            elif them is not None and STAGES.index(them) > STAGES.index(me):
                wrong.append(f"{path.relative_to(SRC)}:{line} ({me}) imports {target} ({them}, a later stage)")
    assert not wrong, "\n".join(wrong)


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
