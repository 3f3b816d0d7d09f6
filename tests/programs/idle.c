/* A process that holds some heap and waits: the target of `alloclab inspect`'s refusal tests (a static
 * build, a musl build, a libc of an unknown version, another user). Portable C: it builds with musl.
 * It makes 1000 blocks, says "paused" on stderr, waits for a line on stdin, and prints a checksum of
 * the blocks: the same whether anything looked at it or not. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(void) {
    static char *p[1000];
    for (int i = 0; i < 1000; i++) {
        p[i] = malloc(64 + i);
        memset(p[i], i & 0xff, 64 + i);
    }
    for (int i = 0; i < 1000; i += 3) {
        free(p[i]);
        p[i] = NULL;
    }
    if (write(2, "paused\n", 7) != 7) return 4;
    char line[16];
    if (read(0, line, sizeof line) < 0) return 4;
    unsigned long sum = 0;
    for (int i = 0; i < 1000; i++)
        for (int j = 0; p[i] && j < 64 + i; j++) sum = sum * 31 + (unsigned char)p[i][j];
    printf("checksum: %lx\n", sum);
    return 0;
}
