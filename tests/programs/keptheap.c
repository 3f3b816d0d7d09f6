/* A program that pauses holding freed memory that glibc's thresholds keep (`alloclab inspect`'s
 * tests, bench/inspect_hand.py): free memory that a setting at the program's start would have kept
 * out of its heaps. It builds its state, says "paused" on stderr, and waits for a line on stdin;
 * then prints its kept blocks' checksum on stdout (the same whether it was inspected or not).
 *
 * argv: MODE [N] [THREADS (4)]
 *   tops   N MiB (12) per thread: THREADS threads, one after another while the others live, each
 *          in its own arena: one block of N MiB (the first is mapped, and its free raises glibc's
 *          mmap threshold to its size and the trim threshold to twice that, so the others come
 *          from their arenas), then
 *          N MiB of buffers of 256 KiB to 2 MiB, each freed: every thread arena keeps N MiB free at
 *          its top, below the raised trim threshold. A fixed mmap threshold (MALLOC_MMAP_THRESHOLD_)
 *          or trim threshold keeps it out.
 *   sized  N blocks (640) of 100 KB (102400 B), each followed by a small live record,
 *          the big ones freed: free chunks of one size above 64 KiB between live blocks, which no
 *          trim reaches (glibc's default mmap threshold is 128 KiB). With a fixed mmap threshold
 *          below 100 KB each is mapped and unmapped at its free.
 *   none   N MiB (12) of small blocks, all kept: nothing to give back (a control). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void keep(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

static long mib, threads;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int done, finish;

static char *kept[1 << 16];
static size_t kept_len[1 << 16], nkept;

static void hold(char *p, size_t n, int c) {
    memset(p, c, n);
    kept[nkept] = p;
    kept_len[nkept++] = n;
}

static void *worker(void *arg) {
    long id = (long)arg;
    size_t want = (size_t)mib << 20;
    char *big = malloc(want);
    memset(big, (int)id + 1, want);
    keep(big);
    free(big);
    char *p[256];
    size_t used = 0;
    int k = 0;
    unsigned s = (unsigned)id * 7919u + 17u;
    while (used < want && k < 256) {
        s = s * 1103515245u + 12345u;
        size_t sz = (256u << 10) + (size_t)(s >> 8) % (1792u << 10);
        if (sz > want - used) sz = want - used < (256u << 10) ? (256u << 10) : want - used;
        p[k] = malloc(sz);
        memset(p[k], (int)id + 2, sz);
        keep(p[k++]);
        used += sz;
    }
    for (int i = 0; i < k; i++) free(p[i]);
    pthread_mutex_lock(&lock);
    hold(malloc(64), 64, (int)id + 3);     /* a record of its own, in its arena */
    done++;
    pthread_cond_broadcast(&cond);
    while (!finish) pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: keptheap MODE [MIB] [THREADS]\n"); return 2; }
    const char *mode = argv[1];
    long n_arg = argc > 2 ? atol(argv[2]) : 0;
    mib = n_arg ? n_arg : 12;
    threads = argc > 3 ? atol(argv[3]) : 4;
    if (threads > 64) threads = 64;
    pthread_t t[64];
    size_t want = (size_t)mib << 20;
    if (!strcmp(mode, "tops")) {
        for (long i = 0; i < threads; i++) {
            pthread_create(&t[i], NULL, worker, (void *)i);
            pthread_mutex_lock(&lock);
            while (done < i + 1) pthread_cond_wait(&cond, &lock);
            pthread_mutex_unlock(&lock);
        }
    } else if (!strcmp(mode, "sized")) {
        size_t n = n_arg ? (size_t)n_arg : 640;
        char **big = malloc(n * sizeof *big);
        for (size_t i = 0; i < n && nkept < (1 << 16); i++) {
            big[i] = malloc(102400);
            memset(big[i], 1, 102400);
            keep(big[i]);
            hold(malloc(48), 48, 2);
        }
        for (size_t i = 0; i < n; i++) free(big[i]);
        free(big);
    } else if (!strcmp(mode, "none")) {
        for (size_t used = 0; used < want && nkept < (1 << 16); used += 1024) hold(malloc(1024), 1024, 4);
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    static const char paused[] = "paused\n";
    if (write(2, paused, sizeof paused - 1) < 0) return 4;
    char line[16];
    if (read(0, line, sizeof line) < 0) return 4;
    unsigned long long sum = 1469598103934665603ull;
    for (size_t i = 0; i < nkept; i++)
        for (size_t j = 0; j < kept_len[i]; j++) sum = (sum ^ (unsigned char)kept[i][j]) * 1099511628211ull;
    printf("blocks: %zu\nchecksum: %016llx\n", nkept, sum);
    if (!strcmp(mode, "tops")) {
        pthread_mutex_lock(&lock);
        finish = 1;
        pthread_cond_broadcast(&cond);
        pthread_mutex_unlock(&lock);
        for (long i = 0; i < threads; i++) pthread_join(t[i], NULL);
    }
    return 0;
}
