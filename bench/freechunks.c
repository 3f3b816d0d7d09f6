/* A heap that holds a million free chunks while the program keeps working: 2,000,000 blocks of
 * 200 B, every other one freed (glibc's bins then hold a million free chunks, which its
 * malloc_info walks), then ROUNDS rounds of small allocations and frees. Prints its work time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void keep(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 2000000, rounds = argc > 2 ? atol(argv[2]) : 40;
    char **p = malloc((size_t)n * sizeof *p);
    for (long i = 0; i < n; i++) { p[i] = malloc(200); memset(p[i], 1, 200); keep(p[i]); }
    for (long i = 0; i < n; i += 2) free(p[i]);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    char *q[1000];
    for (long r = 0; r < rounds; r++)
        for (int k = 0; k < 1000; k++) {
            for (int j = 0; j < 1000; j++) { q[j] = malloc(16 + (size_t)((j * 7) % 48)); keep(q[j]); }
            for (int j = 0; j < 1000; j++) free(q[j]);
        }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("work_s: %.4f\n", (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9);
    return 0;
}
