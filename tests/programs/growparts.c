/* A process whose memory grows while it is watched, in one part of its heap or another
 * (`alloclab inspect --watch`'s tests: the part that grew must be named).
 *
 *   top   first frees one 30 MiB array (glibc serves it with mmap, and its free raises the mmap
 *         threshold to 30 MiB and the trim threshold to 60 MiB); then, after 10 MiB at once,
 *         every 50 ms it allocates one 128 KiB block more than the time before, writes only the
 *         newest (the older ones lie on pages already written) and frees them all, newest first:
 *         they merge into the main heap's top, which grows by 128 KiB a step and stays below the
 *         raised trim threshold, so glibc keeps it. Nothing stays live: the free top grows, the
 *         live bytes do not.
 *   live  every 50 ms allocates 128 KiB more in 1,000-byte blocks, writes and keeps them: the
 *         live bytes grow, the top stays the few pages glibc extends the heap by.
 *
 * Each grows about 2.5 MiB a second, slowly enough that a watch whose interpreter starts seconds
 * later still sees it grow, and stops at MIB (default 56: the top stays below the raised trim
 * threshold). It says "paused" on stderr when it starts growing (the word the tests' helpers wait
 * for), grows until a line arrives on stdin (or stdin closes), then prints "steps: N" and exits.
 *
 * argv: top|live [MIB] */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STEP (128u << 10)

/* The compiler may drop a malloc, memset and free it can see through: the block escapes here. */
static void keep(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

/* Whether a line (or the end) arrived on stdin within `ms`. */
static int told_to_stop(int ms) {
    struct pollfd p = {0, POLLIN, 0};
    return poll(&p, 1, ms) > 0;
}

/* N blocks, the newest written, then all freed newest first: they merge into the heap's top. */
static void grow_top(void **blocks, size_t n) {
    for (size_t k = 0; k < n; k++) blocks[k] = malloc(STEP - 64);
    memset(blocks[n - 1], 7, STEP - 64);
    for (size_t k = n; k-- > 0;) {
        keep(blocks[k]);
        free(blocks[k]);
    }
}

int main(int argc, char **argv) {
    if (argc < 2 || (strcmp(argv[1], "top") && strcmp(argv[1], "live"))) {
        fprintf(stderr, "usage: growparts top|live [MIB]\n");
        return 2;
    }
    int top = !strcmp(argv[1], "top");
    size_t cap = (size_t)(argc > 2 ? atol(argv[2]) : 56) << 20;
    size_t nmax = cap / STEP;
    void **blocks = calloc(top ? nmax : cap / 1000 + STEP / 1000 + 1, sizeof *blocks);
    if (!blocks) return 3;
    if (top) {
        char *a = malloc(30u << 20);
        memset(a, 1, 30u << 20);
        keep(a);
        free(a);
    }
    size_t steps = 0, held = 0;
    /* The top starts at 10 MiB (more than the 8 MiB tune's rules weigh), and grows from there. */
    if (top)
        while (steps * STEP < (10u << 20)) grow_top(blocks, ++steps);
    static const char paused[] = "paused\n";
    if (write(2, paused, sizeof paused - 1) < 0) return 4;
    while (!told_to_stop(50)) {
        if (top && steps < nmax) {
            grow_top(blocks, ++steps);
        } else if (!top && held * 1000 < cap) {
            for (size_t k = 0; k < STEP / 1000; k++, held++) {
                blocks[held] = malloc(1000);
                memset(blocks[held], 7, 1000);
            }
            steps++;
        }
    }
    printf("steps: %zu\n", steps);
    return 0;
}
