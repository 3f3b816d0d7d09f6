/* Trim churn for tune's tests: each iteration mallocs MIB MiB in 32 KiB chunks (below glibc's mmap
 * threshold, so they come from the heap), touches one byte a page, frees them all: glibc's heap
 * grows by MIB MiB and is trimmed back every iteration. argv: [MIB] [ITERS]. Prints ops/s. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    long mib = argc > 1 ? atol(argv[1]) : 8, iters = argc > 2 ? atol(argv[2]) : 100;
    long n = mib * 32;   /* 32 KiB chunks */
    char **p = malloc(n * sizeof *p);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long it = 0; it < iters; it++) {
        for (long i = 0; i < n; i++) {
            p[i] = malloc(32 * 1024 - 64);
            for (int off = 0; off < 32 * 1024 - 64; off += 4096) p[i][off] = (char)i;
        }
        for (long i = n - 1; i >= 0; i--) free(p[i]);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
    printf("ops/s: %.0f\n", iters / s);
    free(p);
    return 0;
}
