/* A program that barely allocates, for tune's tests: ITERS rounds of arithmetic, no malloc after
 * start; with ALLOC_EVERY, one malloc and free of 64 bytes every ALLOC_EVERY rounds (a call rate
 * of ~50,000 a second at 2000, at a negligible share of the CPU). argv: [ITERS [ALLOC_EVERY]].
 * Prints ops/s. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 200000000;
    long every = argc > 2 ? atol(argv[2]) : 0;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    volatile unsigned long x = 1;
    for (long i = 0; i < iters; i++) {
        x = x * 6364136223846793005UL + 1442695040888963407UL;
        if (every && i % every == 0) {
            unsigned char *volatile p = malloc(64);
            p[0] = (unsigned char)x;
            free(p);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
    printf("ops/s: %.0f\n", iters / s);
    return 0;
}
