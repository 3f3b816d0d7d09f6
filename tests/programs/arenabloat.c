/* glibc arena bloat for tune's tests: THREADS threads, all alive together, take turns; at its turn
 * each allocates MIB MiB of 512 B objects, frees all but the last (which pins its heap's top, so
 * nothing is trimmed) and passes the turn on. Under glibc every thread got an arena of its own, so
 * the freed memory stays in THREADS arenas; with one or two arenas the next thread reuses it.
 * After every turn the program holds that state for 100 ms (several of the fingerprint's 20 ms
 * readings) before it frees the pinned objects. argv: [THREADS] [MIB]. Prints ops/s. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long nthreads = 16, mib = 16;
static long turn = 0;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static void *pinned[256];

static void *worker(void *arg) {
    long me = (long)arg;
    pthread_mutex_lock(&mu);
    while (turn != me) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    long n = mib * 2048;
    char **p = malloc(n * sizeof *p);
    for (long i = 0; i < n; i++) { p[i] = malloc(512); p[i][0] = (char)i; }
    for (long i = 0; i < n - 1; i++) free(p[i]);
    pinned[me] = p[n - 1];
    free(p);
    pthread_mutex_lock(&mu);
    turn++;
    pthread_cond_broadcast(&cv);
    while (turn < nthreads) pthread_cond_wait(&cv, &mu);   /* stay alive: the arena stays ours */
    pthread_mutex_unlock(&mu);
    return NULL;
}

int main(int argc, char **argv) {
    nthreads = argc > 1 ? atol(argv[1]) : 16;
    mib = argc > 2 ? atol(argv[2]) : 16;
    if (nthreads < 1 || nthreads > 256) return 2;
    pthread_t t[256];
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < nthreads; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    for (long i = 0; i < nthreads; i++) pthread_join(t[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
    printf("ops/s: %.0f\n", nthreads * mib * 2048 / s);
    usleep(100000);
    for (long i = 0; i < nthreads; i++) free(pinned[i]);
    return 0;
}
