"""Plan: which runs, in which order, and when to look at them.

In: workloads x variants, sweep and ablation specs. Out: jobs in randomized interleaved blocks,
the variants a sweep expands to, and the sequential design (looks and their alpha).
"""
