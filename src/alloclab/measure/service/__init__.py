"""Service mode. In: an experiment file's [service], its [[client]]s (or [[command]]s) and its
set-up and teardown steps. Out: one RunResult per run, of the server's whole process tree
(executors.py says how it is accounted)."""
