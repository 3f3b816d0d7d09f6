"""Command line: thin commands that wire the stages together (`alloclab --help`).

In: the user's arguments. Out: experiments run and stored, reports printed or written.
"""


def main() -> None:
    """The `alloclab` entry point (kept here so that importing the package stays cheap)."""
    import sys

    if _draws_a_page(sys.argv[1:]):
        from alloclab.report import pen
        pen.start_early()   # the page's drawer imports matplotlib while the CLI starts (report/pen.py)
    from alloclab.cli.core import main as run
    run()


def _draws_a_page(argv: list[str]) -> bool:
    """`alloclab report ... -f html` (--format html, --format=html, or -o FILE.html without -f), read before the command line is
    parsed: the drawer then starts with the interpreter, 0.2 s before the command would start it. A
    miss costs only that head start (report() starts it too); a wrong guess, a process stopped at exit."""
    if not argv or argv[0] != "report":
        return False
    pairs = list(zip(argv[1:], argv[2:]))
    if any(a in ("-f", "--format") for a, _ in pairs) or any(a.startswith(("--format=", "-f")) for a in argv[1:]):
        return any(a in ("-f", "--format") and b == "html" for a, b in pairs) or \
            any(a in ("--format=html", "-fhtml") for a in argv[1:])
    # No format given: -o's suffix names it.
    return any(a in ("-o", "--output") and b.lower().endswith((".html", ".htm")) for a, b in pairs) or \
        any(a.startswith("--output=") and a.lower().endswith((".html", ".htm")) for a in argv[1:])
