"""alloclab: compare memory allocators and their tunings on real programs."""

__version__ = "0.1.0"
