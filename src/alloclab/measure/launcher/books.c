/* The allocator's own books, read by the interposer's helper thread at a sample (fingerprint.c):
 * where the process's anonymous memory sits, by whom it is held and why.
 *
 * Generic, from /proc/self/smaps (every allocator): the anonymous bytes of the whole process, and of
 * the mappings that are not the allocator's: stacks (the main one, and each thread's, seen at its
 * first allocation), the libraries' written pages, the interposer's own tables and helper stack,
 * and, under glibc, anonymous mappings of the program's own. The rest is the allocator's.
 *
 * The allocator's, through its public interface (the symbol taken from the object that serves
 * malloc, as for the two totals every sample carries):
 *   glibc      malloc_info() into a FILE opened at start over a static buffer (fmemopen, no buffer
 *              of its own): per arena its system bytes, free bytes in fastbins and other bins, and
 *              the top chunk (since 2.31 "rest" holds the top without listing it: top = rest + fast
 *              less every listed size); mapped chunks as a process total. The resident part of the
 *              heaps, of each arena's top chunk and of the mapped chunks, with mincore: a top pad
 *              is address space, mostly never touched. The thresholds as they stand: glibc raises
 *              its mmap threshold to a mapped chunk's size when it frees one above it (at most
 *              32 MiB), and its trim threshold to twice that, unless any of the four settings was
 *              given (environment, GLIBC_TUNABLES or mallopt);
 *   jemalloc   mallctl of the names in ALLOCLAB_FP_BOOKS_MALLCTL, after an epoch refresh;
 *   gperftools MallocExtension_GetNumericProperty of the names in ALLOCLAB_FP_BOOKS_PROPERTY;
 *   mimalloc   mi_process_info's committed bytes (2.0 splits nothing further).
 * The names come from the catalog (catalog/allocators.toml, [allocators.NAME.books]).
 *
 * The helper thread never calls malloc: under glibc its first malloc would make an arena for it,
 * whose trims the system-call count would read as the program's. glibc's internals read here (a
 * heap's header, an arena's top) are read with process_vm_readv, which fails rather than faults
 * where a heap went away meanwhile, and each is checked against the others before it is used. */
#define _GNU_SOURCE
#include "books.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* Each interface's function and the words of its per-sample reading are the catalog's
 * ([allocators.NAME.books] entry and sampled_as), handed in by the build (measure/fingerprint.py). */
#if !defined(BOOKS_MALLOC_INFO_ENTRY) || !defined(BOOKS_MALLCTL_ENTRY) || !defined(BOOKS_PROPERTY_ENTRY) || \
    !defined(BOOKS_MI_PROCESS_INFO_ENTRY)
#error "books.c is built by measure/fingerprint.py with the catalog's books (-DBOOKS_..._ENTRY, _SAMPLED)"
#endif

HIDDEN int as_kind = AS_UNRESOLVED;
HIDDEN const char *const AS_NAME[] = {"none", BOOKS_MALLOC_INFO_SAMPLED, BOOKS_MALLCTL_SAMPLED, BOOKS_PROPERTY_SAMPLED,
                                      BOOKS_MI_PROCESS_INFO_SAMPLED};
HIDDEN int64_t as_allocated = -1, as_held = -1;

struct mallinfo2_ { size_t arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks, uordblks, fordblks, keepcost; };
static struct mallinfo2_ (*as_mallinfo2)(void);
static int (*as_malloc_info)(int, FILE *);
static int (*as_mallctl)(const char *, void *, size_t *, void *, size_t);
static int (*as_tc_prop)(const char *, size_t *);
static void (*as_mi_info)(size_t *, size_t *, size_t *, size_t *, size_t *, size_t *, size_t *, size_t *);

/* --- finding the allocator ---------------------------------------------------------------------- */

/* `name` as defined by the object at `base` itself, not by one of its dependencies. */
static void *own_sym(void *h, const void *base, const char *name) {
    void *f = dlsym(h, name);
    Dl_info i;
    return f && dladdr(f, &i) && i.dli_fbase == base ? f : NULL;
}

/* Called at start, with allocations not counted. Not from the helper thread (see above). */
HIDDEN void books_resolve(void *next_malloc) {
    as_kind = AS_NONE;
    Dl_info mi;
    if (!next_malloc || !dladdr(next_malloc, &mi) || !mi.dli_fname || !mi.dli_fname[0]) return;
    void *h = dlopen(mi.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    if (!h) return;
    if ((as_mallctl = own_sym(h, mi.dli_fbase, BOOKS_MALLCTL_ENTRY))) as_kind = AS_JEMALLOC;
    else if ((as_tc_prop = own_sym(h, mi.dli_fbase, BOOKS_PROPERTY_ENTRY))) as_kind = AS_TCMALLOC;
    else if ((as_mi_info = own_sym(h, mi.dli_fbase, BOOKS_MI_PROCESS_INFO_ENTRY))) as_kind = AS_MIMALLOC;
    else if ((as_mallinfo2 = own_sym(h, mi.dli_fbase, "mallinfo2"))) {
        as_kind = AS_GLIBC;
        as_malloc_info = own_sym(h, mi.dli_fbase, BOOKS_MALLOC_INFO_ENTRY);
    } else if (strstr(mi.dli_fname, "alloclab-glibc-forward")) {
        /* alloclab's forwarding preload hands every call to glibc's own malloc (launcher/forward.c). */
        void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
        if (libc && (as_mallinfo2 = dlsym(libc, "mallinfo2"))) {
            as_kind = AS_GLIBC;
            as_malloc_info = dlsym(libc, BOOKS_MALLOC_INFO_ENTRY);
        }
    }
    dlclose(h);
}

HIDDEN void read_stats(void) {
    size_t a = 0, b = 0, c = 0, sz = sizeof(size_t);
    as_allocated = as_held = -1;
    switch (as_kind) {
    case AS_GLIBC: {
        struct mallinfo2_ m = as_mallinfo2();
        as_allocated = (int64_t)(m.uordblks + m.hblkhd);
        as_held = (int64_t)(m.arena + m.hblkhd);
        break;
    }
    case AS_JEMALLOC: {
        uint64_t epoch = 1;   /* the statistics are a snapshot refreshed by writing the epoch */
        as_mallctl("epoch", NULL, NULL, &epoch, sizeof epoch);
        if (as_mallctl("stats.allocated", &a, &sz, NULL, 0) == 0) as_allocated = (int64_t)a;
        sz = sizeof(size_t);
        if (as_mallctl("stats.resident", &b, &sz, NULL, 0) == 0) as_held = (int64_t)b;
        break;
    }
    case AS_TCMALLOC:
        if (as_tc_prop("generic.current_allocated_bytes", &a)) as_allocated = (int64_t)a;
        if (as_tc_prop("generic.heap_size", &b)) {
            if (!as_tc_prop("tcmalloc.pageheap_unmapped_bytes", &c)) c = 0;
            as_held = (int64_t)(b - c);
        }
        break;
    case AS_MIMALLOC: {
        size_t e, u, s, rss, prss, commit = 0, pcommit, pf;
        as_mi_info(&e, &u, &s, &rss, &prss, &commit, &pcommit, &pf);
        as_held = (int64_t)commit;
        break;
    }
    default:
        break;
    }
}

/* --- the names read ----------------------------------------------------------------------------- */

enum { B_ANON, B_STACKS, B_LIBRARIES, B_INTERPOSER, B_OWN_MAPS, B_ALLOCATOR_MAPS, B_LIVE, B_LIVE_BLOCKS, B_GENERIC };
static const char *const GENERIC[B_GENERIC] = {"anon", "stacks", "libraries", "interposer", "own_maps",
                                              "allocator_maps", "live", "live_blocks"};
enum { G_ARENAS = B_GENERIC, G_SYSTEM, G_FAST, G_BINS, G_TOP, G_MAIN_TOP, G_ARENA_FREE, G_MMAP_COUNT, G_MMAP_BYTES,
       G_HEAP_RES, G_TOP_RES, G_MAPPED_RES, G_MMAP_THRESHOLD, G_TRIM_THRESHOLD, G_FIXED, G_RAISED_BY, G_RAISED_AT,
       G_END };
static const char *const GLIBC[G_END - B_GENERIC] = {
    "arenas", "system", "fast", "bins", "top", "main_top", "arena_free", "mmap_count", "mmap_bytes",
    "heap_resident", "top_resident", "mapped_resident", "mmap_threshold", "trim_threshold", "thresholds_fixed",
    "raised_by", "raised_at_ms"};
static const char *const MIMALLOC[] = {"commit", "peak_commit"};

static char names_buf[2048];
static const char *names[BOOKS_MAX];
static int nnames;

/* "a,b,c" (from the environment) into names after the generic ones. */
static void names_from(const char *list) {
    if (!list) return;
    size_t n = strlen(list);
    if (n >= sizeof names_buf) return;
    memcpy(names_buf, list, n + 1);
    char *s = names_buf;
    while (*s && nnames < BOOKS_MAX) {
        char *comma = strchr(s, ',');
        if (comma) *comma = 0;
        if (*s) names[nnames++] = s;
        if (!comma) break;
        s = comma + 1;
    }
}

HIDDEN int books_count(void) { return nnames; }
HIDDEN const char *books_name(int i) { return i >= 0 && i < nnames ? names[i] : ""; }

/* The interface read (the catalog's name for it). */
HIDDEN const char *books_source(void) {
    switch (as_kind) {
    case AS_GLIBC: return "malloc_info";
    case AS_JEMALLOC: return "mallctl";
    case AS_TCMALLOC: return "property";
    case AS_MIMALLOC: return "mi_process_info";
    default: return "none";
    }
}

/* --- glibc: its thresholds, as glibc moves them -------------------------------------------------- */

#define DEFAULT_MMAP_THRESHOLD (128 * 1024)
#define MMAP_THRESHOLD_MAX (32u << 20)       /* DEFAULT_MMAP_THRESHOLD_MAX on 64-bit */
#define HEAP_MAX ((uintptr_t)64 << 20)       /* a non-main arena's heap: 2 x the above, aligned to it */
#define IS_MMAPPED 2
#define NON_MAIN_ARENA 4
#define TOP_OFFSET 96                        /* malloc_state.top on 64-bit since 2.26; checked before use */

static size_t mmap_threshold = DEFAULT_MMAP_THRESHOLD, trim_threshold = DEFAULT_MMAP_THRESHOLD;
static int thresholds_fixed;
static size_t raised_by;
static uint64_t raised_at_ns, start_ns_books;

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int size_value(const char *s, size_t *out) {
    if (!s || !*s) return 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 0);
    if (end == s) return 0;
    *out = (size_t)v;
    return 1;
}

/* A setting as glibc takes it: any of the four turns the dynamic thresholds off. */
static void glibc_setting(const char *name, const char *value) {
    size_t v;
    if (!size_value(value, &v)) return;
    if (!strcmp(name, "trim_threshold")) { trim_threshold = v; thresholds_fixed = 1; }
    else if (!strcmp(name, "top_pad")) thresholds_fixed = 1;
    else if (!strcmp(name, "mmap_max")) thresholds_fixed = 1;
    else if (!strcmp(name, "mmap_threshold") && v <= MMAP_THRESHOLD_MAX) { mmap_threshold = v; thresholds_fixed = 1; }
}

static void glibc_settings_from_env(void) {
    static const char *const env[][2] = {{"MALLOC_TRIM_THRESHOLD_", "trim_threshold"}, {"MALLOC_TOP_PAD_", "top_pad"},
                                         {"MALLOC_MMAP_THRESHOLD_", "mmap_threshold"}, {"MALLOC_MMAP_MAX_", "mmap_max"}};
    for (unsigned i = 0; i < sizeof env / sizeof env[0]; i++) glibc_setting(env[i][1], getenv(env[i][0]));
    const char *t = getenv("GLIBC_TUNABLES");
    if (!t) return;
    /* glibc.malloc.NAME=VALUE:...; a tunable given twice ends with its last value, as glibc reads it */
    static const char prefix[] = "glibc.malloc.";
    for (const char *s = t; *s;) {
        const char *end = strchr(s, ':');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        char item[128];
        if (len < sizeof item && !strncmp(s, prefix, sizeof prefix - 1)) {
            memcpy(item, s, len);
            item[len] = 0;
            char *eq = strchr(item, '=');
            if (eq) { *eq = 0; glibc_setting(item + sizeof prefix - 1, eq + 1); }
        }
        if (!end) break;
        s = end + 1;
    }
}

HIDDEN void books_mallopt(int param, int value) {
    if (as_kind != AS_GLIBC) return;
    switch (param) {
    case -1: trim_threshold = (size_t)value; thresholds_fixed = 1; break;                     /* M_TRIM_THRESHOLD */
    case -2: thresholds_fixed = 1; break;                                                     /* M_TOP_PAD */
    case -3: if ((size_t)value <= MMAP_THRESHOLD_MAX) { mmap_threshold = (size_t)value; thresholds_fixed = 1; } break;
    case -4: thresholds_fixed = 1; break;                                                     /* M_MMAP_MAX */
    default: break;
    }
}

/* --- glibc: mapped chunks and arena heaps the program's blocks live in ----------------------------- */

#define MAPPED_SLOTS 8192
#define TOMB ((uintptr_t)1)
static uintptr_t mapped_at[MAPPED_SLOTS];    /* a mapped block's address (0 free, 1 a tombstone) */
static size_t mapped_len[MAPPED_SLOTS];      /* its chunk's size */
static uint64_t mapped_lost;

static inline uint32_t slot_of(uintptr_t p) { return (uint32_t)((p >> 12) * 0x9E3779B1u) & (MAPPED_SLOTS - 1); }

static void mapped_add(uintptr_t p, size_t len) {
    uint32_t at = slot_of(p);
    for (int i = 0; i < 64; i++) {
        uint32_t k = (at + (uint32_t)i) & (MAPPED_SLOTS - 1);
        uintptr_t cur = __atomic_load_n(&mapped_at[k], __ATOMIC_ACQUIRE);
        if (cur > TOMB) continue;
        __atomic_store_n(&mapped_len[k], len, __ATOMIC_RELAXED);
        if (__atomic_compare_exchange_n(&mapped_at[k], &cur, p, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) return;
    }
    __atomic_fetch_add(&mapped_lost, 1, __ATOMIC_RELAXED);
}

static void mapped_forget(uintptr_t p) {
    uint32_t at = slot_of(p);
    for (int i = 0; i < 64; i++) {
        uint32_t k = (at + (uint32_t)i) & (MAPPED_SLOTS - 1);
        uintptr_t cur = p;
        if (__atomic_compare_exchange_n(&mapped_at[k], &cur, TOMB, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) return;
        if (cur == 0) return;
    }
}

#define HEAPS_MAX 1024
static uintptr_t heaps[HEAPS_MAX];
static uint32_t nheaps;
static __thread uintptr_t last_heap __attribute__((tls_model("initial-exec")));

static void heap_seen(uintptr_t h) {
    if (h == last_heap) return;
    last_heap = h;
    uint32_t n = __atomic_load_n(&nheaps, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < n && i < HEAPS_MAX; i++)
        if (__atomic_load_n(&heaps[i], __ATOMIC_RELAXED) == h) return;
    uint32_t i = __atomic_fetch_add(&nheaps, 1, __ATOMIC_ACQ_REL);
    if (i < HEAPS_MAX) __atomic_store_n(&heaps[i], h, __ATOMIC_RELEASE);
}

static inline size_t chunk_word(void *p) { return ((size_t *)p)[-1]; }

HIDDEN void books_alloc_seen(void *p, size_t usable) {
    if (as_kind != AS_GLIBC || !p) return;
    size_t w = chunk_word(p);
    if (w & IS_MMAPPED) mapped_add((uintptr_t)p, usable + 2 * sizeof(size_t));
    else if (w & NON_MAIN_ARENA) heap_seen((uintptr_t)p & ~(HEAP_MAX - 1));
}

/* Before glibc frees (frees = 1) or reallocates (0) a block: a mapped chunk leaves the table, and
 * its free moves the thresholds as glibc's __libc_free does (a realloc moves neither). */
HIDDEN void books_free_seen(void *p, size_t usable, int frees) {
    (void)usable;
    if (as_kind != AS_GLIBC || !p) return;
    size_t w = chunk_word(p);
    if (!(w & IS_MMAPPED)) return;
    mapped_forget((uintptr_t)p);
    /* glibc compares the size word with its flag bits, and keeps the size without them */
    if (frees && !thresholds_fixed && w > mmap_threshold && w <= MMAP_THRESHOLD_MAX) {
        mmap_threshold = w & ~(size_t)7;
        trim_threshold = 2 * mmap_threshold;
        raised_by = mmap_threshold;
        raised_at_ns = mono_ns();
    }
}

/* --- stacks and the interposer's own memory -------------------------------------------------------- */

#define STACKS_MAX 1024
static uintptr_t stacks[STACKS_MAX];
static uint32_t nstacks;
static uintptr_t own_stack, self_lo, self_hi;

HIDDEN void books_stack_seen(void *addr, int own) {
    if (own) { own_stack = (uintptr_t)addr; return; }
    uint32_t i = __atomic_fetch_add(&nstacks, 1, __ATOMIC_ACQ_REL);
    if (i < STACKS_MAX) __atomic_store_n(&stacks[i], (uintptr_t)addr, __ATOMIC_RELEASE);
}

/* The interposer's writable segment (its tables live in its .bss). */
static int find_self(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    uintptr_t me = (uintptr_t)data;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD) continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (me >= lo && me < hi) { self_lo = lo; self_hi = hi; return 1; }
    }
    return 0;
}

/* --- reading memory safely, and residency ---------------------------------------------------------- */

static int safe_read(uintptr_t at, void *out, size_t n) {
    struct iovec local = {out, n}, remote = {(void *)at, n};
    return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)n;
}

static unsigned char mvec[16384];
static long page_size = 4096;

/* Resident bytes of [lo, hi): mincore, a window at a time; an unmapped window counts nothing. */
static uint64_t resident(uintptr_t lo, uintptr_t hi) {
    uintptr_t mask = (uintptr_t)page_size - 1;
    lo &= ~mask;
    hi = (hi + mask) & ~mask;
    uint64_t pages = 0;
    while (lo < hi) {
        size_t len = hi - lo, most = sizeof mvec * (size_t)page_size;
        if (len > most) len = most;
        if (mincore((void *)lo, len, mvec) == 0)
            for (size_t i = 0, n = len / (size_t)page_size; i < n; i++) pages += mvec[i] & 1;
        lo += len;
    }
    return pages * (uint64_t)page_size;
}

/* --- /proc/self/smaps ------------------------------------------------------------------------------ */

enum { V_ANON, V_FILE, V_HEAP, V_STACK, V_SPECIAL };
enum { C_NONE, C_STACK, C_LIBRARY, C_INTERPOSER, C_OWN, C_ALLOCATOR };
struct vma { uintptr_t lo, hi; uint64_t anon, bss; unsigned char kind, class_; };
#define VMAS_MAX 8192
static struct vma vmas[VMAS_MAX];
static int nvmas, vmas_truncated;
static char sm_buf[65536];

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

static void smaps_line(char *line) {
    if (hexval(line[0]) >= 0) {                 /* "lo-hi perms offset dev inode   path" */
        char *s = line;
        uintptr_t lo = 0, hi = 0;
        int d;
        while ((d = hexval(*s)) >= 0) lo = lo * 16 + (uintptr_t)d, s++;
        if (*s != '-') return;
        s++;
        while ((d = hexval(*s)) >= 0) hi = hi * 16 + (uintptr_t)d, s++;
        if (nvmas == VMAS_MAX) { vmas_truncated = 1; return; }
        for (int field = 0; field < 3; field++) {   /* perms, offset, dev */
            while (*s == ' ') s++;
            while (*s && *s != ' ') s++;
        }
        while (*s == ' ') s++;
        unsigned long inode = 0;
        while (*s >= '0' && *s <= '9') inode = inode * 10 + (unsigned long)(*s++ - '0');
        while (*s == ' ') s++;
        unsigned char kind = V_ANON;
        if (inode || *s == '/') kind = V_FILE;
        else if (!strncmp(s, "[heap]", 6)) kind = V_HEAP;
        else if (!strncmp(s, "[stack]", 7)) kind = V_STACK;
        else if (*s == '[' && strncmp(s, "[anon:", 6)) kind = V_SPECIAL;
        vmas[nvmas++] = (struct vma){lo, hi, 0, 0, kind, C_NONE};
    } else if (!strncmp(line, "Anonymous:", 10) && nvmas) {
        char *s = line + 10;
        while (*s == ' ') s++;
        uint64_t kb = 0;
        while (*s >= '0' && *s <= '9') kb = kb * 10 + (uint64_t)(*s++ - '0');
        vmas[nvmas - 1].anon = kb * 1024;
    }
}

static int read_smaps(void) {
    nvmas = vmas_truncated = 0;
    int fd = open("/proc/self/smaps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    size_t have = 0;
    for (;;) {
        ssize_t got = read(fd, sm_buf + have, sizeof sm_buf - 1 - have);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        have += (size_t)got;
        sm_buf[have] = 0;
        char *line = sm_buf, *nl;
        while ((nl = memchr(line, '\n', have - (size_t)(line - sm_buf)))) {
            *nl = 0;
            smaps_line(line);
            line = nl + 1;
        }
        have -= (size_t)(line - sm_buf);
        memmove(sm_buf, line, have);
        if (have == sizeof sm_buf - 1) have = 0;   /* a line longer than the buffer: drop it */
    }
    close(fd);
    return nvmas > 0;
}

static struct vma *vma_at(uintptr_t a) {
    int lo = 0, hi = nvmas - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (a < vmas[mid].lo) hi = mid - 1;
        else if (a >= vmas[mid].hi) lo = mid + 1;
        else return &vmas[mid];
    }
    return NULL;
}

/* A loaded object's .bss past its file: an anonymous mapping right after its file's, which the
 * kernel may merge with an allocator's mapping placed next to it. Its resident bytes (mincore)
 * are the library's; the rest of that mapping stays the allocator's. */
static int bss_of(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size; (void)data;
    uintptr_t mask = (uintptr_t)page_size - 1;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W) || ph->p_memsz <= ph->p_filesz) continue;
        uintptr_t lo = (info->dlpi_addr + ph->p_vaddr + ph->p_filesz + mask) & ~mask;
        uintptr_t hi = (info->dlpi_addr + ph->p_vaddr + ph->p_memsz + mask) & ~mask;
        if (lo >= hi || (lo < self_hi && hi > self_lo)) continue;
        for (uintptr_t at = lo; at < hi;) {
            struct vma *v = vma_at(at);
            if (!v) break;
            uintptr_t end = v->hi < hi ? v->hi : hi;
            if (v->kind == V_ANON) v->bss += resident(at, end);
            at = end;
        }
    }
    return 0;
}

/* --- glibc's books ----------------------------------------------------------------------------------- */

static char mi_buf[1 << 19];
static FILE *mi_file;

static uint64_t attr(const char *line, const char *key) {
    const char *s = strstr(line, key);
    if (!s) return 0;
    s += strlen(key);
    uint64_t v = 0;
    while (*s >= '0' && *s <= '9') v = v * 10 + (uint64_t)(*s++ - '0');
    return v;
}

struct arena_books { uint64_t system, fast, listed, rest; };

/* malloc_info's text, per arena (the first is the main arena) and the mapped chunks. */
static int glibc_books(int64_t *out) {
    if (!as_malloc_info || !mi_file) return 0;
    rewind(mi_file);
    clearerr(mi_file);
    as_malloc_info(0, mi_file);
    long len = ftell(mi_file);
    if (len <= 0 || (size_t)len >= sizeof mi_buf || ferror(mi_file)) return 0;
    mi_buf[len] = 0;
    if (!strstr(mi_buf, "</malloc>")) return 0;
    uint64_t arenas = 0, system = 0, fast = 0, bins = 0, top = 0, main_top = 0, arena_free = 0;
    struct arena_books a = {0, 0, 0, 0};
    int in_heap = 0;
    for (char *line = mi_buf; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        if (!strncmp(line, "<heap ", 6)) { in_heap = 1; a = (struct arena_books){0, 0, 0, 0}; }
        else if (in_heap && (strstr(line, "<size ") || strstr(line, "<unsorted "))) a.listed += attr(line, "total=\"");
        else if (in_heap && strstr(line, "<total type=\"fast\"")) a.fast = attr(line, "size=\"");
        else if (in_heap && strstr(line, "<total type=\"rest\"")) a.rest = attr(line, "size=\"");
        else if (in_heap && strstr(line, "<system type=\"current\"")) a.system = attr(line, "size=\"");
        else if (in_heap && !strncmp(line, "</heap>", 7)) {
            uint64_t t = a.rest + a.fast > a.listed ? a.rest + a.fast - a.listed : 0;
            if (arenas == 0) main_top = t;
            else arena_free += a.rest + a.fast;
            arenas++;
            system += a.system;
            fast += a.fast;
            bins += a.listed > a.fast ? a.listed - a.fast : 0;
            top += t;
            in_heap = 0;
        } else if (!in_heap && strstr(line, "<total type=\"mmap\"")) {
            out[G_MMAP_COUNT] = (int64_t)attr(line, "count=\"");
            out[G_MMAP_BYTES] = (int64_t)attr(line, "size=\"");
        }
        line = nl ? nl + 1 : NULL;
    }
    out[G_ARENAS] = (int64_t)arenas;
    out[G_SYSTEM] = (int64_t)system;
    out[G_FAST] = (int64_t)fast;
    out[G_BINS] = (int64_t)bins;
    out[G_TOP] = (int64_t)top;
    out[G_MAIN_TOP] = (int64_t)main_top;
    out[G_ARENA_FREE] = (int64_t)arena_free;
    return 1;
}

struct heap_info_ { uintptr_t ar_ptr, prev; size_t size, mprotect_size; };

/* The resident bytes of glibc's heaps, of their top chunks and of the mapped chunks; marks the
 * allocator's mappings in vmas. */
static void glibc_resident(int64_t *out) {
    uint64_t heap_res = 0, top_res = 0, mapped_res = 0;
    for (int i = 0; i < nvmas; i++)
        if (vmas[i].kind == V_HEAP) { vmas[i].class_ = C_ALLOCATOR; heap_res += vmas[i].anon; }
    /* The main arena's top ends at the break (its heap is contiguous, grown with brk). */
    if (out[G_MAIN_TOP] > 0) {
        uintptr_t brk = (uintptr_t)sbrk(0), t = brk - (uintptr_t)out[G_MAIN_TOP];
        size_t w;
        if (safe_read(t + sizeof(size_t), &w, sizeof w) && (w & ~(size_t)7) == (size_t)out[G_MAIN_TOP])
            top_res += resident(t, brk);
    }
    /* The other arenas' heaps (seen where the program's blocks live), and each arena's top. */
    uintptr_t arenas_seen[HEAPS_MAX];
    int nseen = 0;
    uint32_t n = __atomic_load_n(&nheaps, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < n && i < HEAPS_MAX; i++) {
        uintptr_t h = __atomic_load_n(&heaps[i], __ATOMIC_ACQUIRE);
        struct vma *v = h ? vma_at(h) : NULL;
        struct heap_info_ hi;
        if (!v || v->kind != V_ANON || !safe_read(h, &hi, sizeof hi) || hi.size > HEAP_MAX) continue;
        /* A heap's pages may lie in several mappings (its first page apart from the rest, seen under
         * kernel 6.18 in a Python process): each within its aligned range is the heap's. */
        size_t span = hi.mprotect_size > hi.size ? hi.mprotect_size : hi.size;
        for (uintptr_t at = h; at < h + span && (v = vma_at(at)) != NULL; at = v->hi)
            if (v->kind == V_ANON && v->class_ != C_ALLOCATOR) { v->class_ = C_ALLOCATOR; heap_res += v->anon; }
        int known = 0;
        for (int k = 0; k < nseen; k++) known |= arenas_seen[k] == hi.ar_ptr;
        if (known || !vma_at(hi.ar_ptr)) continue;
        arenas_seen[nseen++] = hi.ar_ptr;
        uintptr_t top;
        size_t w;
        struct heap_info_ th;
        if (!safe_read(hi.ar_ptr + TOP_OFFSET, &top, sizeof top) || !vma_at(top)) continue;
        uintptr_t th_at = top & ~(HEAP_MAX - 1);
        if (safe_read(top + sizeof(size_t), &w, sizeof w) && safe_read(th_at, &th, sizeof th) &&
            th.ar_ptr == hi.ar_ptr && top + (w & ~(size_t)7) == th_at + th.size)
            top_res += resident(top, top + (w & ~(size_t)7));
    }
    for (uint32_t k = 0; k < MAPPED_SLOTS; k++) {
        uintptr_t p = __atomic_load_n(&mapped_at[k], __ATOMIC_ACQUIRE);
        if (p <= TOMB) continue;
        size_t len = __atomic_load_n(&mapped_len[k], __ATOMIC_RELAXED);
        struct vma *v = vma_at(p);
        if (!v) continue;
        if (v->class_ != C_ALLOCATOR) v->class_ = C_ALLOCATOR;
        mapped_res += resident(p - 2 * sizeof(size_t), p - 2 * sizeof(size_t) + len);
    }
    out[G_HEAP_RES] = (int64_t)heap_res;
    out[G_TOP_RES] = (int64_t)top_res;
    out[G_MAPPED_RES] = mapped_lost ? -1 : (int64_t)mapped_res;
    out[G_MMAP_THRESHOLD] = (int64_t)mmap_threshold;
    out[G_TRIM_THRESHOLD] = (int64_t)trim_threshold;
    out[G_FIXED] = thresholds_fixed;
    out[G_RAISED_BY] = (int64_t)raised_by;
    out[G_RAISED_AT] = raised_at_ns ? (int64_t)((raised_at_ns - start_ns_books) / 1000000) : -1;
}

/* --- at start, and at a sample --------------------------------------------------------------------- */

HIDDEN void books_init(uint64_t start_ns) {
    start_ns_books = start_ns;
    page_size = sysconf(_SC_PAGESIZE);
    dl_iterate_phdr(find_self, (void *)&mapped_at);
    nnames = 0;
    for (int i = 0; i < B_GENERIC; i++) names[nnames++] = GENERIC[i];
    switch (as_kind) {
    case AS_GLIBC:
        for (int i = 0; i < G_END - B_GENERIC; i++) names[nnames++] = GLIBC[i];
        glibc_settings_from_env();
        /* Opened here, in the program's first thread: fmemopen allocates its stream once. With
         * no buffer of its own the stream writes straight into mi_buf. */
        mi_file = fmemopen(mi_buf, sizeof mi_buf, "w");
        if (mi_file) setvbuf(mi_file, NULL, _IONBF, 0);
        break;
    case AS_JEMALLOC: names_from(getenv("ALLOCLAB_FP_BOOKS_MALLCTL")); break;
    case AS_TCMALLOC: names_from(getenv("ALLOCLAB_FP_BOOKS_PROPERTY")); break;
    case AS_MIMALLOC:
        for (unsigned i = 0; i < sizeof MIMALLOC / sizeof MIMALLOC[0]; i++) names[nnames++] = MIMALLOC[i];
        break;
    default: break;
    }
}

HIDDEN void books_after_fork_child(void) {
    nstacks = 0;   /* the parent's other threads are gone; this thread's stack was seen */
    last_heap = 0;
}

HIDDEN void books_read(int64_t *out, int64_t live, int64_t live_blocks) {
    for (int i = 0; i < nnames; i++) out[i] = -1;
    out[B_LIVE] = live;
    out[B_LIVE_BLOCKS] = live_blocks;
    int have_maps = read_smaps();
    if (as_kind == AS_GLIBC && glibc_books(out) && have_maps) glibc_resident(out);
    if (as_kind == AS_JEMALLOC) {
        uint64_t epoch = 1;
        as_mallctl("epoch", NULL, NULL, &epoch, sizeof epoch);
        for (int i = B_GENERIC; i < nnames; i++) {
            size_t v = 0, sz = sizeof v;
            if (as_mallctl(names[i], &v, &sz, NULL, 0) == 0) out[i] = (int64_t)v;
        }
    } else if (as_kind == AS_TCMALLOC) {
        for (int i = B_GENERIC; i < nnames; i++) {
            size_t v = 0;
            if (as_tc_prop(names[i], &v)) out[i] = (int64_t)v;
        }
    } else if (as_kind == AS_MIMALLOC) {
        size_t e, u, s, rss, prss, commit = 0, pcommit = 0, pf;
        as_mi_info(&e, &u, &s, &rss, &prss, &commit, &pcommit, &pf);
        out[B_GENERIC] = (int64_t)commit;
        out[B_GENERIC + 1] = (int64_t)pcommit;
    }
    if (!have_maps || vmas_truncated) return;
    /* Whose each mapping is: the interposer's, a stack, a library's pages, else the allocator's
     * (glibc: only the mappings its heaps and mapped chunks were found in; the others are the
     * program's own). */
    uint32_t ns = __atomic_load_n(&nstacks, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < ns && i < STACKS_MAX; i++) {
        struct vma *v = vma_at(__atomic_load_n(&stacks[i], __ATOMIC_ACQUIRE));
        if (v && v->kind == V_ANON && v->class_ == C_NONE) v->class_ = C_STACK;
    }
    dl_iterate_phdr(bss_of, NULL);
    struct vma *mine = own_stack ? vma_at(own_stack) : NULL;
    if (mine) mine->class_ = C_INTERPOSER;
    uint64_t sums[C_ALLOCATOR + 1] = {0}, anon = 0;
    for (int i = 0; i < nvmas; i++) {
        struct vma *v = &vmas[i];
        anon += v->anon;
        if (v->lo < self_hi && v->hi > self_lo) v->class_ = C_INTERPOSER;
        else if (v->kind == V_STACK) v->class_ = C_STACK;
        else if (v->kind == V_FILE) v->class_ = C_LIBRARY;
        else if (v->class_ == C_NONE && v->kind != V_SPECIAL)
            v->class_ = as_kind == AS_GLIBC && v->kind == V_ANON ? C_OWN : C_ALLOCATOR;
        uint64_t bss = v->class_ == C_INTERPOSER ? 0 : v->bss < v->anon ? v->bss : v->anon;
        sums[C_LIBRARY] += bss;
        sums[v->class_] += v->anon - bss;
    }
    out[B_ANON] = (int64_t)anon;
    out[B_STACKS] = (int64_t)sums[C_STACK];
    out[B_LIBRARIES] = (int64_t)sums[C_LIBRARY];
    out[B_INTERPOSER] = (int64_t)sums[C_INTERPOSER];
    out[B_OWN_MAPS] = as_kind == AS_GLIBC ? (int64_t)sums[C_OWN] : 0;
    out[B_ALLOCATOR_MAPS] = (int64_t)sums[C_ALLOCATOR];
}
