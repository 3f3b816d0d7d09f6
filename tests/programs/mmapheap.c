/* Large buffers served from glibc's heap because its mmap threshold rose (tune's memory tests).
 *
 * An image worker first frees one large buffer: glibc served it with mmap, and its free raises the
 * mmap threshold to its size. Each of IMAGES images then gets a buffer of about SIZE MiB (a little
 * larger each time, as images vary), now below the threshold and so carved from the heap; a small
 * cache entry made while it is live stays, and the buffer is freed. The freed buffers stay in the
 * heap, free inside it or at its top, below the trim threshold that rose with the mmap threshold.
 * At the end the program prints its own anonymous RSS. A fixed MALLOC_MMAP_THRESHOLD_ below the
 * buffers maps each one and unmaps it at its free.
 *
 * argv: [SIZE_MIB (4)] [IMAGES (24)] [control: 1 skips the large buffer: each buffer, larger than the
 *       last one freed, is mapped]
 * Prints "anon_kb: N". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The compiler may drop a malloc, memset and free it can see through: the block escapes here. */
static void keep(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

static long anon_kb(void) {
    long size, rss, shared;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%ld %ld %ld", &size, &rss, &shared) != 3) return -1;
    fclose(f);
    return (rss - shared) * (sysconf(_SC_PAGESIZE) / 1024);
}

int main(int argc, char **argv) {
    long mib = argc > 1 ? atol(argv[1]) : 4, images = argc > 2 ? atol(argv[2]) : 24;
    int control = argc > 3 && atoi(argv[3]) == 1;
    size_t base = (size_t)mib << 20;
    if (!control) {
        size_t big = 4 * base + ((size_t)images << 16);   /* above every buffer to come */
        if (big > (31u << 20)) big = 31u << 20;
        char *a = malloc(big);
        memset(a, 1, big);
        keep(a);
        free(a);
    }
    char **cache = malloc((size_t)images * sizeof *cache);
    for (long i = 0; i < images; i++) {
        size_t sz = base + ((size_t)i << 16);
        char *buf = malloc(sz);
        memset(buf, (int)i + 1, sz);
        keep(buf);
        cache[i] = malloc(200);
        memset(cache[i], (int)i, 200);
        keep(cache[i]);
        free(buf);
    }
    printf("anon_kb: %ld\n", anon_kb());
    for (long i = 0; i < images; i++) free(cache[i]);
    free(cache);
    return 0;
}
