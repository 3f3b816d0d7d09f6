"""Measure: run each job and record what the kernel and the program say about it.

In: jobs (a workload under a variant). Out: RunResults (times, rusage, sampled RSS, metrics)
written to the store, with the evidence that the allocator and its settings were in effect.
"""
