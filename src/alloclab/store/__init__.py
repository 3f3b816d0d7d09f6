"""Store: every experiment, run and measurement in one SQLite file.

In: runs as they finish (one commit each, WAL). Out: Experiments loaded for the statistics and
the reports; merged fleet sessions.
"""
