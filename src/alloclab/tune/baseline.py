"""What the program runs with nothing preloaded: the baseline tune races every candidate against.

A program linked to jemalloc, tcmalloc or mimalloc (DT_NEEDED, transitively) runs that allocator, so
that allocator, as linked, is the default: its books are read, its rules fire (freed pages held at
rest, fixed by its decay), and glibc races as a candidate, through the forwarding preload
(measure/forward.py). The baseline preloads the very library the program links (the same object,
found first): verification proves it serves malloc, as for any variant. A program that bundles an
allocator under prefixed names (je_malloc, the Rust mimalloc crate's mi_*) keeps it whatever is
preloaded, so no preload races: where the catalog knows the bundled copy (catalog/allocators.toml's
`bundled` entries), the baseline is that copy as built and its own settings, under the names its
version reads, are the candidates; where it does not, nothing can act and tune says so before it
runs anything (a race of preloads that cannot act spent three minutes answering "keep the default").

In: the workloads and the catalog. Out: a Baseline (the variant, the allocator whose readings are
the default's, and what the answer's first line says), and the plain variants the diagnosis runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from alloclab.catalog import allocators as cat
from alloclab.errors import AlloclabError

SYSTEM, LINKED, BUNDLED = "system", "linked", "bundled"


@dataclass(frozen=True)
class Baseline:
    variant: object            # catalog.variants.Variant: what the default's cells run
    reads: str                 # the allocator whose fingerprint is the default's (tune_rules' `reads`)
    how: str = SYSTEM          # system | linked | bundled
    program: str = ""          # as the user named it
    version: str = ""
    library: str = ""          # linked: the soname; bundled: the prefixed symbols found
    via: str = ""              # linked: through this library ("" where the executable needs it); bundled:
                               # the allocator bundled

    def record(self) -> dict:
        """As TuneRecord stores it (report/ words it). A bundled copy whose settings race says which."""
        out = {"fact": "baseline", "how": self.how, "allocator": self.reads, "version": self.version,
               "program": self.program, "library": self.library, "via": self.via, "label": self.variant.label}
        if self.how == BUNDLED and self.variant.allocator is not None and self.variant.allocator.bundled:
            out["settings"] = _setting_names(self.variant.allocator)
        return out


def _program(workloads: list) -> Path | None:
    try:
        return workloads[0].program() if workloads else None
    except (AlloclabError, OSError):
        return None


def baseline_of(workloads: list, catalog: cat.Catalog | None = None) -> Baseline:
    """The default of the first workload's program (a file's commands share theirs in practice; a
    recipe's server is its program)."""
    from alloclab.catalog.elf import elf_facts
    from alloclab.catalog.variants import parse_variant
    from alloclab.measure.forward import linked_allocator
    from alloclab.measure.verify import shown_name
    from alloclab.workloads.command import real_executable

    catalog = catalog or cat.load_catalog()
    system = parse_variant(cat.BASELINE, catalog)
    program = _program(workloads)
    if program is None:
        return Baseline(system, cat.BASELINE)
    # As the user named it: redis-server, not the redis-check-rdb its link resolves to.
    named = Path(workloads[0].argv[0]).name if getattr(workloads[0], "argv", None) else None
    linked = linked_allocator(program, catalog)
    if linked is not None:
        a = linked.allocator
        installed = cat.locate(a)
        same = installed is not None and Path(installed).resolve() == linked.path
        # The same object the program links, preloaded: found first, and proved by verification.
        spec = f"{a.name}@{a.name} (linked)" if same else f"{linked.path}@{a.name} (linked)"
        return Baseline(parse_variant(spec, catalog), a.name, LINKED, named or linked.name,
                        cat.version_of(a, linked.path), linked.soname, linked.via or "")
    exe = real_executable(program)
    facts = elf_facts(exe)
    form = cat.bundled_form(facts, catalog)
    if form is not None:
        found = sorted(set(form.bundled_symbols) & facts.defined)
        version = _started_version(form, workloads[0]) or cat.bundled_version(form, exe)
        return Baseline(parse_variant(f"{form.name}@{form.bundled} (bundled)", catalog), form.name, BUNDLED,
                        named or shown_name(program, exe), version, ", ".join(found), form.bundled)
    for a in catalog.allocators.values():
        bundled = sorted(set(a.prefixed_symbols) & facts.defined)
        if bundled:
            return Baseline(system, cat.BASELINE, BUNDLED, named or shown_name(program, exe), "",
                            ", ".join(bundled), a.name)
    return Baseline(system, cat.BASELINE, SYSTEM, named or shown_name(program, exe))


def _started_version(form, workload) -> str:
    """The version the bundled copy prints as it starts, where the workload is a command to run as
    given (the program the race runs anyway); its bytes carry only the names of its options."""
    import os

    from alloclab.measure.readback import started_version

    argv = getattr(workload, "argv", None)
    if not argv or not form.started_version:
        return ""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    return started_version(form, list(argv), env)


def plain_variants(names: tuple[str, ...], baseline: Baseline) -> list:
    """The baseline first, then each installed allocator tune races plainly (`names` restricts them):
    not the one the baseline already runs."""
    from alloclab.catalog.variants import installed_variants, parse_variant

    catalog = cat.load_catalog()
    if baseline.how == BUNDLED:
        return [baseline.variant] if _reached(baseline, catalog) else _unreachable(baseline)
    if not names:
        others = [v for v in installed_variants(catalog) if v.allocator is None or v.allocator.race_in_tune]
    else:
        for n in names:
            if ":" in n or "@" in n:
                raise AlloclabError(f"tune's -a names allocators to consider ({', '.join(catalog.allocators)}), "
                                    f"not variants with settings: {n}. tune proposes the settings itself; race "
                                    f"your own with `alloclab compare -a ...`.")
            if n not in catalog.allocators:
                parse_variant(n, catalog)   # an unknown name is refused here, with the names compare lists
                raise AlloclabError(f"tune's -a names allocators of the catalog ({', '.join(catalog.allocators)}), "
                                    f"whose settings its rules know; {n} is a library of your own: race it with "
                                    f"`alloclab compare -a {n} ...`.")
        # glibc always races: the default, or, beside a linked allocator, the candidate it is.
        others = [parse_variant(n, catalog) for n in [cat.BASELINE] + [n for n in names if n != cat.BASELINE]]
    base = baseline.variant
    same = lambda v: v.spec == base.spec.split("@")[0] or (v.library is not None and v.library == base.library)
    return [base] + [v for v in others if not same(v)]


def _setting_names(form: cat.Allocator) -> list[str]:
    """The variables a bundled copy reads, under its own names (_RJEM_MALLOC_CONF, MIMALLOC_PURGE_DELAY)."""
    renamed = dict(form.env_names)
    names = list(dict.fromkeys(renamed.get(t.via, t.via) if t.via else t.name for t in form.tunables))
    # Variables of one of its families (its env_prefixes) read as that family: MIMALLOC_*.
    family = next((p for p in form.env_prefixes if p.endswith("_") and len(names) > 1
                   and all(n.startswith(p) for n in names)), "")
    return [family + "*"] if family else names


def _reached(baseline: Baseline, catalog: cat.Catalog) -> bool:
    a = baseline.variant.allocator
    return a is not None and bool(a.bundled) and any(r.reads == a.name for r in _rules())


def _rules():
    from alloclab.catalog.tune_rules import load_rules
    return load_rules()


def _unreachable(baseline: Baseline):
    """Nothing can act on a bundled copy the catalog does not know: said before anything runs, rather
    than a race of preloads that all run the same allocator."""
    raise AlloclabError(
        f"{baseline.program} bundles its own {baseline.via} under prefixed names ({baseline.library}): no preload "
        f"replaces it, and alloclab knows no setting that this copy reads, so every variant tune could race would "
        f"run the same allocator. Nothing was run. Link the program against the shared {baseline.via} (or build it "
        f"without its bundled copy) to compare allocators.")
