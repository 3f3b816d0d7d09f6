/* The heap's top kept by a trim threshold that glibc raised (tune's memory tests).
 *
 * A worker first frees one large array: glibc served it with mmap, and its free raises glibc's
 * mmap threshold to the array's size and its trim threshold to twice that. Then each of TASKS
 * tasks fills SIZE MiB in small pieces (256 B to 2 KiB, each written; none small enough for a fastbin, whose chunks would stop the merge) and frees them in the order it
 * made them: they merge back into the heap's top, which stays below the raised trim threshold, so
 * glibc keeps it. At the end nothing is live, and the program prints its own anonymous RSS.
 * A fixed MALLOC_TRIM_THRESHOLD_ gives it back at each free.
 *
 * argv: [SIZE_MIB (16)] [TASKS (3)] [control: 1 skips the large array, and glibc trims as usual]
 * Prints "anon_kb: N" (anonymous RSS at the end, from /proc/self/statm). */
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
    long mib = argc > 1 ? atol(argv[1]) : 16, tasks = argc > 2 ? atol(argv[2]) : 3;
    int control = argc > 3 && atoi(argv[3]) == 1;
    if (!control) {
        /* Above the task's size once doubled, and at most glibc's 32 MiB cap on the raise. */
        size_t big = (size_t)(mib * 3 / 4 + 1) << 20;
        if (big > (31u << 20)) big = 31u << 20;
        char *a = malloc(big);
        memset(a, 1, big);
        keep(a);
        free(a);
    }
    size_t want = (size_t)mib << 20, n = want / 600 + 1;
    char **p = malloc(n * sizeof *p);
    unsigned seed = 1;
    for (long t = 0; t < tasks; t++) {
        size_t used = 0, k = 0;
        while (used < want && k < n) {
            seed = seed * 1103515245u + 12345u;
            size_t sz = 256 + (seed >> 16) % 1792;
            p[k] = malloc(sz);
            memset(p[k], (int)t + 1, sz);
            keep(p[k++]);
            used += sz;
        }
        for (size_t i = 0; i < k; i++) free(p[i]);
    }
    free(p);
    printf("anon_kb: %ld\n", anon_kb());
    return 0;
}
