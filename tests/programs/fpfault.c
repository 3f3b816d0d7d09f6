/* A program that runs plain and fails only under alloclab's glibc fingerprint: a fault injected by the
 * test, as the interposer's operator new once aborted python3 importing numpy. It aborts where the
 * fingerprint's output directory is set and the interposer is the only preloaded object (the glibc
 * cell; under another allocator that allocator follows it in LD_PRELOAD). Otherwise it churns blocks
 * of 64 KiB to 1 MiB in ROUNDS rounds and prints a checksum. Usage: fpfault [ROUNDS] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    const char *preload = getenv("LD_PRELOAD");
    if (getenv("ALLOCLAB_FP_DIR") && preload && !strpbrk(preload, " :")) abort();
    long rounds = argc > 1 ? atol(argv[1]) : 3000;
    unsigned long sum = 0;
    for (long r = 0; r < rounds; r++) {
        size_t n = (size_t)64 * 1024 << (r % 5);
        unsigned char *p = malloc(n);
        memset(p, (int)r, n);
        sum += p[n / 3];
        free(p);
    }
    printf("rounds %ld checksum %lu\n", rounds, sum);
    return 0;
}
