/* Gives back part of its memory with MADV_FREE, as jemalloc's muzzy pages and other allocators'
 * purges do: the pages stay in RSS, counted as LazyFree, until the kernel needs them. Prints its
 * own smaps_rollup Anonymous, LazyFree and Private_Dirty just before it returns (the hand reading
 * the launcher's end reading is checked against).
 * usage: lazyfree [MiB touched = 192] [MiB freed lazily = 128] [pause]
 * With "pause" it says "paused" on stderr once its pages are freed, and waits for a line on stdin
 * (alloclab inspect reads it meanwhile: tests/inspect_helpers.py). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static long long rollup_kb(const char *key) {
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    long long kb = -1;
    size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0) kb = atoll(line + n);
    if (f) fclose(f);
    return kb;
}

int main(int argc, char **argv) {
    size_t touched = (size_t)(argc > 1 ? atol(argv[1]) : 192) << 20;
    size_t lazy = (size_t)(argc > 2 ? atol(argv[2]) : 128) << 20;
    char *p = mmap(NULL, touched, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 1;
    memset(p, 1, touched);
    if (lazy && madvise(p, lazy, MADV_FREE) != 0) { perror("madvise(MADV_FREE)"); return 1; }
    if (argc > 3 && strcmp(argv[3], "pause") == 0) {
        char go[16];
        fputs("paused\n", stderr);
        fflush(stderr);
        if (!fgets(go, sizeof go, stdin)) return 1;
    }
    /* Private_Dirty already leaves the lazily freed pages out: MADV_FREE cleans them (they are
     * counted in Private_Clean until the kernel takes them). */
    printf("anonymous_kb: %lld\nlazyfree_kb: %lld\nprivate_dirty_kb: %lld\n", rollup_kb("Anonymous:"),
           rollup_kb("LazyFree:"), rollup_kb("Private_Dirty:"));
    return 0;
}
