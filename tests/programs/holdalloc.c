/* Holds a known heap, then frees it: N blocks of SIZE bytes (default 20,000 x 1000 B, about
 * 20 MB live), kept for HOLD_MS so the fingerprint's 20 ms samples see them, freed, then rests
 * HOLD_MS again before exiting. Each block is written in full, so it is resident. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void rest(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 20000, size = argc > 2 ? atol(argv[2]) : 1000;
    long hold_ms = argc > 3 ? atol(argv[3]) : 300;
    char **blocks = malloc((size_t)n * sizeof *blocks);
    for (long i = 0; i < n; i++) {
        blocks[i] = malloc((size_t)size);
        memset(blocks[i], (int)(i & 0x7f) | 1, (size_t)size);
    }
    rest(hold_ms);
    for (long i = 0; i < n; i++) free(blocks[i]);
    free(blocks);
    rest(hold_ms);
    return 0;
}
