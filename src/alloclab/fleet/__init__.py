"""Fleet runs: the same experiment on several hosts through Dask distributed, merged into one store.

Only `client`, `cluster` and `worker` import Dask; the rest (addresses, specs, merging, reports)
is plain data, so `alloclab report` and `alloclab diff` read fleet experiments without Dask
installed, and the single-machine path never imports it. See docs/fleet.md.
"""
