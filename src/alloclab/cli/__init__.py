"""Command line: thin commands that wire the stages together (`alloclab --help`).

In: the user's arguments. Out: experiments run and stored, reports printed or written.
"""


def main() -> None:
    """The `alloclab` entry point (kept here so that importing the package stays cheap)."""
    from alloclab.cli.core import main as run
    run()
