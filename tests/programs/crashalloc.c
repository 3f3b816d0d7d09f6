/* A real preloadable "allocator" that forwards to glibc and aborts after 100,000 mallocs:
 * stands for an allocator that crashes a workload. */
#include <stdlib.h>
extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
static unsigned long calls;
void *malloc(size_t n) { if (++calls > 100000) abort(); return __libc_malloc(n); }
void free(void *p) { __libc_free(p); }
void *calloc(size_t a, size_t b) { return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { return __libc_realloc(p, n); }
