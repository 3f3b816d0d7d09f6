"""The source tree shows the data flow: one package per stage, imports only down the flow, small
modules, and the statistics computed once, in stats, for reports and commands that only render
them. Read from the source files, so a violation names the file and line to fix."""

from __future__ import annotations

import ast
import re
import functools
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "alloclab"
# The stages in the order data flows through them; a stage may import itself and earlier ones.
STAGES = ("catalog", "workloads", "plan", "store", "measure", "stats", "tune", "report", "fleet", "cli")
# Used by every stage: the error type, the default settings, the cache folder, the version.
SHARED = ("errors", "defaults", "cache", "__init__", "__version__")
LONG = 400
LONG_REASON = "Longer than 400 lines because"
# report/ renders the Results that stats/results.py builds once, and cli/ prints them and gates on
# them: neither computes a statistic. From stats they name types and constants; what they may call
# of it (or hand on to be called) is here, with the stages allowed and why.
RENDERERS = ("report", "cli")
SANCTIONED = {
    "alloclab.stats.results.build_results": ("cli",),   # the one way to the Results
    "alloclab.stats.results_cache.results": ("cli",),   # the same, kept for the experiment's next report
    "alloclab.stats.results_cache.keep": ("cli",),
    "alloclab.stats.diff.diff_experiments": ("cli",),   # the one way to a Diff of two experiments
    # The runner's judge at the looks: measuring cannot import the statistics, so the command hands it in.
    "alloclab.stats.looks.Judge": ("cli",),
    # The words of a comparison and of a p value: stats and tune write them into their own sentences,
    # so they live below both and every view says a comparison the same way.
    "alloclab.stats.estimates.format_comparison": RENDERERS,
    "alloclab.stats.estimates.format_p": RENDERERS,
    # The words of a program that fails under the default: compare's recommendation (stats) and tune's
    # stop (report) say it alike.
    "alloclab.stats.failing.default_fails_text": ("report",),
}


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


def _chain(node: ast.AST) -> str | None:
    """`a.b.c` of a name or an attribute chain; None for anything else (a call's result, a subscript)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _chain(node.value)
        return base and f"{base}.{node.attr}"
    return None


@functools.lru_cache(maxsize=None)
def _parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def kind_of(target: str) -> str | None:
    """What the dotted `target` names in the source: "function" (a method too), "class", or None
    (a module, a constant, or nothing found)."""
    parts = target.split(".")
    for cut in range(len(parts), 0, -1):
        path = module_file(".".join(parts[:cut]))
        if path:
            break
    else:
        return None
    kind, body = None, _parsed(path).body
    for name in parts[cut:]:
        node = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and n.name == name), None)
        if node is None:
            return None
        kind, body = ("class", node.body) if isinstance(node, ast.ClassDef) else ("function", [])
    return kind


def stats_calls(source: str) -> list[tuple[int, str]]:
    """Every call of something imported from alloclab.stats, and every stats function handed on
    uncalled (a key=, a callback), as (line, dotted name): the names an import binds, at the top or
    inside a function alike, followed through attributes (`estimates.format_p`)."""
    tree = ast.parse(source)
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("alloclab"):
            bound |= {a.asname or a.name: f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            bound |= {a.asname or a.name.split(".")[0]: a.name if a.asname else a.name.split(".")[0]
                      for a in node.names if a.name.startswith("alloclab")}

    def target(node: ast.AST) -> str | None:
        chain = _chain(node)
        if chain is None or chain.split(".")[0] not in bound:
            return None
        head, _, rest = chain.partition(".")
        full = bound[head] + (f".{rest}" if rest else "")
        return full if stage_of(full) == "stats" else None

    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (t := target(node.func)):
            found.append((node.lineno, t))
        elif isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load) \
                and not isinstance(parents.get(node), ast.Attribute) \
                and not (isinstance(parents.get(node), ast.Call) and parents[node].func is node) \
                and (t := target(node)) and kind_of(t) == "function":
            found.append((node.lineno, t))
    return sorted(found)


def dotted(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(("alloclab",) + (parts[:-1] if parts[-1] == "__init__" else parts))


def test_the_top_level_holds_the_stages_and_nothing_else():
    entries = {p.stem for p in SRC.iterdir() if p.name != "__pycache__"}
    assert entries == set(STAGES) | {"errors", "defaults", "cache", "__init__"}, sorted(entries)
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


def test_reports_and_commands_compute_no_statistic():
    """report/ and cli/ get the Results (stats/results.py), computed once, and call nothing of
    stats but what SANCTIONED names: no analyze, recommend, sweep curve or geomean of their own."""
    wrong = []
    for path in modules():
        me = stage_of(dotted(path))
        if me not in RENDERERS:
            continue
        for line, called in stats_calls(path.read_text()):
            if me not in SANCTIONED.get(called, ()):
                wrong.append(f"{path.relative_to(SRC)}:{line} ({me}) calls {called}: read it from the Results "
                             f"(stats/results.py) instead")
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
    # A renderer's call of a statistic, however it is imported or handed on, is seen; its types are not.
    source = """
from alloclab.stats import estimates as est
from alloclab.stats.analysis import Analysis, analyze
import alloclab.stats.recommend

def show(a: Analysis, e) -> None:
    from alloclab.stats.sweep import sweep_results as curves
    analyze(e)
    alloclab.stats.recommend.recommend(a)
    est.format_p(0.5)
    sorted(a.labels, key=curves)
    isinstance(a, Analysis)
"""
    assert stats_calls(source) == [(8, "alloclab.stats.analysis.analyze"),
                                   (9, "alloclab.stats.recommend.recommend"),
                                   (10, "alloclab.stats.estimates.format_p"),
                                   (11, "alloclab.stats.sweep.sweep_results")]
    assert kind_of("alloclab.stats.results.Results") == "class" and kind_of("alloclab.stats.results") is None


# One of each (tune's flow reads them, and so do the reports): a second definition is where the two
# start to disagree.
ONE_OF_EACH = [
    # the memory metrics' names and the pattern of a phase's RSS
    (r'^\w+\s*=\s*"(peak_rss_mb|end_anon_mb)"|re\.compile\(r?"\^?rss_after_', "workloads/metrics.py"),
    # a variant's comparison against the baseline, read out of a row's cells
    (r"\.cells\[[^]]+\]\.comparison", "stats/analysis.py"),
    # the allocator's share of a profile's samples, which bounds what an allocator could change
    (r'shares\.get\("allocator"[^)]*\)\s*\+\s*\w*\.?shares\.get\("kernel_mm"', "tune/bound.py"),
]


@pytest.mark.parametrize("pattern, home", ONE_OF_EACH)
def test_one_definition_of_each(pattern, home):
    found = [f"{p.relative_to(SRC)}:{i}" for p in modules() for i, line in enumerate(p.read_text().splitlines(), 1)
             if re.search(pattern, line)]
    assert found and all(f.startswith(home + ":") for f in found), found


# One of each, found in the syntax tree rather than the text (a docstring may quote a formula):
# where each is written, and a finder that sees it however it is spelled.

def _share_bound_formulas(tree: ast.AST) -> list[int]:
    """`1 / (1 - share)`: the rise of a rate that spent `share` of its CPU where an allocator acts."""
    def one(node) -> bool:
        return isinstance(node, ast.Constant) and node.value in (1, 1.0)
    return [n.lineno for n in ast.walk(tree)
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div) and one(n.left)
            and isinstance(n.right, ast.BinOp) and isinstance(n.right.op, ast.Sub) and one(n.right.left)]


# The functions that build workloads from a target's parts; `workloads` counts as one only as an
# attribute of measure/service's executors module.
WORKLOAD_BUILDERS = {"command_workloads", "builtin_workloads", "command_workload"}
BUILDERS_HOME = {"plan/param_sweep.py", "workloads/command.py", "measure/service/executors.py"}


def _workload_builds(tree: ast.AST) -> list[int]:
    """Calls of a workload builder: what only the one target-to-workloads function may make."""
    found = []
    for n in ast.walk(tree):
        if not isinstance(n, ast.Call):
            continue
        f = n.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
        executors = isinstance(f, ast.Attribute) and f.attr == "workloads" and "executors" in (_chain(f.value) or "")
        if name in WORKLOAD_BUILDERS or executors:
            found.append(n.lineno)
    return found


ONE_IN_THE_TREE = [
    # the most an allocator could change a metric, from the CPU share it was given
    (_share_bound_formulas, "tune/bound.py", set()),
    # a target (a command, the built-in workloads, a file or recipe) turned into workloads
    (_workload_builds, "measure/targets.py", BUILDERS_HOME),
]


@pytest.mark.parametrize("finder, home, also", ONE_IN_THE_TREE, ids=["share-bound", "target-to-workloads"])
def test_one_of_each_in_the_tree(finder, home, also):
    found = [f"{p.relative_to(SRC)}:{line}" for p in modules() if str(p.relative_to(SRC)) not in also
             for line in finder(_parsed(p))]
    assert found and all(f.startswith(home + ":") for f in found), (
        f"written outside {home} (call the one there instead): " + ", ".join(f for f in found if not f.startswith(home)))


def test_the_tree_finders_see_a_second_definition():
    # Each finder must see its thing however it is spelled, or the test above could never fail.
    assert _share_bound_formulas(ast.parse("x = 1 / (1 - top)\ny = 1.0/(1-s) - 1\nz = 1 / (2 - s)\n")) == [1, 2]
    source = """
from alloclab.plan import param_sweep
from alloclab.measure.service import executors as service_executors
def mine(t):
    param_sweep.command_workloads(t.command, p, [], False)
    builtin_workloads(t.names, p, True)
    service_executors.workloads(ef, {})
    store.workloads()
"""
    assert _workload_builds(ast.parse(source)) == [5, 6, 7]
