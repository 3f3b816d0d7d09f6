/*
 * larson - server churn with thread hand-over (Larson & Krishnan benchmark).
 *
 * Stands for: a multithreaded server whose worker threads each keep a set of
 * live objects (connections, sessions, buffers) of random small sizes and
 * keep replacing them; workers are periodically retired and replaced by new
 * threads that inherit their state.  The inheriting thread frees objects the
 * old thread allocated, so the allocator sees remote frees and dead threads'
 * caches, not just a per-thread fast path.
 *
 * Shape: `--threads` lanes, each owning `--slots` objects (sizes uniform in
 * [min-size, max-size], as in the original benchmark).  A lane's thread does
 * `--ops-per-round` replacements (free a random slot, malloc a new random
 * size, write its first word), then starts its successor thread for the
 * next round and exits.  The slots are first filled by the main thread, so
 * even round 1 frees memory another thread allocated.
 *
 * A thread lives 250,000 replacements by default (a few milliseconds), as in
 * the original benchmark where each thread does many rounds before handing
 * over: retiring threads every few hundred microseconds would measure
 * pthread_create and the kernel, and a thread shorter than perf's sampling
 * period is barely seen by a profile.  The object is not read before it is
 * freed, so the cache misses of a free land in the allocator, not here.
 *
 * Output: ops_per_s (replacements per second, all lanes, including the cost
 * of thread hand-over, as in the original benchmark).
 */
#include "common.h"

typedef struct {
    long long id;
    long long round;    /* rounds completed by this lane */
    rng_t rng;
    char **slot;
    size_t *len;
} lane;

static long long nthreads, nslots, min_size, max_size, rounds, ops_per_round;
static pthread_mutex_t done_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER;
static long long lanes_done;
static pthread_attr_t detached;

static void *worker(void *arg)
{
    lane *l = arg;
    rng_t rng = l->rng;
    const uint64_t span = (uint64_t)(max_size - min_size + 1);
    for (long long i = 0; i < ops_per_round; i++) {
        /* One random draw picks both the victim slot and the new size. */
        uint64_t x = rng_next(&rng);
        uint64_t s = (uint64_t)(((x >> 32) * (uint64_t)nslots) >> 32);
        size_t n = (size_t)min_size + (size_t)(((x & 0xffffffffULL) * span) >> 32);
        free(l->slot[s]);
        char *p = malloc(n);
        if (!p)
            cl_die("malloc");
        touch_first(p, n);
        l->slot[s] = p;
        l->len[s] = n;
        extra_work(cl_extra_work);
    }
    l->rng = rng;
    /* Retire: hand the slots to a fresh thread for the next round. */
    if (++l->round < rounds) {
        pthread_t t;
        if (pthread_create(&t, &detached, worker, l) != 0)
            cl_die("pthread_create");
    } else {
        pthread_mutex_lock(&done_mu);
        lanes_done++;
        pthread_cond_signal(&done_cv);
        pthread_mutex_unlock(&done_mu);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    nthreads = 2, nslots = 1000, min_size = 8, max_size = 1000, rounds = 40, ops_per_round = 250000;
    cl_flag flags[] = {
        {"threads", CL_INT, &nthreads, 1, 1024, "concurrent worker threads (lanes)", 0},
        {"slots", CL_INT, &nslots, 1, 1LL << 30, "live objects per thread", 0},
        {"min-size", CL_SIZE, &min_size, 1, 1LL << 30, "smallest object (bytes)", 0},
        {"max-size", CL_SIZE, &max_size, 1, 1LL << 30, "largest object (bytes)", 0},
        {"rounds", CL_INT, &rounds, 1, 1LL << 30, "thread generations per lane", 0},
        {"ops-per-round", CL_INT, &ops_per_round, 1, 1LL << 40, "replacements per thread generation", 0},
        CL_END,
    };
    cl_parse("larson", argc, argv, flags);
    if (min_size > max_size)
        cl_fail("--min-size (%lld) must be <= --max-size (%lld)", min_size, max_size);

    pthread_attr_init(&detached);
    pthread_attr_setdetachstate(&detached, PTHREAD_CREATE_DETACHED);

    /* The main thread fills every lane's slots (as a server's setup would). */
    lane *lanes = cl_check(calloc((size_t)nthreads, sizeof *lanes), "calloc");
    for (long long t = 0; t < nthreads; t++) {
        lane *l = &lanes[t];
        l->id = t;
        rng_seed(&l->rng, (uint64_t)cl_seed, (uint64_t)t);
        l->slot = cl_check(malloc((size_t)nslots * sizeof *l->slot), "malloc");
        l->len = cl_check(malloc((size_t)nslots * sizeof *l->len), "malloc");
        for (long long s = 0; s < nslots; s++) {
            size_t n = (size_t)rng_range(&l->rng, (uint64_t)min_size, (uint64_t)max_size);
            l->slot[s] = cl_check(malloc(n), "malloc");
            touch(l->slot[s], n);
            l->len[s] = n;
        }
    }

    uint64_t t0 = now_ns();
    for (long long t = 0; t < nthreads; t++) {
        pthread_t th;
        if (pthread_create(&th, &detached, worker, &lanes[t]) != 0)
            cl_die("pthread_create");
    }
    pthread_mutex_lock(&done_mu);
    while (lanes_done < nthreads)
        pthread_cond_wait(&done_cv, &done_mu);
    pthread_mutex_unlock(&done_mu);
    double secs = secs_since(t0);

    for (long long t = 0; t < nthreads; t++) {
        for (long long s = 0; s < nslots; s++)
            free(lanes[t].slot[s]);
        free(lanes[t].slot);
        free(lanes[t].len);
    }

    double total = (double)nthreads * (double)rounds * (double)ops_per_round;
    json_begin("larson");
    json_num("ops_per_s", total / secs);
    json_num("ops", total);
    json_num("thread_handovers_per_s", (double)nthreads * (double)rounds / secs);
    json_int("threads", nthreads);
    json_int("slots", nslots);
    json_int("min_size", min_size);
    json_int("max_size", max_size);
    json_int("rounds", rounds);
    json_int("ops_per_round", ops_per_round);
    json_num("seconds", secs);
    json_end();
    return 0;
}
