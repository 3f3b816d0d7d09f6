/* What fingerprint.c and books.c share. Nothing here is exported from the interposer. */
#ifndef ALLOCLAB_BOOKS_H
#define ALLOCLAB_BOOKS_H

#include <stddef.h>
#include <stdint.h>

#define HIDDEN __attribute__((visibility("hidden")))

/* The allocator that serves malloc, found at start (books_resolve). */
enum { AS_UNRESOLVED = -1, AS_NONE, AS_GLIBC, AS_JEMALLOC, AS_TCMALLOC, AS_MIMALLOC };
extern HIDDEN int as_kind;
extern HIDDEN const char *const AS_NAME[];
extern HIDDEN int64_t as_allocated, as_held;   /* the two totals every series point carries */

#define BOOKS_MAX 32   /* figures read at a sample, generic and the allocator's own */

HIDDEN void books_resolve(void *next_malloc);     /* at start, in the program's first thread */
HIDDEN void books_init(uint64_t start_ns);        /* after books_resolve: the allocator's names */
HIDDEN void read_stats(void);                     /* as_allocated and as_held, at every sample */
HIDDEN int books_count(void);
HIDDEN const char *books_name(int i);
HIDDEN const char *books_source(void);
/* The books at this instant into out[0..books_count()); -1 where a figure is unknown. */
HIDDEN void books_read(int64_t *out, int64_t live, int64_t live_blocks);

/* Hooks on the interposer's paths (glibc: its thresholds, mapped chunks and arena heaps). */
HIDDEN void books_alloc_seen(void *p, size_t usable);
HIDDEN void books_free_seen(void *p, size_t usable, int frees);
HIDDEN void books_mallopt(int param, int value);
HIDDEN void books_stack_seen(void *addr, int own);
HIDDEN void books_after_fork_child(void);

#endif
