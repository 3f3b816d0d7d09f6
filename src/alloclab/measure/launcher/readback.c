/* alloclab-readback: run beside a preloaded allocator and print the settings it is running with.
 *
 * usage: alloclab-readback QUERY...   where QUERY is METHOD:KEY
 *   mallctl:opt.narenas                       jemalloc's mallctl (integers and booleans)
 *   mallctl-str:opt.thp                       the same, for a string setting
 *   property:tcmalloc.max_total_thread_cache_bytes   gperftools' MallocExtension_GetNumericProperty
 *   glibc:arena        bytes glibc's main arena took from the system (mallinfo2) after the probe's
 *                      first malloc: zero when another allocator serves malloc
 *   glibc:malloc       the file of the malloc that symbol lookup finds first (dladdr)
 * One line per query on stdout: "KEY<TAB>VALUE", or "KEY<TAB>!why" when it cannot be read.
 * The allocator functions are looked up at run time (dlsym), so the probe is built once and
 * runs under any allocator, or none. Settings that a library prints itself (mimalloc's option
 * list under MIMALLOC_VERBOSE=1, glibc's `ld.so --list-tunables`) need no query. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The functions asked are the catalog's books entries, handed in by the build (measure/readback.py). */
#if !defined(BOOKS_MALLCTL_ENTRY) || !defined(BOOKS_PROPERTY_ENTRY)
#error "readback.c is built by measure/readback.py with the catalog's books (-DBOOKS_..._ENTRY)"
#endif

typedef int (*mallctl_fn)(const char *, void *, size_t *, void *, size_t);
typedef int (*property_fn)(const char *, size_t *);

static void read_mallctl(const char *key, int is_string) {
    mallctl_fn mallctl = (mallctl_fn)dlsym(RTLD_DEFAULT, BOOKS_MALLCTL_ENTRY);
    if (!mallctl) { printf("%s\t!no " BOOKS_MALLCTL_ENTRY " in this process\n", key); return; }
    if (is_string) {
        const char *s = NULL; size_t len = sizeof s;
        int rc = mallctl(key, &s, &len, NULL, 0);
        if (rc == 0 && s) printf("%s\t%s\n", key, s);
        else printf("%s\t!" BOOKS_MALLCTL_ENTRY " error %d\n", key, rc);
        return;
    }
    /* jemalloc answers EINVAL and the real size when the buffer's size is wrong. */
    unsigned char buf[8]; size_t len = sizeof buf;
    int rc = mallctl(key, buf, &len, NULL, 0);
    if (rc == EINVAL && len < sizeof buf) rc = mallctl(key, buf, &len, NULL, 0);
    if (rc != 0) { printf("%s\t!" BOOKS_MALLCTL_ENTRY " error %d\n", key, rc); return; }
    if (len == 8) { int64_t v; memcpy(&v, buf, 8); printf("%s\t%lld\n", key, (long long)v); }
    else if (len == 4) { uint32_t v; memcpy(&v, buf, 4); printf("%s\t%u\n", key, v); }
    else if (len == 1) printf("%s\t%s\n", key, buf[0] ? "true" : "false");
    else printf("%s\t!value of %zu bytes\n", key, len);
}

static void read_property(const char *key) {
    property_fn get = (property_fn)dlsym(RTLD_DEFAULT, BOOKS_PROPERTY_ENTRY);
    if (!get) { printf("%s\t!no " BOOKS_PROPERTY_ENTRY " in this process\n", key); return; }
    size_t v = 0;
    if (get(key, &v)) printf("%s\t%zu\n", key, v);
    else printf("%s\t!no such property\n", key);
}

/* struct mallinfo2's first field; declared here so the probe builds against any glibc. */
struct arena_info { size_t arena; size_t rest[9]; };
typedef struct arena_info (*mallinfo2_fn)(void);

static void read_glibc(const char *key) {
    if (!strcmp(key, "arena")) {
        mallinfo2_fn info = (mallinfo2_fn)dlsym(RTLD_DEFAULT, "mallinfo2");
        if (!info) { printf("%s\t!no mallinfo2 (glibc before 2.33)\n", key); return; }
        printf("%s\t%zu\n", key, info().arena);
    } else if (!strcmp(key, "malloc")) {
        Dl_info where;
        void *fn = dlsym(RTLD_DEFAULT, "malloc");
        if (fn && dladdr(fn, &where) && where.dli_fname) printf("%s\t%s\n", key, where.dli_fname);
        else printf("%s\t!cannot tell which object defines malloc\n", key);
    } else {
        printf("%s\t!unknown glibc query\n", key);
    }
}

int main(int argc, char **argv) {
    /* Allocators read their settings on first use. */
    void *volatile p = malloc(64);
    free(p);
    for (int i = 1; i < argc; i++) {
        const char *colon = strchr(argv[i], ':');
        if (!colon) { printf("%s\t!query is not METHOD:KEY\n", argv[i]); continue; }
        const char *key = colon + 1;
        size_t n = (size_t)(colon - argv[i]);
        if (n == 7 && !strncmp(argv[i], "mallctl", n)) read_mallctl(key, 0);
        else if (n == 11 && !strncmp(argv[i], "mallctl-str", n)) read_mallctl(key, 1);
        else if (n == 8 && !strncmp(argv[i], "property", n)) read_property(key);
        else if (n == 5 && !strncmp(argv[i], "glibc", n)) read_glibc(key);
        else printf("%s\t!unknown method\n", key);
    }
    return 0;
}
