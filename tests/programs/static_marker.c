/* Writes its first argument's file when it runs: a refusal "before anything runs" leaves none. */
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    for (int i = 0; i < 10000; i++) free(malloc(64 + i % 512));
    if (argc > 1) {
        FILE *f = fopen(argv[1], "w");
        if (f) { fputs("ran\n", f); fclose(f); }
    }
    return 0;
}
