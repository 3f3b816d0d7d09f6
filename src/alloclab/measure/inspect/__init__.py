"""`alloclab inspect PID`: where a running process's memory goes, read from outside, without a
restart and without running code in it.

In: a process id. Out: a Snapshot (store/inspect_model.py): its anonymous RSS split into the
fingerprint's parts (measure/fingerprint_books.py's PARTS), read from glibc's heaps (walked through
/proc/PID/mem, residency from /proc/PID/pagemap), from a program's own channel (redis' MEMORY
MALLOC-STATS, PostgreSQL's memory contexts), or, without either, from smaps alone.

  procfs      /proc/PID/{smaps,smaps_rollup,status,task,cmdline,environ}
  refusals    the one-paragraph errors: no such process, not permitted, gone, static, musl, layout
  ptrace      stopping every thread briefly (PTRACE_SEIZE + PTRACE_INTERRUPT), detaching on every path
  memory      reading its memory in bounded slices, pagemap residency, never a swapped page
  libc        which libc serves it, its version and layout, its debug symbols
  arena       main_arena and mp_ (symbols, else content), arenas, heaps, fastbins, tcaches
  walk        the heaps chunk by chunk (numpy over runs of equal chunks)
  regions     whose each mapping is: the allocator's, stacks, libraries, the program's own
  glibc       the walk's figures and split
  channels    jemalloc's malloc_stats_print text (redis) and PostgreSQL's memory contexts
  snapshot    one inspection, start to Snapshot
"""
