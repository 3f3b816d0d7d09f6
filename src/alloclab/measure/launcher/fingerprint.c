/* alloclab-fingerprint: an LD_PRELOAD interposer, placed BEFORE the allocator in LD_PRELOAD, that
 * counts what the program asks of the allocator and forwards every call to the next definition
 * (the preloaded allocator, or glibc's) found with dlsym(RTLD_NEXT).
 *
 * What it counts, per process (alloclab merges the processes of a tree):
 *   - calls of malloc, calloc, realloc, free (and free(NULL)), memalign, posix_memalign,
 *     aligned_alloc, valloc/pvalloc, reallocarray, C++ operator new/delete (plain, array, sized,
 *     nothrow; a new that reaches malloc, as libstdc++'s does, is counted once, as new);
 *   - a power-of-two histogram of the requested sizes (calls and bytes per class: class k holds
 *     sizes in [2^(k-1), 2^k), class 0 is size 0), and the calls and bytes at or above 128 KiB,
 *     glibc's default mmap and trim thresholds;
 *   - the threads that allocate (one counter slot per thread, written by that thread only: no
 *     atomics on the fast path; threads past MAX_SLOTS share slot 0 with atomic adds);
 *   - live bytes, as USABLE sizes: malloc_usable_size() of the next allocator after an
 *     allocation and before a free (the requested size of a block is not known at its free
 *     without a header, and a header would change what is measured). Sampled with the process's
 *     RSS and anonymous RSS (/proc/self/statm) every ALLOCLAB_FP_INTERVAL_MS (20 ms);
 *   - sampled lifetimes and cross-thread frees: a block is sampled when a hash of its address
 *     falls in 1 of ALLOCLAB_FP_SAMPLE (64) buckets, so the free path knows from the address alone
 *     whether to look; a sampled allocation gets a header-less record (thread slot, time) in a
 *     fixed hash table, and its free finds it: freed by another thread or not, and after how long.
 *
 * Output: with ALLOCLAB_FP_DIR set, one JSON file per process, DIR/fp-PID-STARTNS.json, rewritten
 * atomically (rename) every 5 samples (100 ms) by a helper thread that blocks every signal and
 * never allocates, and at exit ("final": 1). A forked child starts afresh (its counters at zero,
 * the live bytes it inherited kept as `live_inherited`, the sample records of the parent ignored)
 * and writes its own file; a process that exec's keeps its pid, hence the start time in the name.
 * Without ALLOCLAB_FP_DIR it only counts.
 *
 * The allocator's own figures: at each sample the helper thread also asks the allocator that
 * serves malloc (the object next_malloc lives in, found with dladdr) for two totals (glibc
 * mallinfo2, jemalloc stats.allocated / stats.resident, gperftools' current allocated bytes and
 * heap less unmapped, mimalloc's committed bytes) and, as often as their cost allows, for its whole
 * books beside /proc/self/smaps (books.c): where the anonymous memory sits and why it stays. The
 * last sample, just before the process exits, is always kept, books included. A symbol is taken
 * only from the object that serves malloc, so the jemalloc linked into redis-server is not read
 * while a preloaded tcmalloc serves its mallocs. -1 where unknown.
 *
 * Bootstrap: dlsym may call calloc before the next allocator is known; such calls are served
 * from a static buffer and never freed.
 *
 * Limits: static binaries and setuid programs ignore LD_PRELOAD; calls that do not go through
 * the dynamic symbol (an allocator linked statically or bundled, __libc_malloc called directly,
 * jemalloc's mallocx, mi_malloc, tc_malloc) are not seen; a process killed by SIGKILL or ending
 * in _exit loses what happened since its last write (at most 100 ms). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "books.h"

#define EXPORT __attribute__((visibility("default")))
#define NCLASS 48
#define MAX_SLOTS 1024
#define BIG (128 * 1024)
#define TABLE_BITS 17
#define TABLE_SIZE (1u << TABLE_BITS)
#define PROBE 8
#define NLIFE 9           /* <1us <10us <100us <1ms <10ms <100ms <1s <10s >=10s */
#define SERIES_MAX 2048
#define WRITE_EVERY 5
#define TLS __thread __attribute__((tls_model("initial-exec")))

enum { K_MALLOC, K_CALLOC, K_REALLOC, K_FREE, K_FREE_NULL, K_MEMALIGN, K_POSIX_MEMALIGN,
       K_ALIGNED_ALLOC, K_VALLOC, K_NEW, K_DELETE, K_FAILED, NKIND };
static const char *const KIND_NAME[NKIND] = {
    "malloc", "calloc", "realloc", "free", "free_null", "memalign", "posix_memalign",
    "aligned_alloc", "valloc", "new", "delete", "failed"};

struct slot {
    uint64_t calls[NKIND];
    uint64_t hist_calls[NCLASS], hist_bytes[NCLASS];
    uint64_t bytes, usable, big_calls, big_bytes;
    int64_t live;                  /* usable bytes allocated minus freed, by this thread */
    int64_t nblocks;               /* blocks allocated minus freed, by this thread */
    uint64_t s_alloc, s_free, s_cross, s_cross_unknown, s_realloc, s_dropped, life[NLIFE];
    int shared;                    /* slot 0: threads past MAX_SLOTS, updated with atomics */
} __attribute__((aligned(64)));

struct rec { uintptr_t key; uint32_t slot, gen; uint64_t t_ns; };

static struct slot slots[MAX_SLOTS];
static struct rec table[TABLE_SIZE];
static uint32_t nslots;            /* slots handed out; slot 0 is the shared overflow */
static uint64_t overflow_threads;
static uint32_t gen = 1;           /* bumped in a forked child: the parent's records are ignored */
static uint64_t sample_mask = 63;
static int sampling = 1;
static int64_t live_inherited, nblocks_inherited;

static TLS struct slot *my_slot;
static TLS uint32_t my_idx;
static TLS int in_hook;
static TLS uint32_t until_peak_check;
static uint64_t peak_live_fine;   /* live bytes looked at every PEAK_EVERY allocations of a thread */
#define PEAK_EVERY 1024
static int64_t live_now(void);

static void *(*next_malloc)(size_t);
static void *(*next_calloc)(size_t, size_t);
static void *(*next_realloc)(void *, size_t);
static void (*next_free)(void *);
static void *(*next_memalign)(size_t, size_t);
static int (*next_posix_memalign)(void **, size_t, size_t);
static void *(*next_aligned_alloc)(size_t, size_t);
static void *(*next_valloc)(size_t);
static void *(*next_pvalloc)(size_t);
static size_t (*next_usable)(void *);
static int resolving;

/* --- bootstrap buffer, for dlsym's own calloc before the next allocator is known ----------- */

static char boot_buf[1 << 16] __attribute__((aligned(16)));
static size_t boot_used;

static int in_boot(const void *p) { return (const char *)p >= boot_buf && (const char *)p < boot_buf + sizeof boot_buf; }

static void *boot_alloc(size_t n) {
    size_t need = ((n + 15) & ~(size_t)15) + 16;
    size_t at = __atomic_fetch_add(&boot_used, need, __ATOMIC_RELAXED);
    if (at + need > sizeof boot_buf) return NULL;
    memcpy(boot_buf + at, &n, sizeof n);          /* its size, for realloc */
    return boot_buf + at + 16;
}

static size_t boot_size(const void *p) { size_t n; memcpy(&n, (const char *)p - 16, sizeof n); return n; }

static void resolve(void) {
    if (next_free || resolving) return;
    resolving = 1;
    next_calloc = dlsym(RTLD_NEXT, "calloc");
    next_malloc = dlsym(RTLD_NEXT, "malloc");
    next_realloc = dlsym(RTLD_NEXT, "realloc");
    next_memalign = dlsym(RTLD_NEXT, "memalign");
    next_posix_memalign = dlsym(RTLD_NEXT, "posix_memalign");
    next_aligned_alloc = dlsym(RTLD_NEXT, "aligned_alloc");
    next_valloc = dlsym(RTLD_NEXT, "valloc");
    next_pvalloc = dlsym(RTLD_NEXT, "pvalloc");
    next_usable = dlsym(RTLD_NEXT, "malloc_usable_size");
    next_free = dlsym(RTLD_NEXT, "free");
    resolving = 0;
}

/* --- counting --------------------------------------------------------------------------------- */

static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The calling thread's CPU time: what a reading costs, without the time a busy neighbour held the CPU. */
static inline uint64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static struct slot *slot(void) {
    if (__builtin_expect(my_slot != NULL, 1)) return my_slot;
    uint32_t i = __atomic_add_fetch(&nslots, 1, __ATOMIC_RELAXED);
    if (i < MAX_SLOTS) { my_idx = i; my_slot = &slots[i]; }
    else { my_idx = 0; my_slot = &slots[0]; __atomic_fetch_add(&overflow_threads, 1, __ATOMIC_RELAXED); }
    int here;
    books_stack_seen(&here, 0);   /* the books tell this thread's stack from the allocator's maps */
    return my_slot;
}

/* One writer per slot (its thread): a plain add, read by the writer thread without tearing. */
#define ADD(s, field, v) do { \
        if (__builtin_expect((s)->shared, 0)) __atomic_fetch_add(&(s)->field, (v), __ATOMIC_RELAXED); \
        else __atomic_store_n(&(s)->field, __atomic_load_n(&(s)->field, __ATOMIC_RELAXED) + (v), __ATOMIC_RELAXED); \
    } while (0)

static inline uint64_t mix(uintptr_t p) {
    uint64_t h = (uint64_t)p;
    h ^= h >> 33; h *= 0xff51afd7ed558ccdULL; h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53ULL; h ^= h >> 33;
    return h;
}

static void sample_insert(struct slot *s, uintptr_t p, uint64_t h) {
    uint32_t at = (uint32_t)(h >> 20) & (TABLE_SIZE - 1), g = __atomic_load_n(&gen, __ATOMIC_RELAXED);
    struct rec *free_rec = NULL;
    for (int i = 0; i < PROBE; i++) {
        struct rec *r = &table[(at + i) & (TABLE_SIZE - 1)];
        uintptr_t k = __atomic_load_n(&r->key, __ATOMIC_ACQUIRE);
        if (k == p || (k > 1 && r->gen != g)) {   /* a stale record of this address, or of the parent */
            uintptr_t expect = k;
            if (__atomic_compare_exchange_n(&r->key, &expect, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) { free_rec = r; break; }
        } else if (k == 0 && !free_rec) {
            uintptr_t expect = 0;
            if (__atomic_compare_exchange_n(&r->key, &expect, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) { free_rec = r; break; }
        }
    }
    if (!free_rec) { ADD(s, s_dropped, 1); return; }
    free_rec->slot = my_idx;
    free_rec->gen = g;
    free_rec->t_ns = now_ns();
    __atomic_store_n(&free_rec->key, p, __ATOMIC_RELEASE);
    ADD(s, s_alloc, 1);
}

/* The record of a sampled block, removed; its age in ns (or -1 when not found). */
static int64_t sample_take(uintptr_t p, uint64_t h, uint32_t *owner) {
    uint32_t at = (uint32_t)(h >> 20) & (TABLE_SIZE - 1), g = __atomic_load_n(&gen, __ATOMIC_RELAXED);
    for (int i = 0; i < PROBE; i++) {
        struct rec *r = &table[(at + i) & (TABLE_SIZE - 1)];
        if (__atomic_load_n(&r->key, __ATOMIC_ACQUIRE) != p) continue;
        uint32_t o = r->slot, rg = r->gen;
        uint64_t t = r->t_ns;
        uintptr_t expect = p;
        if (!__atomic_compare_exchange_n(&r->key, &expect, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) return -1;
        if (rg != g) return -1;
        *owner = o;
        return (int64_t)(now_ns() - t);
    }
    return -1;
}

static inline int sampled(uintptr_t p, uint64_t *h) {
    if (!sampling) return 0;
    *h = mix(p);
    return (*h & sample_mask) == 0;
}

static int need_sampler;          /* a forked child starts its helper thread at its first call */
static void start_sampler(void);

/* The next allocator's malloc_usable_size; what it allocates meanwhile (tcmalloc's answer makes
 * a C++ object on first use) is its own, not counted, and cannot recurse into us. */
static inline size_t usable_of(void *p, size_t otherwise) {
    if (!next_usable) return otherwise;
    in_hook++;
    size_t u = next_usable(p);
    in_hook--;
    return u;
}

/* A block's size class, requested bytes and usable bytes; the call itself is counted by the caller. */
static inline void account(struct slot *s, void *p, size_t req) {
    unsigned c = req ? 64 - (unsigned)__builtin_clzll((unsigned long long)req) : 0;
    if (c >= NCLASS) c = NCLASS - 1;
    ADD(s, hist_calls[c], 1);
    ADD(s, hist_bytes[c], req);
    ADD(s, bytes, req);
    if (req >= BIG) { ADD(s, big_calls, 1); ADD(s, big_bytes, req); }
    size_t u = usable_of(p, req);
    ADD(s, usable, u);
    ADD(s, live, (int64_t)u);
    ADD(s, nblocks, 1);
    books_alloc_seen(p, u);
    if (__builtin_expect(until_peak_check-- == 0, 0)) {
        /* The helper thread samples every 20 ms; a short program's peak falls between samples. */
        until_peak_check = PEAK_EVERY - 1;
        int64_t l = live_now();
        uint64_t seen = __atomic_load_n(&peak_live_fine, __ATOMIC_RELAXED);
        while (l > 0 && (uint64_t)l > seen &&
               !__atomic_compare_exchange_n(&peak_live_fine, &seen, (uint64_t)l, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
    }
    uint64_t h;
    if (sampled((uintptr_t)p, &h)) sample_insert(s, (uintptr_t)p, h);
    if (__builtin_expect(need_sampler, 0) && __atomic_exchange_n(&need_sampler, 0, __ATOMIC_ACQ_REL))
        start_sampler();
}

static inline void on_alloc(void *p, size_t req, int kind) {
    struct slot *s = slot();
    ADD(s, calls[kind], 1);
    if (!p) { ADD(s, calls[K_FAILED], 1); return; }
    account(s, p, req);
}

/* A block leaves: its usable size comes off the live bytes; a sampled one's record is taken out.
 * `ends_life` is 0 for the old block of a realloc (moved or resized, not freed by the program). */
static inline void release(struct slot *s, void *p, int ends_life) {
    size_t u = usable_of(p, 0);
    ADD(s, live, -(int64_t)u);
    ADD(s, nblocks, -1);
    books_free_seen(p, u, ends_life);
    uint64_t h;
    if (!sampled((uintptr_t)p, &h)) return;
    uint32_t owner = 0;
    int64_t age = sample_take((uintptr_t)p, h, &owner);
    if (age < 0) return;
    if (!ends_life) { ADD(s, s_realloc, 1); return; }
    ADD(s, s_free, 1);
    if (owner == 0 || my_idx == 0) ADD(s, s_cross_unknown, 1);
    else if (owner != my_idx) ADD(s, s_cross, 1);
    int b = 0;
    for (int64_t lim = 1000; b < NLIFE - 1 && age >= lim; lim *= 10) b++;
    ADD(s, life[b], 1);
}

#define ENTER() do { if (!next_free) resolve(); } while (0)

/* --- the interposed API ------------------------------------------------------------------------ */

EXPORT void *malloc(size_t n) {
    ENTER();
    if (!next_malloc) return boot_alloc(n);
    if (in_hook) return next_malloc(n);
    void *p = next_malloc(n);
    on_alloc(p, n, K_MALLOC);
    return p;
}

EXPORT void *calloc(size_t n, size_t size) {
    ENTER();
    if (!next_calloc) return boot_alloc(n * size);      /* static: already zero */
    if (in_hook) return next_calloc(n, size);
    void *p = next_calloc(n, size);
    size_t req;
    on_alloc(p, __builtin_mul_overflow(n, size, &req) ? SIZE_MAX : req, K_CALLOC);
    return p;
}

EXPORT void free(void *p) {
    if (in_boot(p)) return;
    ENTER();
    if (!next_free) return;
    if (in_hook) { next_free(p); return; }
    struct slot *s = slot();
    if (!p) { ADD(s, calls[K_FREE_NULL], 1); return; }
    ADD(s, calls[K_FREE], 1);
    release(s, p, 1);
    next_free(p);
}

EXPORT void *realloc(void *p, size_t n) {
    ENTER();
    if (in_boot(p) || !next_realloc) {
        void *q = next_malloc ? malloc(n) : boot_alloc(n);
        if (q && p) { size_t old = boot_size(p); memcpy(q, p, old < n ? old : n); }
        return q;
    }
    if (in_hook) return next_realloc(p, n);
    struct slot *s = slot();
    ADD(s, calls[K_REALLOC], 1);
    /* The old block's usable size, read before it may go; it leaves the live bytes only if the
     * call succeeds (or frees it: realloc(p, 0) in glibc). */
    size_t old_u = p ? usable_of(p, 0) : 0;
    uint64_t h;
    uint32_t owner;
    if (p && sampled((uintptr_t)p, &h) && sample_take((uintptr_t)p, h, &owner) >= 0) ADD(s, s_realloc, 1);
    if (p) books_free_seen(p, old_u, n == 0);   /* realloc(p, 0) frees p through glibc's free */
    void *q = next_realloc(p, n);
    if (q) { ADD(s, live, -(int64_t)old_u); if (p) ADD(s, nblocks, -1); account(s, q, n); }
    else if (p && n == 0) { ADD(s, live, -(int64_t)old_u); ADD(s, nblocks, -1); }
    else ADD(s, calls[K_FAILED], 1);
    return q;
}

EXPORT void *reallocarray(void *p, size_t n, size_t size) {
    size_t req;
    if (__builtin_mul_overflow(n, size, &req)) { errno = ENOMEM; return NULL; }
    return realloc(p, req);
}

EXPORT void *memalign(size_t align, size_t n) {
    ENTER();
    if (!next_memalign) return NULL;
    if (in_hook) return next_memalign(align, n);
    void *p = next_memalign(align, n);
    on_alloc(p, n, K_MEMALIGN);
    return p;
}

EXPORT int posix_memalign(void **out, size_t align, size_t n) {
    ENTER();
    if (!next_posix_memalign) return ENOMEM;
    if (in_hook) return next_posix_memalign(out, align, n);
    int rc = next_posix_memalign(out, align, n);
    on_alloc(rc == 0 ? *out : NULL, n, K_POSIX_MEMALIGN);
    return rc;
}

EXPORT void *aligned_alloc(size_t align, size_t n) {
    ENTER();
    void *(*f)(size_t, size_t) = next_aligned_alloc ? next_aligned_alloc : next_memalign;
    if (!f) return NULL;
    if (in_hook) return f(align, n);
    void *p = f(align, n);
    on_alloc(p, n, K_ALIGNED_ALLOC);
    return p;
}

EXPORT void *valloc(size_t n) {
    ENTER();
    if (!next_valloc) return memalign((size_t)sysconf(_SC_PAGESIZE), n);
    if (in_hook) return next_valloc(n);
    void *p = next_valloc(n);
    on_alloc(p, n, K_VALLOC);
    return p;
}

EXPORT void *pvalloc(size_t n) {
    ENTER();
    if (!next_pvalloc) return valloc(n);
    if (in_hook) return next_pvalloc(n);
    void *p = next_pvalloc(n);
    on_alloc(p, n, K_VALLOC);
    return p;
}

/* glibc's settings may come from the program itself: a mallopt of a threshold, a pad or the mmap
 * count turns glibc's dynamic thresholds off, as the environment does. */
EXPORT int mallopt(int param, int value) {
    static int (*next)(int, int);
    if (!next) { ENTER(); next = (int (*)(int, int))dlsym(RTLD_NEXT, "mallopt"); }
    if (!next) return 0;
    int rc = next(param, value);
    if (rc == 1) books_mallopt(param, value);
    return rc;
}

/* C++: an allocator that defines operator new (tcmalloc) never calls malloc for it; libstdc++'s
 * does. The call is counted here, and malloc called from inside it is not counted again. */
static void leave_hook(int *unused) { (void)unused; in_hook--; }
#define HOOKED int hook_guard __attribute__((cleanup(leave_hook))) = (in_hook++, 0); (void)hook_guard

/* The definition the caller would have bound without the interposer. RTLD_NEXT searches only the
 * global scope after this object: a C program that later loads libstdc++ through an RTLD_LOCAL
 * dlopen (python3 importing numpy, the rados bindings) has its only operator new outside it, where
 * the extension's own lookup (global scope, then its local one) would have found it. So every
 * loaded object is searched, in load order, this one left out (RTLD_DEFAULT finds the wrapper). */
struct find_sym { const char *name; void *found; };

static char self_anchor;   /* an address inside this object, for dladdr */

static int find_in_object(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct find_sym *f = data;
    Dl_info self, where;
    if (!info->dlpi_name || !info->dlpi_name[0]) return 0;          /* the executable: not its new */
    if (!dladdr(&self_anchor, &self) || !strcmp(info->dlpi_name, self.dli_fname)) return 0;
    void *h = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
    if (!h) return 0;
    void *sym = dlsym(h, f->name);
    dlclose(h);
    if (!sym || !dladdr(sym, &where) || where.dli_fbase == self.dli_fbase) return 0;
    f->found = sym;
    return 1;
}

static void *next_definition(const char *name) {
    void *p = dlsym(RTLD_NEXT, name);
    if (p) return p;
    struct find_sym f = {name, NULL};
    dl_iterate_phdr(find_in_object, &f);
    return f.found;
}

/* With no definition loaded anywhere (nothing C++ is loaded, so nothing could catch a bad_alloc),
 * the operators keep their contract on malloc and free: new never returns NULL (the loader's
 * out-of-memory outcome is the one an uncaught bad_alloc would have had), nothrow new may. */
static void *new_fallback(size_t n, int nothrow) {
    void *p = malloc(n ? n : 1);
    if (!p && !nothrow) {
        void (*throw_bad_alloc)(void) = (void (*)(void))next_definition("_ZSt17__throw_bad_allocv");
        if (throw_bad_alloc) throw_bad_alloc();
        static const char msg[] = "alloclab-fingerprint: operator new: out of memory\n";
        (void)!write(2, msg, sizeof msg - 1);
        abort();
    }
    return p;
}

#define NEW(sym, PARAMS, ARGS, NOTHROW) \
    EXPORT void *sym PARAMS { \
        static void *(*next) PARAMS; \
        if (!next) { ENTER(); next = (void *(*) PARAMS)next_definition(#sym); } \
        if (!next) return new_fallback(n, NOTHROW); \
        if (in_hook) return next ARGS; \
        void *p; { HOOKED; p = next ARGS; } \
        on_alloc(p, n, K_NEW); \
        return p; }

#define DELETE(sym, PARAMS, ARGS) \
    EXPORT void sym PARAMS { \
        static void (*next) PARAMS; \
        if (!next) { ENTER(); next = (void (*) PARAMS)next_definition(#sym); } \
        if (!next) { free(p); return; } \
        if (p && !in_hook) { struct slot *s = slot(); ADD(s, calls[K_DELETE], 1); release(s, p, 1); } \
        HOOKED; next ARGS; }

/* The nothrow argument is a reference: a pointer at the ABI level. */
NEW(_Znwm, (size_t n), (n), 0)
NEW(_Znam, (size_t n), (n), 0)
NEW(_ZnwmRKSt9nothrow_t, (size_t n, const void *t), (n, t), 1)
NEW(_ZnamRKSt9nothrow_t, (size_t n, const void *t), (n, t), 1)
DELETE(_ZdlPv, (void *p), (p))
DELETE(_ZdaPv, (void *p), (p))
DELETE(_ZdlPvm, (void *p, size_t n), (p, n))
DELETE(_ZdaPvm, (void *p, size_t n), (p, n))
DELETE(_ZdlPvRKSt9nothrow_t, (void *p, const void *t), (p, t))
DELETE(_ZdaPvRKSt9nothrow_t, (void *p, const void *t), (p, t))

/* --- the per-process file ----------------------------------------------------------------------- */

static char out_dir[512];
static char out_path[640], tmp_path[660];
static char exe[512];
static int pid, ppid;
static uint64_t start_ns;
static long interval_ms = 20;
static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t exit_t_ms, exit_live_kb, exit_rss_kb, exit_anon_kb;   /* at_exit_start's reading */
static int sampler_running, finished;

static uint32_t series_n, series_stride = 1, series_tick;
static uint32_t s_t_ms[SERIES_MAX];
static uint64_t s_live_kb[SERIES_MAX], s_rss_kb[SERIES_MAX], s_anon_kb[SERIES_MAX];
static int64_t s_alloc_kb[SERIES_MAX], s_held_kb[SERIES_MAX];
/* Allocation calls and requested bytes so far in this process (since its fork): the calls in a
 * window, such as a client's measured load, are the difference of two readings. */
static uint64_t s_allocs[SERIES_MAX], s_req_bytes[SERIES_MAX];
static uint64_t peak_live, peak_rss_kb, peak_anon_kb, live_at_peak_anon;
/* The allocator's books (books.c), at most BOOKS_ROWS rows of [t_ms, figure...], thinned as the
 * series is. Reading them costs more than the rest of a sample (smaps; glibc's malloc_info walks
 * every free chunk while the arena is locked): after a reading that took d of the reader's CPU,
 * the next waits at least d / BOOKS_SHARE, so that they take at most that share of the run. The
 * CPU time, not the wall time: a reader preempted by a busy neighbour took 20 ms of wall time, and
 * its next reading waited a second, past a phase of redis' recipe (test_books_servers_e2e under
 * three test workers on two cores). The last sample, just before the process exits, always reads
 * them. */
#define BOOKS_ROWS 512
#define BOOKS_SHARE 0.02
static int64_t b_rows[BOOKS_ROWS][BOOKS_MAX + 1];
static uint32_t b_n;
static uint64_t books_next_ns, books_spent_ns;

static char buf[1 << 20];
static size_t blen;

static void put(const char *s) { size_t n = strlen(s); if (blen + n < sizeof buf) { memcpy(buf + blen, s, n); blen += n; } }
static void put_u(uint64_t v) { char t[24]; int i = 23; t[i] = 0; do { t[--i] = (char)('0' + v % 10); v /= 10; } while (v); put(t + i); }
static void put_i(int64_t v) { if (v < 0) { put("-"); put_u((uint64_t)(-v)); } else put_u((uint64_t)v); }
static void put_str(const char *s, size_t n) {
    put("\"");
    for (size_t i = 0; i < n && blen + 2 < sizeof buf; i++) {
        char c = s[i];
        if (c == 0) c = ' ';
        if (c == '"' || c == '\\') { buf[blen++] = '\\'; buf[blen++] = c; }
        else buf[blen++] = (c >= 32 && c < 127) ? c : '?';
    }
    put("\"");
}

static int64_t live_now(void) {
    int64_t live = live_inherited;
    uint32_t n = __atomic_load_n(&nslots, __ATOMIC_RELAXED);
    for (uint32_t i = 0; i <= n && i < MAX_SLOTS; i++) live += __atomic_load_n(&slots[i].live, __ATOMIC_RELAXED);
    return live;
}

static void read_statm(uint64_t *rss_kb, uint64_t *anon_kb) {
    char t[128];
    *rss_kb = *anon_kb = 0;
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, t, sizeof t - 1);
    close(fd);
    if (n <= 0) return;
    t[n] = 0;
    uint64_t f[3] = {0, 0, 0};
    char *c = t;
    for (int i = 0; i < 3; i++) {
        while (*c == ' ') c++;
        while (*c >= '0' && *c <= '9') f[i] = f[i] * 10 + (uint64_t)(*c++ - '0');
    }
    uint64_t page_kb = (uint64_t)sysconf(_SC_PAGESIZE) / 1024;
    *rss_kb = f[1] * page_kb;
    *anon_kb = (f[1] > f[2] ? f[1] - f[2] : 0) * page_kb;   /* resident less file-backed and shmem */
}

static void calls_so_far(uint64_t *allocs, uint64_t *bytes) {
    static const int kinds[] = {K_MALLOC, K_CALLOC, K_REALLOC, K_MEMALIGN, K_POSIX_MEMALIGN, K_ALIGNED_ALLOC,
                                K_VALLOC, K_NEW};
    *allocs = *bytes = 0;
    uint32_t n = __atomic_load_n(&nslots, __ATOMIC_RELAXED);
    for (uint32_t i = 0; i <= n && i < MAX_SLOTS; i++) {
        for (unsigned k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
            *allocs += __atomic_load_n(&slots[i].calls[kinds[k]], __ATOMIC_RELAXED);
        *bytes += __atomic_load_n(&slots[i].bytes, __ATOMIC_RELAXED);
    }
}

static int64_t blocks_now(void) {
    int64_t n = nblocks_inherited;
    uint32_t k = __atomic_load_n(&nslots, __ATOMIC_RELAXED);
    for (uint32_t i = 0; i <= k && i < MAX_SLOTS; i++) n += __atomic_load_n(&slots[i].nblocks, __ATOMIC_RELAXED);
    return n;
}

static int books_off;   /* ALLOCLAB_FP_NO_BOOKS set: bench/books_cost.py's reference */

static void take_books(uint64_t t, int final) {
    if (books_off || (!final && t < books_next_ns)) return;
    if (b_n == BOOKS_ROWS) {   /* full: keep every other row */
        for (uint32_t i = 0; i < BOOKS_ROWS / 2; i++) memcpy(b_rows[i], b_rows[2 * i], sizeof b_rows[i]);
        b_n = BOOKS_ROWS / 2;
    }
    int64_t *row = b_rows[b_n++];
    row[0] = (int64_t)((t - start_ns) / 1000000);
    uint64_t cpu0 = thread_cpu_ns();
    in_hook++;
    /* smaps first, the allocator's figures after: a program that allocates between the two (a
     * reader preempted by a busy neighbour, a program filling megabytes a millisecond) leaves
     * books counting blocks smaps has not seen. A reading during which the live bytes moved, or
     * the program allocated, more than 1 MiB and 1/32 is taken again, twice at most; the last is
     * kept. The bytes allocated count a block written and freed inside the reading (its pages
     * dirty in the books, unseen by smaps), which leaves the live bytes where they were. */
    for (int again = 0;; again++) {
        uint64_t calls0, bytes0, calls1, bytes1;
        calls_so_far(&calls0, &bytes0);
        int64_t before = live_now();
        books_read(row + 1, before, blocks_now());
        int64_t moved = live_now() - before;
        calls_so_far(&calls1, &bytes1);
        if (moved < 0) moved = -moved;
        if ((int64_t)(bytes1 - bytes0) > moved) moved = (int64_t)(bytes1 - bytes0);
        if (final || again == 2 || moved <= (1 << 20) || moved <= (before > 0 ? before : 0) / 32) break;
    }
    in_hook--;
    books_spent_ns += now_ns() - t;
    books_next_ns = now_ns() + (uint64_t)((double)(thread_cpu_ns() - cpu0) / BOOKS_SHARE);
}

/* A sample of the series; the final one (just before the process exits) is always kept. */
static void take_sample(int final) {
    int64_t live = live_now();
    uint64_t rss, anon, live_u = live > 0 ? (uint64_t)live : 0;
    uint64_t t = now_ns();
    read_statm(&rss, &anon);
    if (as_kind > AS_NONE) { in_hook++; read_stats(); in_hook--; }
    if (live_u > peak_live) peak_live = live_u;
    if (rss > peak_rss_kb) peak_rss_kb = rss;
    if (anon > peak_anon_kb || !peak_anon_kb) { peak_anon_kb = anon; live_at_peak_anon = live_u; }
    if (series_tick++ % series_stride && !final) return;
    take_books(t, final);
    if (series_n == SERIES_MAX) {   /* full: keep every other point, sample half as often */
        for (uint32_t i = 0; i < SERIES_MAX / 2; i++) {
            s_t_ms[i] = s_t_ms[2 * i]; s_live_kb[i] = s_live_kb[2 * i];
            s_rss_kb[i] = s_rss_kb[2 * i]; s_anon_kb[i] = s_anon_kb[2 * i];
            s_alloc_kb[i] = s_alloc_kb[2 * i]; s_held_kb[i] = s_held_kb[2 * i];
            s_allocs[i] = s_allocs[2 * i]; s_req_bytes[i] = s_req_bytes[2 * i];
        }
        series_n = SERIES_MAX / 2;
        series_stride *= 2;
    }
    s_t_ms[series_n] = (uint32_t)((t - start_ns) / 1000000);
    s_live_kb[series_n] = live_u / 1024;
    s_rss_kb[series_n] = rss;
    s_alloc_kb[series_n] = as_allocated < 0 ? -1 : as_allocated / 1024;
    s_held_kb[series_n] = as_held < 0 ? -1 : as_held / 1024;
    calls_so_far(&s_allocs[series_n], &s_req_bytes[series_n]);
    s_anon_kb[series_n++] = anon;
}

static void write_file(int final) {
    if (!out_dir[0]) return;
    uint64_t tot[NKIND] = {0}, hc[NCLASS] = {0}, hb[NCLASS] = {0}, life[NLIFE] = {0};
    uint64_t bytes = 0, usable = 0, big_c = 0, big_b = 0, sa = 0, sf = 0, sx = 0, sxu = 0, sr = 0, sd = 0;
    uint32_t threads = 0, n = __atomic_load_n(&nslots, __ATOMIC_RELAXED);
    for (uint32_t i = 0; i <= n && i < MAX_SLOTS; i++) {
        struct slot *s = &slots[i];
        uint64_t allocs = 0;
        for (int k = 0; k < NKIND; k++) {
            uint64_t v = __atomic_load_n(&s->calls[k], __ATOMIC_RELAXED);
            tot[k] += v;
            if (k != K_FREE && k != K_FREE_NULL && k != K_DELETE && k != K_FAILED) allocs += v;
        }
        if (allocs && i) threads++;
        for (int c = 0; c < NCLASS; c++) { hc[c] += s->hist_calls[c]; hb[c] += s->hist_bytes[c]; }
        for (int b = 0; b < NLIFE; b++) life[b] += s->life[b];
        bytes += s->bytes; usable += s->usable; big_c += s->big_calls; big_b += s->big_bytes;
        sa += s->s_alloc; sf += s->s_free; sx += s->s_cross; sxu += s->s_cross_unknown;
        sr += s->s_realloc; sd += s->s_dropped;
    }
    threads += (uint32_t)__atomic_load_n(&overflow_threads, __ATOMIC_RELAXED);
    blen = 0;
    put("{\"version\":1,\"pid\":"); put_u((uint64_t)pid);
    put(",\"ppid\":"); put_u((uint64_t)ppid);
    put(",\"exe\":"); put_str(exe, strlen(exe));
    char cmd[256];
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    ssize_t cl = fd >= 0 ? read(fd, cmd, sizeof cmd) : 0;
    if (fd >= 0) close(fd);
    while (cl > 0 && cmd[cl - 1] == 0) cl--;
    put(",\"cmdline\":"); put_str(cmd, cl > 0 ? (size_t)cl : 0);
    uint64_t t = now_ns();
    put(",\"start_ns\":"); put_u(start_ns);
    put(",\"t_ns\":"); put_u(t);
    put(",\"final\":"); put_u((uint64_t)final);
    put(",\"calls\":{");
    for (int k = 0; k < NKIND; k++) { if (k) put(","); put("\""); put(KIND_NAME[k]); put("\":"); put_u(tot[k]); }
    put("},\"bytes\":"); put_u(bytes);
    put(",\"usable_bytes\":"); put_u(usable);
    put(",\"big_threshold\":"); put_u(BIG);
    put(",\"big_calls\":"); put_u(big_c);
    put(",\"big_bytes\":"); put_u(big_b);
    put(",\"threads\":"); put_u(threads);
    /* The CPUs the process may run on (taskset, a service's CPUAffinity=): glibc's arenas and any
     * thread pool see the host's count, but no more of its threads run at once than these. */
    cpu_set_t cs;
    put(",\"cpus_allowed\":"); put_u(sched_getaffinity(0, sizeof cs, &cs) == 0 ? (uint64_t)CPU_COUNT(&cs) : 0);
    put(",\"hist\":[");
    int first = 1;
    for (int c = 0; c < NCLASS; c++) {
        if (!hc[c]) continue;
        if (!first) put(",");
        first = 0;
        put("["); put_u((uint64_t)c); put(","); put_u(hc[c]); put(","); put_u(hb[c]); put("]");
    }
    int64_t live = live_now();
    put("],\"live\":"); put_i(live);
    put(",\"live_inherited\":"); put_i(live_inherited);
    uint64_t rss, anon;
    read_statm(&rss, &anon);
    put(",\"rss_kb\":"); put_u(rss);
    put(",\"anon_kb\":"); put_u(anon);
    put(",\"peak_live\":"); put_u(peak_live > peak_live_fine ? peak_live : peak_live_fine);
    put(",\"peak_rss_kb\":"); put_u(peak_rss_kb);
    put(",\"peak_anon_kb\":"); put_u(peak_anon_kb);
    put(",\"live_at_peak_anon\":"); put_u(live_at_peak_anon);
    put(",\"allocator_stats\":{\"source\":\""); put(AS_NAME[as_kind > 0 ? as_kind : 0]);
    put("\",\"allocated\":"); put_i(as_allocated); put(",\"held\":"); put_i(as_held); put("}");
    put(",\"sample_every\":"); put_u(sampling ? sample_mask + 1 : 0);
    put(",\"sampled\":{\"allocs\":"); put_u(sa);
    put(",\"frees\":"); put_u(sf);
    put(",\"cross_thread\":"); put_u(sx);
    put(",\"cross_unknown\":"); put_u(sxu);
    put(",\"realloc_moved\":"); put_u(sr);
    put(",\"dropped\":"); put_u(sd);
    put(",\"lifetime_decades_from_1us\":[");
    for (int b = 0; b < NLIFE; b++) { if (b) put(","); put_u(life[b]); }
    put("]");
    if (final) {   /* sampled blocks still live at exit, by age */
        uint64_t still[NLIFE] = {0};
        uint32_t g = gen;
        for (uint32_t i = 0; i < TABLE_SIZE; i++) {
            struct rec *r = &table[i];
            if (__atomic_load_n(&r->key, __ATOMIC_ACQUIRE) <= 1 || r->gen != g) continue;
            uint64_t age = t - r->t_ns;
            int b = 0;
            for (uint64_t lim = 1000; b < NLIFE - 1 && age >= lim; lim *= 10) b++;
            still[b]++;
        }
        put(",\"still_live_decades_from_1us\":[");
        for (int b = 0; b < NLIFE; b++) { if (b) put(","); put_u(still[b]); }
        put("]");
    }
    put("},\"interval_ms\":"); put_u((uint64_t)interval_ms);
    put(",\"books\":{\"interface\":\""); put(books_source());
    put("\",\"spent_ns\":"); put_u(books_spent_ns);
    put(",\"names\":[");
    for (int i = 0; i < books_count(); i++) { if (i) put(","); put("\""); put(books_name(i)); put("\""); }
    put("],\"rows\":[");
    for (uint32_t i = 0; i < b_n; i++) {
        if (i) put(",");
        put("[");
        for (int k = 0; k <= books_count(); k++) { if (k) put(","); put_i(b_rows[i][k]); }
        put("]");
    }
    put("]}");
    if (exit_anon_kb) {   /* [ms since start, live KiB, RSS KiB, anonymous KiB] as exit() began */
        put(",\"at_exit_start\":["); put_u(exit_t_ms); put(","); put_u(exit_live_kb); put(",");
        put_u(exit_rss_kb); put(","); put_u(exit_anon_kb); put("]");
    }
    put(",\"series_stride\":"); put_u(series_stride);
    put(",\"series\":[");
    for (uint32_t i = 0; i < series_n; i++) {
        if (i) put(",");
        put("["); put_u(s_t_ms[i]); put(","); put_u(s_live_kb[i]); put(","); put_u(s_rss_kb[i]);
        put(","); put_u(s_anon_kb[i]); put(","); put_i(s_alloc_kb[i]); put(","); put_i(s_held_kb[i]);
        put(","); put_u(s_allocs[i]); put(","); put_u(s_req_bytes[i]); put("]");
    }
    put("]}\n");
    int out = open(tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) return;
    size_t off = 0;
    while (off < blen) {
        ssize_t w = write(out, buf + off, blen - off);
        if (w <= 0) { if (w < 0 && errno == EINTR) continue; break; }
        off += (size_t)w;
    }
    close(out);
    if (off == blen) rename(tmp_path, out_path);
    else unlink(tmp_path);
}

static void set_paths(void) {
    pid = (int)getpid();
    ppid = (int)getppid();
    start_ns = now_ns();
    char p[24], s[24];
    blen = 0; put_u((uint64_t)pid); buf[blen] = 0; strcpy(p, buf);
    blen = 0; put_u(start_ns); buf[blen] = 0; strcpy(s, buf);
    blen = 0;
    size_t d = strlen(out_dir);
    if (d + 80 > sizeof out_path) { out_dir[0] = 0; return; }
    strcpy(out_path, out_dir); strcat(out_path, "/fp-"); strcat(out_path, p); strcat(out_path, "-");
    strcat(out_path, s);
    strcpy(tmp_path, out_path); strcat(tmp_path, ".tmp");
    strcat(out_path, ".json");
}

static void *sampler(void *arg) {
    (void)arg;
    in_hook = 1;
    books_stack_seen(&arg, 1);
    struct timespec ts = {interval_ms / 1000, (interval_ms % 1000) * 1000000L};
    for (uint32_t tick = 1;; tick++) {
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&write_lock);
        if (!finished) {
            take_sample(0);
            if (tick % WRITE_EVERY == 0) write_file(0);
        }
        pthread_mutex_unlock(&write_lock);
    }
    return NULL;
}

static void start_sampler(void) {
    if (!out_dir[0]) return;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);   /* the program's signals never land on our thread */
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);   /* malloc_info and its printf run on it */
    in_hook++;
    sampler_running = pthread_create(&t, &attr, sampler, NULL) == 0;
    in_hook--;
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void before_fork(void) { pthread_mutex_lock(&write_lock); }
static void after_fork_parent(void) { pthread_mutex_unlock(&write_lock); }

static void after_fork_child(void) {
    pthread_mutex_init(&write_lock, NULL);
    live_inherited = live_now();
    nblocks_inherited = blocks_now();
    uint32_t n = __atomic_load_n(&nslots, __ATOMIC_RELAXED);
    for (uint32_t i = 0; i <= n && i < MAX_SLOTS; i++) {
        int shared = slots[i].shared;
        memset(&slots[i], 0, sizeof slots[i]);
        slots[i].shared = shared;
    }
    overflow_threads = 0;
    gen++;
    series_n = 0; series_stride = 1; series_tick = 0;
    b_n = 0; books_next_ns = books_spent_ns = 0;
    books_after_fork_child();
    peak_live = peak_rss_kb = peak_anon_kb = live_at_peak_anon = peak_live_fine = 0;
    set_paths();
    /* Not here: the allocator's own fork handlers may not have run yet, and creating a thread
     * allocates. The child's first counted allocation starts it. */
    if (out_dir[0]) need_sampler = 1;
}

/* What the process holds as exit() begins: glibc runs the main thread's thread_local destructors
 * first, before the atexit handlers and the objects' destructors, where an allocator built into the
 * program gives back what it holds (the mimalloc crate: 669 MiB at rest, 3.7 MiB at the final
 * reading). Registered once, at start, so that it runs after the program's own such destructors. */
extern int __cxa_thread_atexit_impl(void (*fn)(void *), void *obj, void *dso);
extern void *__dso_handle;

static void at_exit_start(void *unused) {
    (void)unused;
    int64_t live = live_now();
    uint64_t rss, anon;
    read_statm(&rss, &anon);
    exit_t_ms = (now_ns() - start_ns) / 1000000;
    exit_live_kb = live > 0 ? (uint64_t)live / 1024 : 0;
    exit_rss_kb = rss;
    exit_anon_kb = anon ? anon : 1;
}

__attribute__((constructor)) static void fp_init(void) {
    resolve();
    slots[0].shared = 1;
    const char *e = getenv("ALLOCLAB_FP_SAMPLE");
    if (e) {
        long v = strtol(e, NULL, 10);
        if (v <= 0) sampling = 0;
        else { uint64_t m = 1; while (m < (uint64_t)v) m <<= 1; sample_mask = m - 1; }
    }
    e = getenv("ALLOCLAB_FP_INTERVAL_MS");
    if (e && strtol(e, NULL, 10) > 0) interval_ms = strtol(e, NULL, 10);
    books_off = getenv("ALLOCLAB_FP_NO_BOOKS") != NULL;
    e = getenv("ALLOCLAB_FP_DIR");
    if (!e || !*e || strlen(e) >= sizeof out_dir) return;
    strcpy(out_dir, e);
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    set_paths();
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
    in_hook++;
    __cxa_thread_atexit_impl(at_exit_start, NULL, &__dso_handle);
    books_resolve((void *)next_malloc);
    books_init(start_ns);
    in_hook--;
    start_sampler();
}

__attribute__((destructor)) static void fp_fini(void) {
    if (!out_dir[0]) return;
    pthread_mutex_lock(&write_lock);
    take_sample(1);
    write_file(1);
    finished = 1;   /* the helper thread writes no more: the final file stays */
    pthread_mutex_unlock(&write_lock);
}
