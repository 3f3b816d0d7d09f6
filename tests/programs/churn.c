/* A small real allocation-heavy program for end-to-end tests: churns N small objects and keeps
 * LIVE_MB of memory alive, then prints its throughput. Optional argv[3] names an allocator
 * library substring; the program exits 3 when LD_PRELOAD contains it (a "crash under one
 * allocator"). argv[4] = seconds to sleep first (for timeout / Ctrl-C tests). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 2000;
    long live_mb = argc > 2 ? atol(argv[2]) : 32;
    if (argc > 3 && argv[3][0]) {
        const char *pre = getenv("LD_PRELOAD");
        if (pre && strstr(pre, argv[3])) { fprintf(stderr, "refusing to run under %s\n", argv[3]); return 3; }
    }
    if (argc > 4) usleep((useconds_t)(atof(argv[4]) * 1e6));
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    size_t nlive = (size_t)live_mb * 1024 * 1024 / 4096;
    char **live = malloc(nlive * sizeof *live);
    for (size_t i = 0; i < nlive; i++) { live[i] = malloc(4096); memset(live[i], 1, 4096); }
    void *p[1000];
    for (long r = 0; r < rounds; r++) {
        for (int i = 0; i < 1000; i++) p[i] = malloc(16 + (i * 37) % 900);
        for (int i = 0; i < 1000; i++) free(p[i]);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
    printf("ops/s: %.0f\n", rounds * 1000 / s);
    for (size_t i = 0; i < nlive; i++) free(live[i]);
    free(live);
    return 0;
}
