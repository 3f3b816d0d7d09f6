"""What `alloclab tune` is given, before tune/ runs it: a recipe, an experiment file or a program,
and the workloads it becomes.

Whatever follows a program's name is the program's (no `--` needed, as in compare); whatever
follows a recipe or an experiment file is tune's own options, as `run recipe:NAME --db x.db` reads:
the file is moved behind them before click parses.
"""

from __future__ import annotations

from typer.core import TyperCommand

from alloclab import defaults
from alloclab.errors import AlloclabError


def is_file(arg: str) -> bool:
    return arg.startswith("recipe:") or arg.endswith(".toml")


class TuneCommand(TyperCommand):
    def parse_args(self, ctx, args: list[str]) -> list[str]:
        valued = {name for p in self.params if p.param_type_name == "option" and not p.is_flag and not p.count
                  for name in p.opts}
        i = 0
        while i < len(args) and args[i] != "--":
            if args[i].startswith("-"):
                i += 2 if args[i] in valued else 1
                continue
            if is_file(args[i]) and i + 1 < len(args):
                args = [*args[:i], *_options_after(args[i], args[i + 1:], valued), args[i]]
            break
        return super().parse_args(ctx, args)


def _options_after(target: str, rest: list[str], valued: set[str]) -> list[str]:
    """What follows a recipe or a file, checked to be tune's options with their values."""
    j = 0
    while j < len(rest):
        if rest[j] == "--" or not rest[j].startswith("-"):
            raise AlloclabError(f"{target} is a recipe or an experiment file, which names its own commands: what "
                                f"follows it must be tune's options, and {rest[j]!r} is not one. To tune a program "
                                f"instead: alloclab tune [OPTIONS] -- CMD [ARGS]...")
        if rest[j] in valued and j + 1 == len(rest):
            raise AlloclabError(f"{rest[j]} needs a value (it ends the command line, after {target}).")
        j += 2 if rest[j] in valued else 1
    return rest


def workloads_of(target: list[str], metric: list[str], shell: bool, param: list[str], client: list[str], note):
    """(workloads, their clean-up, their defaults, a title, a file's own variants) of tune's target: a file's (its session
    torn down after), or the command's (measure/targets.py's workloads_for)."""
    from alloclab.measure.targets import CommandTarget, FileTarget, workloads_for

    if len(target) == 1 and is_file(target[0]):
        built = workloads_for(FileTarget(target[0], param, client=client), note=note)
    else:
        if param or client:
            raise AlloclabError(f"tune takes {'--param' if param else '--client'} for an experiment file only; write "
                                f"the command's arguments as they should run.")
        built = workloads_for(CommandTarget(target, metric=metric, shell=shell), base=defaults.TUNE, note=note)
    return built.workloads, built.cleanup, built.defaults, built.title, built.question
