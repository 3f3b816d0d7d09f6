/* A request parser's pattern: each request builds BURST small nodes (48-512 bytes), then frees them
 * all. glibc's per-thread cache keeps 7 chunks of each size (glibc.malloc.tcache_count): the frees
 * beyond those go to the arena's fast or small bins, and the next request's mallocs take them back
 * from there, on glibc's slower path.
 * usage: smallburst [requests = 200000] [burst = 64] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    long requests = argc > 1 ? atol(argv[1]) : 200000;
    int burst = argc > 2 ? atoi(argv[2]) : 64;
    void **nodes = calloc((size_t)burst, sizeof *nodes);
    static const size_t sizes[] = {48, 64, 96, 200, 256, 512};
    unsigned long sum = 0;
    for (long r = 0; r < requests; r++) {
        for (int i = 0; i < burst; i++) {
            size_t n = sizes[(r + i) % 6];
            nodes[i] = malloc(n);
            memset(nodes[i], (int)i, 16);
            sum += ((unsigned char *)nodes[i])[3];
        }
        for (int i = 0; i < burst; i++) free(nodes[i]);
    }
    printf("checksum %lu\n", sum);
    free(nodes);
    return 0;
}
