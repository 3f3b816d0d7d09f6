"""Where the CPU goes. In: a workload and its variants, each run sampled by `perf record`. Out: per
variant, the shares of CPU time in allocator code, in kernel memory management done for it and in
the rest (summary.ProfileSummary), stored with the experiment."""
