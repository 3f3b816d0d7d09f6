"""alloclab: compare memory allocators and their tunings on real programs."""

import os as _os

__version__ = "0.1.0"

# numpy's and scipy's OpenBLAS each start a worker thread per core, and after a call those spin
# for a while before sleeping: on a 2-core machine, a core taken from the program measured next.
# alloclab's statistics need no parallel BLAS. putenv (not os.environ) so that the environments
# alloclab builds for the programs it measures, copied from os.environ, never carry the setting.
if "OPENBLAS_NUM_THREADS" not in _os.environ:
    _os.putenv("OPENBLAS_NUM_THREADS", "1")
