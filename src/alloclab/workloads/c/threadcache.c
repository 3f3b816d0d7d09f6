/*
 * threadcache - many more threads than cores, each churning a working set
 * larger than a per-thread cache.
 *
 * Stands for: thread-per-connection servers (MySQL/MariaDB, Ceph OSD, older
 * JVM-native code) with dozens of threads on a few cores.  Thread-caching
 * allocators keep freed objects in per-thread caches; the caches have a
 * budget (gperftools: TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES, 32 MB by default
 * shared by all threads, so ~1 MB each at 32 threads).  When a thread frees
 * more than its cache holds, objects go back to central free lists under
 * locks and must be fetched again on the next allocations: throughput then
 * depends on the cache budget, which is the tuning this workload exposes.
 *
 * Shape: each of `--threads` threads keeps a FIFO ring of live objects
 * totalling about `--working-set` bytes (sizes 32 B..4 KB, skewed small).
 * It repeatedly frees the oldest `--batch` objects (a request finishing and
 * dropping its buffers) and then allocates as many new ones (the next
 * request), writing the first word of each.  The freed batch (about 1.7 MB
 * at the defaults) is what a thread cache must absorb.  `--ops` malloc+free
 * pairs are split over the threads.  Objects are not read before they are
 * freed: the FIFO's oldest objects are cold, and reading them would make the
 * workload measure its own cache misses rather than the allocator's.
 *
 * Output: ops_per_s (malloc+free pairs per second, all threads).
 */
#include "common.h"

typedef struct {
    long long id;
    long long ops;
} worker_arg;

static long long nthreads, working_set, min_size, max_size, batch, total_ops;
static sizedist_t sizes;
static pthread_barrier_t start_barrier;

static void *worker(void *arg)
{
    worker_arg *w = arg;
    rng_t rng;
    rng_seed(&rng, (uint64_t)cl_seed, (uint64_t)w->id);

    /* Fill the ring up to the working set (not timed: before the barrier). */
    size_t cap = 1024, n = 0, bytes = 0;
    char **ring = cl_check(malloc(cap * sizeof *ring), "malloc");
    while (bytes < (size_t)working_set) {
        if (n == cap) {
            cap *= 2;
            ring = cl_check(realloc(ring, cap * sizeof *ring), "realloc");
        }
        size_t len = sizedist_draw(&sizes, &rng);
        ring[n] = cl_check(malloc(len), "malloc");
        touch(ring[n], len);
        bytes += len;
        n++;
    }
    size_t b = (size_t)batch < n ? (size_t)batch : n;

    pthread_barrier_wait(&start_barrier);
    size_t head = 0; /* oldest object */
    for (long long done = 0; done < w->ops; done += (long long)b) {
        /* Request ends: its objects (the oldest) are freed together. */
        for (size_t i = 0, j = head; i < b; i++, j = (j + 1 == n ? 0 : j + 1))
            free(ring[j]);
        /* Next request: the same number of new objects, written. */
        for (size_t i = 0, j = head; i < b; i++, j = (j + 1 == n ? 0 : j + 1)) {
            size_t len = sizedist_draw(&sizes, &rng);
            char *p = malloc(len);
            if (!p)
                cl_die("malloc");
            touch_first(p, len);
            ring[j] = p;
            extra_work(cl_extra_work);
        }
        head = (head + b) % n;
    }
    pthread_barrier_wait(&start_barrier); /* stop the clock before cleanup */
    for (size_t i = 0; i < n; i++)
        free(ring[i]);
    free(ring);
    return NULL;
}

int main(int argc, char **argv)
{
    nthreads = 32, working_set = 2 << 20, min_size = 32, max_size = 4096, batch = 2048, total_ops = 6000000;
    cl_flag flags[] = {
        {"threads", CL_INT, &nthreads, 1, 4096, "worker threads (default: many more than cores)", 0},
        {"working-set", CL_SIZE, &working_set, 1, 1LL << 36, "live bytes per thread", 0},
        {"min-size", CL_SIZE, &min_size, 1, 1LL << 30, "smallest object (bytes)", 0},
        {"max-size", CL_SIZE, &max_size, 1, 1LL << 30, "largest object (bytes)", 0},
        {"batch", CL_INT, &batch, 1, 1LL << 30, "objects freed then reallocated together", 0},
        {"ops", CL_INT, &total_ops, 1, 1LL << 40, "total malloc+free pairs", 0},
        CL_END,
    };
    cl_parse("threadcache", argc, argv, flags);
    if (min_size > max_size)
        cl_fail("--min-size (%lld) must be <= --max-size (%lld)", min_size, max_size);
    sizedist_init(&sizes, (uint64_t)min_size, (uint64_t)max_size, 1.0);

    worker_arg *args = cl_check(calloc((size_t)nthreads, sizeof *args), "calloc");
    pthread_t *th = cl_check(malloc((size_t)nthreads * sizeof *th), "malloc");
    pthread_barrier_init(&start_barrier, NULL, (unsigned)nthreads + 1);
    for (long long t = 0; t < nthreads; t++) {
        args[t].id = t;
        args[t].ops = total_ops / nthreads + (t < total_ops % nthreads);
        start_thread(&th[t], worker, &args[t]);
    }
    pthread_barrier_wait(&start_barrier);
    uint64_t t0 = now_ns();
    pthread_barrier_wait(&start_barrier);
    double secs = secs_since(t0);
    for (long long t = 0; t < nthreads; t++)
        pthread_join(th[t], NULL);

    /* Work is done in whole batches, so count what was actually done. */
    double done = 0;
    for (long long t = 0; t < nthreads; t++) {
        long long b = batch, o = args[t].ops;
        done += (double)((o + b - 1) / b * b);
    }
    json_begin("threadcache");
    json_num("ops_per_s", done / secs);
    json_num("ops", done);
    json_int("threads", nthreads);
    json_int("working_set", working_set);
    json_int("batch", batch);
    json_int("min_size", min_size);
    json_int("max_size", max_size);
    json_num("seconds", secs);
    json_end();
    return 0;
}
