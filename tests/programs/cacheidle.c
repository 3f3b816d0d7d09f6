/* A cache that fills, empties and idles (the redis#6145 pattern), in a program linked to an
 * allocator of its own (built with jemalloc's library on its link line): it fills a cache of
 * MIB MiB in 4 KiB..64 KiB entries, frees every entry, then idles IDLE_MS before it exits.
 * Prints the entries' checksum and its VmRSS after the idle.
 * Usage: cacheidle [MIB] [IDLE_MS] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long rss_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kb = atol(line + 6);
    if (f) fclose(f);
    return kb;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 200;
    long idle_ms = argc > 2 ? atol(argv[2]) : 500;
    size_t want = mib << 20, have = 0, n = 0, cap = 1024;
    unsigned char **entries = malloc(cap * sizeof *entries);
    unsigned long long sum = 0, seed = 12345;
    while (have < want) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        size_t size = 4096 + (size_t)(seed >> 33) % (60 * 1024);
        if (n == cap) entries = realloc(entries, (cap *= 2) * sizeof *entries);
        unsigned char *e = malloc(size);
        memset(e, (int)(seed >> 56), size);
        sum += e[size / 2] + size;
        entries[n++] = e;
        have += size;
    }
    for (size_t i = 0; i < n; i++) free(entries[i]);
    free(entries);
    struct timespec ts = {idle_ms / 1000, (idle_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    printf("entries %zu checksum %llu\n", n, sum);
    printf("rss_kb %ld\n", rss_kb());
    return 0;
}
