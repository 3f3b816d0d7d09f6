/* alloclab-glibc-forward: an LD_PRELOAD library that makes glibc's malloc serve the malloc
 * family of a program linked against another allocator (Debian's redis-server links
 * libjemalloc.so.2, so with nothing preloaded its "glibc" run is really jemalloc).
 *
 * A preloaded library comes before the program's DT_NEEDED libraries in symbol lookup, so
 * these definitions win over the linked allocator's; each forwards to glibc's own entry point
 * (__libc_malloc and friends), which no other library defines. Being in place from exec, no
 * pointer of the linked allocator's ever reaches glibc's free. What the program calls through
 * the linked allocator's own API (mallctl, mallocx, malloc_stats_print) still reaches it.
 *
 * cfree is left out: glibc keeps it only as a compat symbol (removed from the API in 2.26) and
 * the allocators alloclab knows do not define it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);

#define EXPORT __attribute__((visibility("default")))

EXPORT void *malloc(size_t n) { return __libc_malloc(n); }
EXPORT void free(void *p) { __libc_free(p); }
EXPORT void *calloc(size_t n, size_t size) { return __libc_calloc(n, size); }
EXPORT void *realloc(void *p, size_t n) { return __libc_realloc(p, n); }
EXPORT void *memalign(size_t align, size_t n) { return __libc_memalign(align, n); }
EXPORT void *valloc(size_t n) { return __libc_valloc(n); }
EXPORT void *pvalloc(size_t n) { return __libc_pvalloc(n); }

EXPORT void *reallocarray(void *p, size_t n, size_t size) {
    size_t bytes;
    /* __libc_reallocarray is GLIBC_PRIVATE: do its overflow check here. */
    if (__builtin_mul_overflow(n, size, &bytes)) { errno = ENOMEM; return NULL; }
    return __libc_realloc(p, bytes);
}

EXPORT int posix_memalign(void **out, size_t align, size_t n) {
    if (align % sizeof(void *) != 0 || (align & (align - 1)) != 0 || align == 0) return EINVAL;
    int saved = errno;
    void *p = __libc_memalign(align, n);
    if (!p) return ENOMEM;
    errno = saved;   /* posix_memalign reports through its result, never errno */
    *out = p;
    return 0;
}

EXPORT void *aligned_alloc(size_t align, size_t n) {
    /* glibc 2.38 refuses an alignment that is not a power of two; so do we, on any glibc. */
    if (align == 0 || (align & (align - 1)) != 0) { errno = EINVAL; return NULL; }
    return __libc_memalign(align, n);
}

/* glibc has no __libc_ alias for malloc_usable_size, and a plain reference would bind to our
 * own definition (or the linked allocator's): look it up in libc.so.6's own scope, once. */
typedef size_t (*usable_fn)(void *);
static usable_fn glibc_usable;

static usable_fn find_usable(void) {
    usable_fn fn = __atomic_load_n(&glibc_usable, __ATOMIC_ACQUIRE);
    if (fn) return fn;
    void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    if (libc) fn = (usable_fn)dlsym(libc, "malloc_usable_size");
    if (fn) __atomic_store_n(&glibc_usable, fn, __ATOMIC_RELEASE);
    return fn;
}

EXPORT size_t malloc_usable_size(void *p) {
    usable_fn fn = find_usable();
    return fn ? fn(p) : 0;
}

/* Resolved before main, while one thread runs, rather than at the first call. */
__attribute__((constructor)) static void forward_init(void) { find_usable(); }
