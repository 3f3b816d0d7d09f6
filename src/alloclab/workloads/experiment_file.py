"""Experiment files: a server (or a command) under each allocator, described in TOML.

The file is validated completely before anything runs, and every problem is reported with
the file, the line and the key, so that a typo never costs a half-hour setup. tomllib gives
no line numbers, so `KeyLocator` finds a key's line by scanning the file's text.

Placeholders `{name}` in argv elements (and in [files] contents) are replaced by plain string
substitution, never through a shell: `{port}`, `{workdir}`, `{recipe_dir}`, `{data_dir}` and
every entry of [params]; `{{` and `}}` stand for literal braces.

In: a path or recipe:NAME. Out: an ExperimentFile (the data classes below), its placeholders
substituted on demand. Here: recipes, `resolve` and `load`; the records and placeholders are in
experiment_model; the TOML is read and checked in experiment_schema, with toml_check's KeyLocator
and checker.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from alloclab.errors import AlloclabError
from alloclab.workloads import experiment_schema
# The records and placeholders, as every caller has imported them from here.
from alloclab.workloads.experiment_model import (  # noqa: F401
    BUILTIN_PLACEHOLDERS, ExperimentFile, Load, MetricSpec, Phase, Requirement, Service, Step, Warmup,
    placeholders_in, substitute, substitute_argv)

RECIPE_PREFIX = "recipe:"


# --- recipes --------------------------------------------------------------------------------------

def recipes_dir() -> Path:
    return Path(str(resources.files("alloclab.workloads").joinpath("recipes")))


def recipe_names() -> list[str]:
    return sorted(p.stem for p in recipes_dir().glob("*.toml"))


def resolve(target: str) -> ExperimentFile:
    """`recipe:NAME` or a path to a TOML file."""
    if target.startswith(RECIPE_PREFIX):
        name = target[len(RECIPE_PREFIX):]
        path = recipes_dir() / f"{name}.toml"
        if not path.is_file():
            from alloclab.catalog.allocators import closest
            guess = closest(name, recipe_names())
            hint = f" Did you mean recipe:{guess}?" if guess else ""
            raise AlloclabError(f"No recipe named '{name}'.{hint} The recipes are: {', '.join(recipe_names())}. "
                                f"Run `alloclab recipes` to see them and what each needs installed.")
        ef = load(path)
        ef.recipe = name
        return ef
    path = Path(target)
    if not path.exists() and (recipes_dir() / f"{target}.toml").is_file():
        raise AlloclabError(f"No file named '{target}'; to run the recipe of that name write recipe:{target}.")
    return load(path)


def inspect_recipe(program: str) -> tuple[str, str | None] | None:
    """The recipe whose [inspect] names this program (an executable's file name), with its channel."""
    for name in recipe_names():
        try:
            ef = load(recipes_dir() / f"{name}.toml")
        except AlloclabError:
            continue
        if program in ef.inspect.get("programs", ()):
            return name, ef.inspect.get("channel")
    return None


def param_options(items: list[str]) -> dict[str, str]:
    """--param NAME=VALUE options as a dict (checked against the file by ExperimentFile.with_params)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise AlloclabError(f"Cannot read --param '{item}': write NAME=VALUE, e.g. --param scale=1.")
        out[key.strip()] = value.strip()
    return out


def load(path: str | Path) -> ExperimentFile:
    """Read and check the file at `path` (experiment_schema does the reading and checking)."""
    return experiment_schema.parse(path)
