/* Arenas holding free memory (tune's memory tests).
 *
 * THREADS workers run one after another, each while the ones before it still live (so glibc gives
 * each an arena of its own): a worker fills SIZE MiB in small pieces (256 B to 2 KiB, each written; none small enough for a fastbin, whose chunks would stop the merge),
 * keeps the last piece and frees the others, then waits. The kept piece sits at its arena's top, so
 * each arena keeps SIZE MiB free below it. At the end, with every worker done, the program prints
 * its own anonymous RSS. With fewer arenas (MALLOC_ARENA_MAX) a later worker reuses what an earlier
 * one freed.
 *
 * argv: [SIZE_MIB (16)] [THREADS (3)] [control: 1 keeps no piece: each worker frees all it filled, its
 *       arena's top takes it back and glibc trims it]
 * Prints "anon_kb: N". */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static long mib;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int done, finish;
static void *kept[64];

/* The compiler may drop a malloc, memset and free it can see through: the block escapes here. */
static void keep(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

static long anon_kb(void) {
    long size, rss, shared;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%ld %ld %ld", &size, &rss, &shared) != 3) return -1;
    fclose(f);
    return (rss - shared) * (sysconf(_SC_PAGESIZE) / 1024);
}

static int control;

static void task(int id) {
    size_t want = (size_t)mib << 20, n = want / 600 + 1, used = 0, k = 0;
    char **p = malloc(n * sizeof *p);
    unsigned seed = (unsigned)id + 1;
    while (used < want && k < n) {
        seed = seed * 1103515245u + 12345u;
        size_t sz = 256 + (seed >> 16) % 1792;
        p[k] = malloc(sz);
        memset(p[k], id + 1, sz);
        keep(p[k++]);
        used += sz;
    }
    for (size_t i = 0; i + 1 < k; i++) free(p[i]);
    kept[id] = p[k - 1];
    if (control) { free(kept[id]); kept[id] = NULL; }
    free(p);
}

static void *worker(void *arg) {
    int id = (int)(long)arg;
    task(id);
    pthread_mutex_lock(&lock);
    done++;
    pthread_cond_broadcast(&cond);
    while (!finish) pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    return NULL;
}

int main(int argc, char **argv) {
    mib = argc > 1 ? atol(argv[1]) : 16;
    long threads = argc > 2 ? atol(argv[2]) : 3;
    control = argc > 3 && atoi(argv[3]) == 1;
    if (threads > 64) threads = 64;
    pthread_t t[64];
    for (long i = 0; i < threads; i++) {
        pthread_create(&t[i], NULL, worker, (void *)i);
        pthread_mutex_lock(&lock);
        while (done < i + 1) pthread_cond_wait(&cond, &lock);
        pthread_mutex_unlock(&lock);
    }
    printf("anon_kb: %ld\n", anon_kb());
    pthread_mutex_lock(&lock);
    finish = 1;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
    for (long i = 0; i < threads; i++) pthread_join(t[i], NULL);
    return 0;
}
