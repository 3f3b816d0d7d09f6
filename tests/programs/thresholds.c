/* glibc's thresholds, as glibc itself moves them, for the fingerprint's books to be checked against.
 *
 * Maps a block of BIG_MIB (12) and frees it: glibc raises its mmap threshold to the block's chunk
 * size, and its trim threshold to twice it, unless a setting fixed them ("env": the test sets
 * MALLOC_TOP_PAD_; "mallopt": the program calls mallopt(M_TOP_PAD) first). "realloc" frees no
 * block: it maps 20 MiB and reallocates it to 22 MiB, which moves neither threshold. Then asks
 * glibc for 8 MiB and prints whether glibc mapped it (the chunk's IS_MMAPPED bit): glibc's own
 * answer to "is the threshold above 8 MiB?".
 *
 * argv: [none|env|mallopt|realloc] [BIG_MIB]. Prints "mapped_8m: 0|1". */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void keep(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "none";
    size_t big = (size_t)(argc > 2 ? atol(argv[2]) : 12) << 20;
    if (!strcmp(mode, "mallopt")) mallopt(M_TOP_PAD, 1 << 20);
    char *b = NULL;
    if (!strcmp(mode, "realloc")) {
        b = malloc(20u << 20);
        memset(b, 1, 1 << 20);
        keep(b);
        b = realloc(b, 22u << 20);   /* mremap: the thresholds stay */
        keep(b);
    } else {
        char *a = malloc(big);
        memset(a, 1, big);
        keep(a);
        free(a);
    }
    char *c = malloc(8u << 20);
    keep(c);
    const size_t *word = (const size_t *)(void *)((uintptr_t)c - sizeof(size_t));   /* the chunk's size */
    printf("mapped_8m: %d\n", (int)((*word & 2) != 0));
    /* Neither freed: a mapped block's free would raise the thresholds after the answer, before the
     * books' last reading. */
    keep(b);
    keep(c);
    return 0;
}
