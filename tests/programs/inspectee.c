/* A program to inspect while it pauses (`alloclab inspect`'s tests and bench/inspect_speed.py).
 *
 * It builds a heap state, prints glibc's own malloc_info() of it into a file (the oracle the walk is
 * checked against), says "paused" on stderr, and waits for a line on stdin. Then it reads back every
 * block it kept, prints a checksum of their bytes and their count on stdout (the same bytes whether
 * it was inspected or not: an inspection that wrote into it would change them), and on stderr the
 * longest gap its heartbeat thread saw while it paused, and the longest it was held (stopped), not
 * counting its waits for a CPU.
 *
 * Nothing it does between its start and the pause goes through stdio's buffers or anything else that
 * mallocs outside the state: the stream for malloc_info is opened first, over a static buffer, and
 * stdin is read with read(2).
 *
 * argv: MODE INFO_FILE [MIB (48)] [THREADS (3)]
 *   top      glibc raises its thresholds at the free of a large mapped block, then MIB of small
 *            pieces are made and freed in order: they merge into the heap's top, which stays below
 *            the raised trim threshold (glibc-trim-raised)
 *   pinned   MIB of buffers, each followed by a small live record; the buffers freed: free memory
 *            between live blocks (glibc-free-pinned)
 *   arenas   THREADS threads, one after another while the others live, each fill MIB in its own
 *            arena and free all but the last piece (glibc-arena-free)
 *   control  MIB of pieces, all kept: nothing to give back
 *   blocks   MIB of 100-byte blocks, all kept (the speed target: 1024)
 *   churn    as control, and while it pauses its main thread keeps replacing random blocks by new
 *            ones of random sizes, checking each block's bytes before it frees it: a heap that
 *            changes under the walk. It prints the blocks it kept and how many it found altered.
 *   grow     as control, and while it pauses it keeps adding 64 KiB of 100-byte blocks every 20 ms
 *            (up to MIB more): a process whose live memory grows between two samples.
 * Every mode ends by freeing 40 small blocks of three sizes: the first of each size go to the
 * thread's tcache, the rest to the fastbins (the walk counts both as caches). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <malloc.h>
#include <fcntl.h>

static void keep(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

static char **kept;
static size_t *kept_len, nkept, cap;
static void hold(void *p, size_t n) {
    if (nkept == cap) { fprintf(stderr, "too many blocks\n"); exit(3); }
    kept[nkept] = p;
    kept_len[nkept++] = n;
}

static unsigned seed = 1;
static unsigned rnd(void) { seed = seed * 1103515245u + 12345u; return seed >> 16; }

static void small_frees(void) {
    static const size_t sizes[] = {24, 40, 72};
    void *p[40];
    for (int i = 0; i < 40; i++) { p[i] = malloc(sizes[i % 3]); memset(p[i], 7, sizes[i % 3]); keep(p[i]); }
    for (int i = 0; i < 40; i++) free(p[i]);
}

/* --- the heartbeat ----------------------------------------------------------------------------
 * A 1 ms sleep in a loop; each beat's gap, less the time the thread waited for a CPU meanwhile
 * (/proc/thread-self/schedstat's run delay): on a busy machine a thread waits for a CPU whoever
 * inspects it, while a thread held stopped by a tracer waits on no run queue. So what is left is
 * the time it was held, and the worst of it is what an inspection stopped it for. */
static volatile int watching, stop_beat;
static volatile long long worst_ns, worst_held_ns;
static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}
static long long run_delay_ns(void) {
    char buf[128];
    int fd = open("/proc/thread-self/schedstat", O_RDONLY);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    unsigned long long cpu = 0, delay = 0;
    if (sscanf(buf, "%llu %llu", &cpu, &delay) != 2) return 0;
    return (long long)delay;
}
static void *beat(void *arg) {
    (void)arg;
    long long last = now_ns(), last_delay = run_delay_ns();
    struct timespec ms = {0, 1000000};
    while (!stop_beat) {
        nanosleep(&ms, NULL);
        long long t = now_ns(), delay = run_delay_ns();
        long long held = (t - last) - (delay - last_delay);
        if (watching && t - last > worst_ns) worst_ns = t - last;
        if (watching && held > worst_held_ns) worst_held_ns = held;
        last = t;
        last_delay = delay;
    }
    return NULL;
}

/* --- the arenas' workers ---------------------------------------------------------------------- */
static long mib;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int done, finish;

static void *worker(void *arg) {
    long id = (long)arg;
    size_t want = (size_t)mib << 20, n = want / 600 + 1, used = 0, k = 0;
    char **p = malloc(n * sizeof *p);
    unsigned s = (unsigned)id + 11;
    while (used < want && k < n) {
        s = s * 1103515245u + 12345u;
        size_t sz = 256 + (s >> 16) % 1792;
        p[k] = malloc(sz);
        memset(p[k], (int)id + 1, sz);
        keep(p[k++]);
        used += sz;
    }
    for (size_t i = 0; i + 1 < k; i++) free(p[i]);
    pthread_mutex_lock(&lock);
    hold(p[k - 1], 256);   /* only its first 256 bytes are known to be written with id + 1 */
    pthread_mutex_unlock(&lock);
    free(p);
    small_frees();
    pthread_mutex_lock(&lock);
    done++;
    pthread_cond_broadcast(&cond);
    while (!finish) pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    return NULL;
}

static volatile int go;
static void *wait_line(void *arg) {
    (void)arg;
    char line[16];
    if (read(0, line, sizeof line) < 0) {}
    go = 1;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: inspectee MODE INFO_FILE [MIB] [THREADS]\n"); return 2; }
    const char *mode = argv[1];
    mib = argc > 3 ? atol(argv[3]) : 48;
    long threads = argc > 4 ? atol(argv[4]) : 3;
    static char infobuf[1 << 20];
    FILE *info = fopen(argv[2], "w");
    if (!info) { perror(argv[2]); return 2; }
    setvbuf(info, infobuf, _IOFBF, sizeof infobuf);
    pthread_t hb;
    pthread_create(&hb, NULL, beat, NULL);
    cap = ((size_t)mib << 20) / 64 + 1024;
    kept = malloc(cap * sizeof *kept);
    kept_len = malloc(cap * sizeof *kept_len);
    size_t want = (size_t)mib << 20;
    pthread_t t[64];
    if (!strcmp(mode, "top")) {
        size_t big = (size_t)(mib * 3 / 4 + 1) << 20;
        if (big > (31u << 20)) big = 31u << 20;
        char *a = malloc(big);
        memset(a, 1, big);
        keep(a);
        free(a);
        size_t n = want / 600 + 1, used = 0, k = 0;
        char **p = malloc(n * sizeof *p);
        while (used < want && k < n) {
            size_t sz = 256 + rnd() % 1792;
            p[k] = malloc(sz);
            memset(p[k], 3, sz);
            keep(p[k++]);
            used += sz;
        }
        for (size_t i = 0; i < k; i++) free(p[i]);
        free(p);
    } else if (!strcmp(mode, "pinned")) {
        size_t used = 0;
        char **buf = malloc((want / 1024 + 1) * sizeof *buf);
        size_t k = 0;
        while (used < want) {
            size_t sz = 1100 + rnd() % 3000;
            buf[k] = malloc(sz);
            memset(buf[k], 1, sz);
            keep(buf[k++]);
            char *r = malloc(48);
            memset(r, 2, 48);
            hold(r, 48);
            used += sz;
        }
        for (size_t i = 0; i < k; i++) free(buf[i]);
        free(buf);
    } else if (!strcmp(mode, "arenas")) {
        if (threads > 64) threads = 64;
        for (long i = 0; i < threads; i++) {
            pthread_create(&t[i], NULL, worker, (void *)i);
            pthread_mutex_lock(&lock);
            while (done < i + 1) pthread_cond_wait(&cond, &lock);
            pthread_mutex_unlock(&lock);
        }
    } else if (!strcmp(mode, "control") || !strcmp(mode, "blocks") || !strcmp(mode, "churn") ||
               !strcmp(mode, "grow")) {
        int blocks = !strcmp(mode, "blocks");
        size_t used = 0;
        while (used < want) {
            size_t sz = blocks ? 100 : 256 + rnd() % 1792;
            char *p = malloc(sz);
            memset(p, (int)(nkept & 0x7f) + 1, sz);
            hold(p, sz);
            used += sz + (blocks ? 12 : 0);
        }
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    small_frees();
    malloc_info(0, info);
    fflush(info);
    watching = 1;
    static const char paused[] = "paused\n";
    if (write(2, paused, sizeof paused - 1) < 0) return 4;
    if (!strcmp(mode, "grow")) {
        pthread_t r;
        pthread_create(&r, NULL, wait_line, NULL);
        size_t added = 0;
        struct timespec pace = {0, 20000000};
        while (!go) {
            for (size_t k = 0; k < 655 && added < want && nkept < cap; k++, added += 100) {
                char *b = malloc(100);
                memset(b, 5, 100);
                hold(b, 100);
            }
            nanosleep(&pace, NULL);
        }
        pthread_join(r, NULL);
        printf("grew\n");
        return 0;
    }
    if (!strcmp(mode, "churn")) {
        pthread_t r;
        pthread_create(&r, NULL, wait_line, NULL);
        unsigned long altered = 0;
        while (!go) {
            size_t i = rnd() % nkept, sz = 256 + rnd() % 1792;
            for (size_t j = 0; j < kept_len[i]; j++) altered += kept[i][j] != (char)((i & 0x7f) + 1);
            free(kept[i]);
            kept[i] = malloc(sz);
            kept_len[i] = sz;
            memset(kept[i], (int)(i & 0x7f) + 1, sz);
        }
        pthread_join(r, NULL);
        watching = 0;
        printf("blocks: %zu\naltered: %lu\n", nkept, altered);
        fflush(stdout);
        fprintf(stderr, "heartbeat worst gap while paused: %.3f ms; held: %.3f ms\n", worst_ns / 1e6,
                worst_held_ns / 1e6);
        return 0;
    }
    char line[16];
    if (read(0, line, sizeof line) < 0) return 4;
    watching = 0;
    unsigned long long sum = 1469598103934665603ull;
    for (size_t i = 0; i < nkept; i++)
        for (size_t j = 0; j < kept_len[i]; j++) sum = (sum ^ (unsigned char)kept[i][j]) * 1099511628211ull;
    printf("blocks: %zu\nchecksum: %016llx\n", nkept, sum);
    fflush(stdout);
    fprintf(stderr, "heartbeat worst gap while paused: %.3f ms; held: %.3f ms\n", worst_ns / 1e6,
            worst_held_ns / 1e6);
    stop_beat = 1;
    pthread_join(hb, NULL);
    if (!strcmp(mode, "arenas")) {
        pthread_mutex_lock(&lock);
        finish = 1;
        pthread_cond_broadcast(&cond);
        pthread_mutex_unlock(&lock);
        for (long i = 0; i < threads; i++) pthread_join(t[i], NULL);
    }
    fclose(info);
    return 0;
}
