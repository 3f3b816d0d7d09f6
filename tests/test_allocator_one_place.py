"""Each allocator is known in one place: outside catalog/, no code (.py, .c, .h: the workloads' and
recipes' TOML are data, variants written as a user writes them) names an allocator's environment,
libraries or functions. A prefix missed in one module quietly breaks "the allocator is the only
variable" (a run inherits MALLOC_CONF, say), so the catalog's own entries are grepped for in src/:
every environment prefix and variable, soname and entry point (release and statistics calls,
prefixed and bundled symbols, the books' function). Excepted, as docs/architecture.md says: the
recipes and the C workloads (programs, not alloclab), comments and docstrings (prose), and the books
readers the catalog registers ([readers]), the code that talks to one interface in its own terms."""

from __future__ import annotations

import io
import re
import tokenize
import tomllib
from importlib import resources
from pathlib import Path

from alloclab.catalog.allocators import load_catalog

SRC = Path(__file__).resolve().parent.parent / "src" / "alloclab"
EXCEPTED_DIRS = ("catalog", "workloads/recipes", "workloads/c")


def readers() -> dict[str, str]:
    data = tomllib.loads(resources.files("alloclab.catalog").joinpath("allocators.toml").read_text())
    return data["readers"]


def catalog_terms() -> set[str]:
    terms: set[str] = set()
    for a in load_catalog().allocators.values():
        terms |= set(a.env_prefixes) | {new for _, new in a.env_names} | {k for k, _ in a.verbose_env}
        terms |= {t.via for t in a.tunables if t.via}
        for lib in (*a.libraries, a.version_library):
            if lib:
                terms |= {lib, lib.split(".so")[0]}
        for call in (a.release_call, a.stats_call):
            terms |= set(re.findall(r"([A-Za-z_]\w*)\(", call))
        terms |= set(a.prefixed_symbols) | set(a.bundled_symbols)
        if a.books is not None and a.books.entry:
            terms.add(a.books.entry)
    # A family of entry points or of a copy's variables, beside its members (MallocExtension_, _RJEM_).
    terms |= {m.group(0) for t in list(terms) if (m := re.match(r"_?[A-Z][A-Za-z]*[a-z][A-Za-z]*_|_[A-Z]+_", t))}
    return terms


def code_of(path: Path) -> str:
    """The file's code without its prose: Python's comments and docstrings, C's comments."""
    text = path.read_text(errors="replace")
    if path.suffix in (".c", ".h"):
        return re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.S)
    out, prev = [], tokenize.INDENT
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            continue
        # A string standing alone as a statement is a docstring.
        if tok.type == tokenize.STRING and prev in (tokenize.INDENT, tokenize.DEDENT, tokenize.NEWLINE, tokenize.NL):
            continue
        if tok.type not in (tokenize.NL, tokenize.COMMENT):
            prev = tok.type
        out.append(tok.string)
    return " ".join(out)


def scanned_files() -> list[Path]:
    skip = set(readers())
    return [p for p in sorted(SRC.rglob("*")) if p.suffix in (".py", ".c", ".h")
            and not any(p.relative_to(SRC).as_posix().startswith(d + "/") for d in EXCEPTED_DIRS)
            and p.relative_to(SRC).as_posix() not in skip]


def test_the_catalog_names_what_the_issue_lists():
    terms = catalog_terms()
    assert {"MIMALLOC_", "_RJEM_", "mallctl", "MallocExtension_", "mi_process_info", "TCMALLOC_", "MALLOC_CONF",
            "libjemalloc", "libtcmalloc", "libmimalloc", "libtbbmalloc_proxy", "TBB_MALLOC_"} <= terms


def test_every_registered_reader_exists():
    for rel, why in readers().items():
        assert (SRC / rel).is_file(), rel
        assert why.strip(), rel


def test_no_code_outside_the_catalog_names_an_allocator():
    terms = sorted(catalog_terms(), key=len, reverse=True)
    pattern = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(map(re.escape, terms)) + r")")
    found = []
    for path in scanned_files():
        for n, line in enumerate(code_of(path).splitlines(), 1):
            found += [f"{path.relative_to(SRC)}: {m.group(1)} in {line.strip()[:120]!r}" for m in pattern.finditer(line)]
    assert not found, "\n".join(found)


def _c_strings(rel: str) -> set[str]:
    return set(re.findall(r'"((?:[^"\\\n]|\\.)*)"', code_of(SRC / rel)))


def test_the_readers_answer_to_the_catalogs_names():
    """The readers are code, so the names they share with the catalog are checked against it: an
    interface renamed in the catalog and not in its reader would otherwise lose its split quietly."""
    from alloclab.measure.fingerprint_books import SPLITS
    catalog = load_catalog()
    interposer = _c_strings("measure/launcher/books.c")
    probe = _c_strings("measure/launcher/readback.c")
    for a in catalog.allocators.values():
        b = a.books
        if b is not None:
            assert b.interface in interposer and b.interface in SPLITS, (a.name, b.interface)
            # The interposer is built with each interface's function and sampled words (catalog.c_defines).
            key = re.sub(r"\W", "_", b.interface).upper()
            for macro in (f"BOOKS_{key}_ENTRY", f"BOOKS_{key}_SAMPLED"):
                assert re.search(rf"\b{macro}\b", code_of(SRC / "measure/launcher/books.c")), (a.name, macro)
            assert f'-D{macro}="{b.sampled_as}"' in catalog.c_defines()
            if b.roles:
                assert f"ALLOCLAB_FP_BOOKS_{b.interface.upper()}" in interposer, (a.name, b.interface)
        if a.readback == "probe":
            for t in a.tunables:
                for read in t.read:
                    assert read.split(":", 1)[0] in probe, (a.name, t.name, read)
