/* Free memory inside the heap, pinned by live blocks (tune's memory tests).
 *
 * A parser reads SIZE MiB of buffers (1.1 to 4 KiB each, written; above the sizes glibc keeps in its per-thread cache, whose blocks would pin the control too) with a small record (48 B) for
 * each, then frees the buffers and keeps the records. glibc puts each record right after its buffer, so every
 * freed buffer sits between two live records: no setting of glibc's returns that memory (only
 * malloc_trim(0), called by the program, does). Allocators that keep sizes apart put the records
 * in pages of their own, and the buffers' pages empty: jemalloc keeps them as dirty pages until its
 * decay returns them, tcmalloc keeps them in its page heap until its release rate does.
 *
 * argv: [SIZE_MIB (16)] [control: 1 makes every record before the first buffer: nothing pins the
 *       freed buffers, which merge into the heap's top, and glibc trims it]
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
    long mib = argc > 1 ? atol(argv[1]) : 16;
    int control = argc > 2 && atoi(argv[2]) == 1;
    size_t want = (size_t)mib << 20, n = want / 1024 + 1, used = 0, k = 0;
    char **rec = malloc(n * sizeof *rec), **buf = malloc(n * sizeof *buf);
    unsigned seed = 7;
    if (control) {
        for (size_t i = 0; i < n; i++) {
            rec[i] = malloc(48);
            memset(rec[i], 2, 48);
            keep(rec[i]);
        }
    }
    while (used < want && k < n) {
        seed = seed * 1103515245u + 12345u;
        size_t sz = 1100 + (seed >> 16) % 3000;
        buf[k] = malloc(sz);
        memset(buf[k], 1, sz);
        keep(buf[k]);
        if (!control) {
            rec[k] = malloc(48);
            memset(rec[k], 2, 48);
            keep(rec[k]);
        }
        k++;
        used += sz;
    }
    for (size_t i = 0; i < k; i++) free(buf[i]);
    free(buf);
    printf("anon_kb: %ld\n", anon_kb());
    return 0;
}
