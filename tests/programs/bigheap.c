/* Faults in a large heap once, page by page: MIB MiB in 64 KiB blocks (below glibc's mmap threshold,
 * so from its heap), each touched, then read a few times. Under THP "madvise" every 4 KiB page is a
 * fault of its own unless glibc asks for huge pages (GLIBC_TUNABLES=glibc.malloc.hugetlb=1). Prints
 * its smaps_rollup AnonHugePages at the end: whether the huge pages were given.
 * usage: bigheap [MIB = 512] */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int mib = argc > 1 ? atoi(argv[1]) : 512;
    int n = mib * 16;  /* 64 KiB blocks */
    char **b = malloc(sizeof *b * n);
    for (int i = 0; i < n; i++) { b[i] = malloc(65536); memset(b[i], i, 65536); }
    long s = 0;
    for (int r = 0; r < 4; r++) for (int i = 0; i < n; i++) s += b[i][(i * 4099 + r) % 65536];
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    long long huge = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "AnonHugePages:", 14) == 0) huge = atoll(line + 14);
    if (f) fclose(f);
    printf("checksum: %ld\nanon_huge_kb: %lld\n", s, huge);
    return 0;
}
