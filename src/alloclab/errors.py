"""One exception type for every problem the user can fix.

Its message is a single paragraph that names the problem and the fix; the CLI prints it
without a traceback and exits 2.
"""


class AlloclabError(Exception):
    """A problem with the user's input or machine that they can act on."""

    exit_code = 2


class Interrupted(AlloclabError):
    """The user pressed Ctrl-C (or we got SIGTERM); partial results are kept."""

    exit_code = 130
