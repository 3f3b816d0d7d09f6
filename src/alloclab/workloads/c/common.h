/*
 * common.h - shared helpers for the alloclab built-in workload programs.
 *
 * Everything here is header-only and uses only libc + libdl + libpthread, so a
 * workload builds with `cc -O2 -pthread -o prog prog.c -ldl` and is dynamically
 * linked: the allocator is then swapped with LD_PRELOAD and is the only thing
 * that differs between runs.  No libm (no -lm on the command line), so the few
 * transcendental functions needed for distributions are implemented below.
 *
 * Rules the helpers follow, and why:
 *  - Nothing here calls malloc during measurement (RSS is read with
 *    open/read, JSON is built in a static buffer and written with write(2)),
 *    so the helpers do not perturb the heap being measured.
 *  - Bad parameters print ONE line to stderr and exit with status 2, so the
 *    Python side can tell "bad invocation" from "workload crashed".
 *  - Results are ONE JSON line on stdout; nothing else goes to stdout.
 */
#ifndef ALLOCLAB_COMMON_H
#define ALLOCLAB_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_DEFAULT */
#endif

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

/* Helpers are static (one translation unit per program); not every program
 * uses every helper, so mark them unused to keep -Wall quiet. */
#define CL_STATIC static __attribute__((unused))

static const char *cl_prog = "workload";

/* Print "<prog>: error: <msg>" on one line to stderr and exit 2. */
__attribute__((format(printf, 1, 2), noreturn, unused)) static void cl_fail(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: error: %s\n", cl_prog, msg);
    exit(2);
}

/* Out of memory (or a pthread call failing) is not a usage error: exit 1. */
__attribute__((noreturn, unused)) static void cl_die(const char *what)
{
    fprintf(stderr, "%s: fatal: %s failed\n", cl_prog, what);
    exit(1);
}

CL_STATIC inline void *cl_check(void *p, const char *what)
{
    if (!p)
        cl_die(what);
    return p;
}

/* ------------------------------------------------------------------------ */
/* Flags: --name=value and --name value                                      */
/* ------------------------------------------------------------------------ */

enum cl_flag_kind {
    CL_INT,  /* plain integer */
    CL_SIZE, /* integer with optional K/M/G suffix (powers of 1024) */
    CL_BOOL, /* present = 1; also accepts --name=0/1 */
};

typedef struct {
    const char *name;
    enum cl_flag_kind kind;
    long long *val;
    long long min, max; /* inclusive bounds, checked after parsing */
    const char *help;
    int set;            /* filled in by cl_parse: 1 if given on the command line */
} cl_flag;

#define CL_END {NULL, CL_INT, NULL, 0, 0, NULL, 0}

/* Flags every workload has. */
static long long cl_seed = 42;       /* fixed default seed: runs are repeatable */
static long long cl_extra_work = 0;  /* --extra-work=N: N units of CPU work per op */

CL_STATIC long long cl_parse_number(const char *name, const char *s, enum cl_flag_kind kind)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || errno == ERANGE)
        cl_fail("invalid value for --%s: '%s' (expected an integer)", name, s);
    if (kind == CL_SIZE && *end) {
        long long mul = 1;
        switch (*end) {
        case 'k': case 'K': mul = 1LL << 10; break;
        case 'm': case 'M': mul = 1LL << 20; break;
        case 'g': case 'G': mul = 1LL << 30; break;
        default:
            cl_fail("invalid value for --%s: '%s' (expected a size like 64, 4K, 400M, 1G)", name, s);
        }
        end++;
        if (*end == 'B' || *end == 'b')
            end++;
        if (v > LLONG_MAX / mul || v < LLONG_MIN / mul)
            cl_fail("value for --%s is out of range: '%s'", name, s);
        v *= mul;
    }
    if (*end)
        cl_fail("invalid value for --%s: '%s' (expected an integer)", name, s);
    return v;
}

CL_STATIC void cl_usage(const cl_flag *flags)
{
    printf("usage: %s [flags]\n", cl_prog);
    for (const cl_flag *f = flags; f->name; f++)
        printf("  --%-16s %s (default %lld)\n", f->name, f->help, *f->val);
    printf("  --%-16s %s (default %lld)\n", "seed", "PRNG seed", cl_seed);
    printf("  --%-16s %s (default %lld)\n", "extra-work",
           "units of fixed CPU work (volatile loop iterations) added per operation", cl_extra_work);
}

/*
 * Parse argv against `flags` (terminated by CL_END).  --seed and --extra-work
 * are always accepted.  Unknown flags, positional arguments, malformed or
 * out-of-range values all go through cl_fail (exit 2).
 */
CL_STATIC void cl_parse(const char *prog, int argc, char **argv, cl_flag *flags)
{
    cl_prog = prog;
    static cl_flag common[] = {
        {"seed", CL_INT, &cl_seed, 0, LLONG_MAX, "PRNG seed", 0},
        {"extra-work", CL_INT, &cl_extra_work, 0, 1LL << 40, "extra CPU work per op", 0},
        CL_END,
    };
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            cl_usage(flags);
            exit(0);
        }
        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0')
            cl_fail("unexpected argument '%s' (flags look like --name=value)", arg);
        const char *name = arg + 2;
        const char *eq = strchr(name, '=');
        size_t nlen = eq ? (size_t)(eq - name) : strlen(name);

        cl_flag *f = NULL;
        for (cl_flag *t = flags; t->name && !f; t++)
            if (strlen(t->name) == nlen && !strncmp(t->name, name, nlen))
                f = t;
        for (cl_flag *t = common; t->name && !f; t++)
            if (strlen(t->name) == nlen && !strncmp(t->name, name, nlen))
                f = t;
        if (!f)
            cl_fail("unknown flag --%.*s (run with --help for the list)", (int)nlen, name);

        const char *value;
        if (eq) {
            value = eq + 1;
        } else if (f->kind == CL_BOOL) {
            value = "1";
        } else {
            if (i + 1 >= argc)
                cl_fail("flag --%s needs a value", f->name);
            value = argv[++i];
        }
        if (f->kind == CL_BOOL) {
            if (strcmp(value, "0") && strcmp(value, "1") && strcmp(value, "true") && strcmp(value, "false"))
                cl_fail("invalid value for --%s: '%s' (expected 0/1/true/false)", f->name, value);
            *f->val = (!strcmp(value, "1") || !strcmp(value, "true"));
        } else {
            *f->val = cl_parse_number(f->name, value, f->kind);
        }
        f->set = 1;
    }
    /* Range checks, including defaults (a default is never out of range). */
    for (int pass = 0; pass < 2; pass++) {
        for (cl_flag *f = pass ? common : flags; f->name; f++) {
            if (f->kind == CL_BOOL)
                continue;
            if (*f->val < f->min)
                cl_fail("--%s must be >= %lld, got %lld", f->name, f->min, *f->val);
            if (*f->val > f->max)
                cl_fail("--%s must be <= %lld, got %lld", f->name, f->max, *f->val);
        }
    }
}

/* Was flag `name` given on the command line (after cl_parse)? */
CL_STATIC int cl_was_set(const cl_flag *flags, const char *name)
{
    for (const cl_flag *f = flags; f->name; f++)
        if (!strcmp(f->name, name))
            return f->set;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* PRNG: splitmix64.  Fast, 64-bit state, good enough statistically for a     */
/* benchmark, and trivially seeded per thread ("stream") from one --seed.     */
/* ------------------------------------------------------------------------ */

typedef struct {
    uint64_t s;
} rng_t;

CL_STATIC inline uint64_t rng_next(rng_t *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

CL_STATIC inline void rng_seed(rng_t *r, uint64_t seed, uint64_t stream)
{
    r->s = seed ^ (stream * 0xD1B54A32D192ED03ULL);
    rng_next(r);
}

/* Uniform in [0, n) without modulo bias worth caring about (Lemire). */
CL_STATIC inline uint64_t rng_below(rng_t *r, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)rng_next(r) * n) >> 64);
}

/* Uniform in [lo, hi]. */
CL_STATIC inline uint64_t rng_range(rng_t *r, uint64_t lo, uint64_t hi)
{
    return lo + rng_below(r, hi - lo + 1);
}

/* Uniform double in (0, 1]: never 0, so log() of it is finite. */
CL_STATIC inline double rng_unit(rng_t *r)
{
    return ((rng_next(r) >> 11) + 1) * (1.0 / 9007199254740992.0);
}

/* ------------------------------------------------------------------------ */
/* Tiny libm replacements (the build line has no -lm).                        */
/* ------------------------------------------------------------------------ */

/* Natural log, x > 0.  ~1e-12 relative accuracy, plenty for distributions. */
CL_STATIC double cm_log(double x)
{
    union { double d; uint64_t u; } v = {x};
    int e = (int)((v.u >> 52) & 0x7ff) - 1023;
    v.u = (v.u & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL; /* mantissa in [1,2) */
    double m = v.d;
    if (m > 1.41421356237309504880) { m *= 0.5; e++; }   /* m in [0.707, 1.414) */
    double t = (m - 1.0) / (m + 1.0), t2 = t * t, term = t, sum = 0.0;
    for (int k = 1; k < 40; k += 2) { sum += term / k; term *= t2; }
    return 2.0 * sum + e * 0.69314718055994530942;
}

/* e^x for moderate x (|x| < 700). */
CL_STATIC double cm_exp(double x)
{
    int k = (int)(x / 0.69314718055994530942 + (x >= 0 ? 0.5 : -0.5));
    double r = x - k * 0.69314718055994530942, term = 1.0, sum = 1.0;
    for (int i = 1; i < 20; i++) { term *= r / i; sum += term; }
    union { double d; uint64_t u; } s;
    s.u = (uint64_t)(k + 1023) << 52;
    return sum * s.d;
}

/*
 * Size distribution skewed towards small sizes: log-uniform over [min, max]
 * with the uniform variate raised to `skew` (skew=1: log-uniform, i.e. density
 * ~1/size, a power law; skew>1: even more small objects).  Real programs
 * allocate many small and few large objects; a flat uniform distribution
 * would be dominated by large sizes.  Precomputed into a 1024-quantile table
 * so drawing is two table reads and a multiply (no log/exp per operation).
 */
#define SIZEDIST_N 1024
typedef struct {
    uint32_t q[SIZEDIST_N + 1];
} sizedist_t;

CL_STATIC void sizedist_init(sizedist_t *d, uint64_t min, uint64_t max, double skew)
{
    double lmin = cm_log((double)min), lmax = cm_log((double)max);
    for (int i = 0; i <= SIZEDIST_N; i++) {
        double u = (double)i / SIZEDIST_N, w = u;
        for (double s = skew; s > 1.0; s -= 1.0) /* u^skew for integer skew */
            w *= u;
        double v = cm_exp(lmin + (lmax - lmin) * w);
        uint64_t q = (uint64_t)(v + 0.5);
        if (q < min) q = min;
        if (q > max) q = max;
        d->q[i] = (uint32_t)q;
    }
}

CL_STATIC inline size_t sizedist_draw(const sizedist_t *d, rng_t *r)
{
    uint64_t x = rng_next(r);
    uint32_t i = (uint32_t)(x >> 54); /* top 10 bits: bucket */
    uint32_t lo = d->q[i], hi = d->q[i + 1];
    return lo + (size_t)(((x & 0xffffffffULL) * (uint64_t)(hi - lo + 1)) >> 32);
}

/* ------------------------------------------------------------------------ */
/* Clock                                                                     */
/* ------------------------------------------------------------------------ */

CL_STATIC inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

CL_STATIC inline double secs_since(uint64_t t0)
{
    return (now_ns() - t0) / 1e9;
}

CL_STATIC void sleep_ms(long long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

/* ------------------------------------------------------------------------ */
/* RSS from /proc/self/statm, with open/read (fopen would malloc).           */
/* ------------------------------------------------------------------------ */

CL_STATIC long long rss_kb(void)
{
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    char *p = buf;
    strtoll(p, &p, 10);                 /* field 1: total program size */
    long long pages = strtoll(p, NULL, 10); /* field 2: resident */
    return pages * (sysconf(_SC_PAGESIZE) / 1024);
}

/* ------------------------------------------------------------------------ */
/* Work helpers                                                              */
/* ------------------------------------------------------------------------ */

/*
 * N units of fixed CPU work that touch no heap memory: a loop over a local
 * volatile, so the compiler can neither remove nor vectorise it.  One unit is
 * one load-add-store round trip (about 1-2 ns).  Used by --extra-work to
 * inject a known, allocator-independent slowdown.
 */
CL_STATIC inline void extra_work(long long n)
{
    volatile uint64_t x = 0;
    for (long long i = 0; i < n; i++)
        x = x + (uint64_t)i;
}

/* Make the compiler believe `p` escapes, so malloc/free pairs are not elided. */
CL_STATIC inline void escape(void *p)
{
    __asm__ volatile("" : : "g"(p) : "memory");
}

/*
 * Touch an allocation the way a program that uses it would: write the first
 * bytes and one byte per 4 KiB page.  This makes page faults, and so the
 * allocator's decisions about reusing vs. returning pages, show up in time
 * and RSS.
 */
CL_STATIC inline void touch(void *p, size_t n)
{
    char *c = (char *)p;
    if (n == 0)
        return;
    size_t head = n < 64 ? n : 64;
    memset(c, 0xA5, head);
    for (size_t off = 4096; off < n; off += 4096)
        c[off] = (char)off;
    c[n - 1] = 1;
}

/*
 * Write the first word of a small object, as its user initialises a header
 * or a length: one store, so the workload costs little next to the
 * allocator, yet the object is really used (a fresh page still faults).
 */
CL_STATIC inline void touch_first(void *p, size_t n)
{
    if (n >= sizeof(uint64_t))
        *(volatile uint64_t *)p = (uint64_t)n;
    else
        memset(p, 0xA5, n);
}

/* ------------------------------------------------------------------------ */
/* Allocator release call, found at run time without linking any allocator.  */
/* ------------------------------------------------------------------------ */

/*
 * Which "give memory back to the OS now" call the running allocator has.
 * Allocator-specific names come first: glibc's malloc_trim is always visible
 * through RTLD_DEFAULT (libc is loaded even when another malloc is
 * preloaded), and calling it under tcmalloc would trim glibc's unused heap,
 * not the allocator in use.
 */
CL_STATIC const char *alloc_release_name(void)
{
    static const char *names[] = {
        "MallocExtension_ReleaseFreeMemory", /* gperftools tcmalloc */
        "mallctl",                           /* jemalloc (Debian: unprefixed) */
        "je_mallctl",                        /* jemalloc built with je_ prefix */
        "mi_collect",                        /* mimalloc */
        "malloc_trim",                       /* glibc */
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (dlsym(RTLD_DEFAULT, names[i]))
            return names[i];
    return NULL;
}

/* Call it; returns the name used, or NULL if the allocator has none. */
CL_STATIC const char *alloc_release(void)
{
    const char *name = alloc_release_name();
    if (!name)
        return NULL;
    void *sym = dlsym(RTLD_DEFAULT, name);
    if (!strcmp(name, "MallocExtension_ReleaseFreeMemory")) {
        ((void (*)(void))sym)();
    } else if (!strcmp(name, "mallctl") || !strcmp(name, "je_mallctl")) {
        typedef int (*mallctl_fn)(const char *, void *, size_t *, void *, size_t);
        mallctl_fn mallctl = (mallctl_fn)sym;
        mallctl("thread.tcache.flush", NULL, NULL, NULL, 0);
        /* 4096 == MALLCTL_ARENAS_ALL: purge unused dirty pages of every arena. */
        mallctl("arena.4096.purge", NULL, NULL, NULL, 0);
    } else if (!strcmp(name, "mi_collect")) {
        ((void (*)(bool))sym)(true);
    } else { /* malloc_trim */
        ((int (*)(size_t))sym)(0);
    }
    return name;
}

/* ------------------------------------------------------------------------ */
/* One JSON line on stdout                                                   */
/* ------------------------------------------------------------------------ */

static char json_buf[8192];
static size_t json_len;

CL_STATIC void json_raw(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(json_buf + json_len, sizeof json_buf - json_len, fmt, ap);
    va_end(ap);
    if (n > 0)
        json_len += (size_t)n;
    if (json_len >= sizeof json_buf)
        json_len = sizeof json_buf - 1;
}

CL_STATIC void json_key(const char *key)
{
    json_raw("%s\"%s\":", json_len > 1 ? "," : "", key);
}

CL_STATIC void json_begin(const char *workload)
{
    json_len = 0;
    json_raw("{");
    json_key("workload");
    json_raw("\"%s\"", workload);
}

CL_STATIC void json_int(const char *key, long long v)
{
    json_key(key);
    json_raw("%lld", v);
}

/* Non-finite numbers are not JSON: they become null. */
CL_STATIC void json_num(const char *key, double v)
{
    json_key(key);
    if (v != v || v > 1.7e308 || v < -1.7e308)
        json_raw("null");
    else
        json_raw("%.9g", v);
}

CL_STATIC void json_str(const char *key, const char *s)
{
    json_key(key);
    if (s)
        json_raw("\"%s\"", s); /* callers pass identifiers only: no escaping needed */
    else
        json_raw("null");
}

CL_STATIC void json_null(const char *key)
{
    json_key(key);
    json_raw("null");
}

/* The common tail (seed, extra_work), closing brace, newline, one write. */
CL_STATIC void json_end(void)
{
    json_int("seed", cl_seed);
    json_int("extra_work", cl_extra_work);
    json_raw("}\n");
    size_t off = 0;
    while (off < json_len) {
        ssize_t n = write(1, json_buf + off, json_len - off);
        if (n <= 0) {
            if (n < 0 && errno == EINTR)
                continue;
            break;
        }
        off += (size_t)n;
    }
}

/* ------------------------------------------------------------------------ */
/* Misc                                                                      */
/* ------------------------------------------------------------------------ */

CL_STATIC int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* p-th percentile (0..1) of a sorted array, nearest-rank. */
CL_STATIC uint64_t percentile_sorted(const uint64_t *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    size_t idx = (size_t)(p * (double)n);
    if (idx >= n)
        idx = n - 1;
    return v[idx];
}

CL_STATIC void start_thread(pthread_t *t, void *(*fn)(void *), void *arg)
{
    if (pthread_create(t, NULL, fn, arg) != 0)
        cl_die("pthread_create");
}

#endif /* ALLOCLAB_COMMON_H */
