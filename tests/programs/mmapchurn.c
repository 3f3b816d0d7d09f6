/* mmap churn for tune's tests: ITERS times, one block of MIB MiB (above glibc's largest mmap
 * threshold, 32 MiB, so glibc maps and unmaps it every time), one byte touched a page, freed.
 * argv: [MIB] [ITERS]. Prints ops/s. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    long mib = argc > 1 ? atol(argv[1]) : 40, iters = argc > 2 ? atol(argv[2]) : 40;
    size_t size = (size_t)mib << 20;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long it = 0; it < iters; it++) {
        char *p = malloc(size);
        for (size_t off = 0; off < size; off += 4096) p[off] = (char)it;
        free(p);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
    printf("ops/s: %.0f\n", iters / s);
    return 0;
}
