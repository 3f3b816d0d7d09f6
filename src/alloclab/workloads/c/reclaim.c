/*
 * reclaim - does freed memory go back to the OS?
 *
 * Stands for: a long-running service after a load spike (a cache flush, a
 * big request, a batch job inside a daemon): hundreds of MB of small objects
 * are allocated and then freed.  Whether RSS drops afterwards - by itself,
 * after an explicit release call, or after some idle time - decides whether
 * the container gets OOM-killed or the host swaps.  Allocators differ a lot:
 * glibc only trims the top of each heap (fragmented small chunks stay until
 * malloc_trim), tcmalloc keeps a page heap released gradually, jemalloc
 * purges on a decay timer, mimalloc purges after a short delay.
 *
 * Shape: `--threads` threads each allocate total/threads bytes of small
 * objects (16..512 B, skewed small), writing every object (pages are made
 * resident).  Objects are chained through their first word, so no side table
 * inflates RSS.  Main samples RSS at the peak; then each thread frees its own
 * objects and exits (with --keep-threads the workers instead stay alive,
 * idle, until every reading is taken, like a server's worker pool; thread
 * exit matters: caches are flushed, and jemalloc purges an arena whose last
 * thread has left).  RSS is read after the free, after the allocator's
 * release call (found at run time: MallocExtension_ReleaseFreeMemory /
 * mallctl arena purge / mi_collect / malloc_trim; skipped with --no-release)
 * and after `--idle-ms` of idling.
 *
 * Output: RSS at each point (KB) and the fraction of the spike returned,
 * (peak - rss) / (peak - baseline), clamped to 0..1; release_ms.
 */
#include "common.h"

static long long nthreads, total, min_size, max_size, keep_threads;
static sizedist_t sizes;
static pthread_barrier_t phase;

typedef struct {
    long long id;
    uint64_t bytes;
    uint64_t objects;
} worker_arg;

static void *worker(void *arg)
{
    worker_arg *w = arg;
    rng_t rng;
    rng_seed(&rng, (uint64_t)cl_seed, (uint64_t)w->id);
    uint64_t target = (uint64_t)(total / nthreads);
    void *list = NULL;
    while (w->bytes < target) {
        size_t len = sizedist_draw(&sizes, &rng);
        void **p = malloc(len);
        if (!p)
            cl_die("malloc");
        memset(p, (int)(w->objects & 0xff), len); /* the object is filled */
        *p = list;                                 /* chain through first word */
        list = p;
        w->bytes += len;
        w->objects++;
        extra_work(cl_extra_work);
    }
    pthread_barrier_wait(&phase); /* all allocated: main reads peak RSS */
    pthread_barrier_wait(&phase); /* main says: free */
    while (list) {
        void *next = *(void **)list;
        free(list);
        list = next;
    }
    pthread_barrier_wait(&phase); /* all freed: main reads RSS */
    if (keep_threads)             /* stay alive (idle server workers) */
        pthread_barrier_wait(&phase);
    /* Otherwise exit now: thread caches are flushed / heaps abandoned, and
     * some allocators purge an arena when its last thread leaves. */
    return NULL;
}

static double returned(long long peak, long long base, long long now)
{
    if (peak <= base)
        return 0.0;
    double f = (double)(peak - now) / (double)(peak - base);
    return f < 0 ? 0 : f > 1 ? 1 : f;
}

int main(int argc, char **argv)
{
    long long idle_ms = 500, no_release = 0;
    nthreads = 2, total = 400LL << 20, min_size = 16, max_size = 512;
    cl_flag flags[] = {
        {"threads", CL_INT, &nthreads, 1, 1024, "allocating threads", 0},
        {"total", CL_SIZE, &total, 1, 1LL << 40, "bytes allocated in total (K/M/G suffix)", 0},
        {"min-size", CL_SIZE, &min_size, 16, 1LL << 30, "smallest object (bytes, >= 16)", 0},
        {"max-size", CL_SIZE, &max_size, 16, 1LL << 30, "largest object (bytes)", 0},
        {"idle-ms", CL_INT, &idle_ms, 0, 3600000, "idle time before the last RSS reading", 0},
        {"no-release", CL_BOOL, &no_release, 0, 1, "skip the allocator's release call", 0},
        {"keep-threads", CL_BOOL, &keep_threads, 0, 1,
         "workers stay alive (idle) until all readings are taken, instead of exiting after the free", 0},
        CL_END,
    };
    cl_parse("reclaim", argc, argv, flags);
    if (min_size > max_size)
        cl_fail("--min-size (%lld) must be <= --max-size (%lld)", min_size, max_size);
    sizedist_init(&sizes, (uint64_t)min_size, (uint64_t)max_size, 1.0);

    worker_arg *args = cl_check(calloc((size_t)nthreads, sizeof *args), "calloc");
    pthread_t *th = cl_check(malloc((size_t)nthreads * sizeof *th), "malloc");
    pthread_barrier_init(&phase, NULL, (unsigned)nthreads + 1);

    long long rss_base = rss_kb();
    uint64_t t0 = now_ns();
    for (long long t = 0; t < nthreads; t++) {
        args[t].id = t;
        start_thread(&th[t], worker, &args[t]);
    }
    pthread_barrier_wait(&phase);
    double alloc_s = secs_since(t0);
    long long rss_peak = rss_kb();
    uint64_t t1 = now_ns();
    pthread_barrier_wait(&phase); /* workers: free now */
    pthread_barrier_wait(&phase); /* workers: all freed */
    if (!keep_threads)
        for (long long t = 0; t < nthreads; t++)
            pthread_join(th[t], NULL);
    double free_s = secs_since(t1);
    long long rss_free = rss_kb();

    const char *call = NULL;
    double release_ms = 0;
    long long rss_release = rss_free;
    if (!no_release) {
        uint64_t t2 = now_ns();
        call = alloc_release();
        release_ms = secs_since(t2) * 1e3;
        rss_release = rss_kb();
    }
    sleep_ms(idle_ms);
    long long rss_idle = rss_kb();
    double secs = secs_since(t0);
    if (keep_threads) {
        pthread_barrier_wait(&phase); /* release the idle workers */
        for (long long t = 0; t < nthreads; t++)
            pthread_join(th[t], NULL);
    }

    uint64_t objects = 0, bytes = 0;
    for (long long t = 0; t < nthreads; t++) {
        objects += args[t].objects;
        bytes += args[t].bytes;
    }

    json_begin("reclaim");
    json_int("rss_base_kb", rss_base);
    json_int("rss_peak_kb", rss_peak);
    json_int("rss_after_free_kb", rss_free);
    if (no_release)
        json_null("rss_after_release_kb");
    else
        json_int("rss_after_release_kb", rss_release);
    json_int("rss_after_idle_kb", rss_idle);
    json_num("returned_after_free", returned(rss_peak, rss_base, rss_free));
    if (no_release) {
        json_null("returned_after_release");
        json_null("release_ms");
    } else {
        json_num("returned_after_release", returned(rss_peak, rss_base, rss_release));
        json_num("release_ms", release_ms);
    }
    json_num("returned_after_idle", returned(rss_peak, rss_base, rss_idle));
    json_str("alloc_release_call", call);
    /* Overhead: resident KB per KB requested, at the peak. */
    json_num("peak_overhead", (double)(rss_peak - rss_base) / ((double)bytes / 1024.0));
    json_num("alloc_s", alloc_s);
    json_num("free_s", free_s);
    json_num("allocs_per_s", (double)objects / alloc_s);
    json_int("objects", (long long)objects);
    json_int("bytes", (long long)bytes);
    json_int("threads", nthreads);
    json_int("idle_ms", idle_ms);
    json_int("keep_threads", keep_threads);
    json_num("seconds", secs);
    json_end();
    return 0;
}
