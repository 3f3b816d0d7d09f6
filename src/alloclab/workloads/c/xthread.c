/*
 * xthread - producer/consumer I/O path: objects allocated on one thread,
 * freed on another.
 *
 * Stands for: librbd inside QEMU (and most async I/O stacks): a submitter
 * thread allocates a request object plus a data buffer, hands it to the I/O
 * layer, and a completion thread frees both.  Every free is a cross-thread
 * (remote) free, which is where allocators differ most: glibc returns the
 * chunk to the owning arena under its lock, tcmalloc puts it in the freeing
 * thread's cache (memory migrates between threads), jemalloc/mimalloc hand it
 * back to the owner's bin/page with atomics.
 *
 * Shape: `--submitters` threads each submit ops/submitters requests in
 * batches of `--batch` (128 by default, as an I/O stack batches submissions:
 * io_uring, aio, librbd's op queue), round-robin to one bounded queue of 8
 * batches per completion thread.  Completers take whole batches and free
 * what they take.  Buffer sizes are skewed to small (log-uniform 64 B..16 KB
 * by default).
 *
 * The hand-off is deliberately cheap (one lock per batch, a sleeping side
 * woken only at half a queue) and the completer frees what the completion
 * entry names without reading the request or the buffer: a workload that
 * spent its time in futexes, context switches and cache misses of its own
 * would measure itself, not the allocator.
 *
 * Latency: on 1 request in 64, the time spent inside the allocator for that
 * request is measured: malloc of the request and its buffer on the submitter
 * plus the two frees on the completer.  Queueing time is not included (it is
 * a property of the queue, not of the allocator); the tail (p99.9) shows
 * allocator stalls: lock waits, page faults, heap growth and trimming.
 *
 * --threads=N is a shorthand for --submitters=N --completers=N, so a thread
 * sweep over `threads` works like for the other workloads.
 *
 * Output: ops_per_s, lat_p50_ns, lat_p99_ns, lat_p999_ns.
 */
#include "common.h"

#define QDEPTH 8          /* batches in flight per queue: back-pressure like an I/O queue depth */
#define WAKE_AT (QDEPTH / 2) /* a sleeping side is woken only at half a queue: fewer, larger wake-ups */
#define MAX_BATCH 4096
#define SAMPLE_EVERY 64   /* allocator latency sampled on 1 in 64 requests */

typedef struct request {
    size_t len;
    char *buf;
    uint64_t id;
    char pad[40];         /* a request struct is more than a pointer: ~64 B */
} request;

/* What travels through the queue: like an I/O completion entry, it names what to
 * release, so the completer frees without reading the (cold) request itself: the
 * cache misses of a remote free are then the allocator's, as they are in a free
 * that reads or writes the freed object's memory. */
typedef struct {
    request *req;
    char *buf;
    uint64_t alloc_ns;    /* time in malloc for this request; 0 = not sampled */
} handoff;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t not_empty, not_full;
    handoff *slot[QDEPTH];    /* each slot holds one batch of `batch` requests */
    unsigned len[QDEPTH];
    unsigned head, count;
    int closed;
    /* results of the completer draining this queue */
    uint64_t *lat;
    size_t nlat, cap_lat;
    uint64_t done;
} queue;

static queue *queues;
static long long nsub, ncomp, ops, min_size, max_size, batch;
static sizedist_t sizes;
static pthread_barrier_t start_barrier;

/* Hand a whole batch over: one lock, at most one wake-up. */
static void queue_push(queue *q, const handoff *rs, unsigned n)
{
    pthread_mutex_lock(&q->mu);
    while (q->count == QDEPTH)
        pthread_cond_wait(&q->not_full, &q->mu);
    unsigned i = (q->head + q->count) % QDEPTH;
    memcpy(q->slot[i], rs, n * sizeof *rs);
    q->len[i] = n;
    /* The completer sleeps only on an empty queue; waking it for every batch would cost a
     * context switch per batch, which on few cores is what the workload would measure. */
    if (++q->count == WAKE_AT)
        pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(&q->mu);
}

/* Take one batch into `out`; returns 0 when the queue is closed and empty. */
static unsigned queue_pop(queue *q, handoff *out)
{
    pthread_mutex_lock(&q->mu);
    while (q->count == 0 && !q->closed)
        pthread_cond_wait(&q->not_empty, &q->mu);
    unsigned n = 0;
    if (q->count) {
        n = q->len[q->head];
        memcpy(out, q->slot[q->head], n * sizeof *out);
        q->head = (q->head + 1) % QDEPTH;
        /* Submitters wait only on a full queue, so the count passes WAKE_AT on its way
         * down after any wait began; broadcast, as several submitters may share a queue. */
        if (--q->count == WAKE_AT)
            pthread_cond_broadcast(&q->not_full);
    }
    pthread_mutex_unlock(&q->mu);
    return n;
}

static void *submitter(void *arg)
{
    long long id = (long long)(intptr_t)arg;
    long long my_ops = ops / nsub + (id < ops % nsub);
    rng_t rng;
    rng_seed(&rng, (uint64_t)cl_seed, (uint64_t)id);
    handoff *pending = cl_check(malloc((size_t)batch * sizeof *pending), "malloc");
    unsigned npending = 0;
    long long target = id % ncomp;
    pthread_barrier_wait(&start_barrier);
    for (long long i = 0; i < my_ops; i++) {
        int sampled = i % SAMPLE_EVERY == 0;
        size_t len = sizedist_draw(&sizes, &rng);
        uint64_t t0 = sampled ? now_ns() : 0;
        request *r = malloc(sizeof *r);
        char *buf = malloc(len);
        uint64_t t1 = sampled ? now_ns() : 0;
        if (!r || !buf)
            cl_die("malloc");
        r->len = len;
        r->buf = buf;
        r->id = (uint64_t)i;
        touch(buf, len); /* the submitter fills the write buffer */
        extra_work(cl_extra_work);
        pending[npending++] = (handoff){r, buf, sampled ? (t1 - t0) | 1 : 0};  /* | 1: never 0 */
        if (npending == (unsigned)batch || i == my_ops - 1) {
            queue_push(&queues[target], pending, npending);
            npending = 0;
            target = (target + 1) % ncomp;  /* batches go round-robin to the completers */
        }
    }
    free(pending);
    return NULL;
}

static void *completer(void *arg)
{
    queue *q = arg;
    handoff *got = cl_check(malloc((size_t)batch * sizeof *got), "malloc");
    unsigned n;
    pthread_barrier_wait(&start_barrier);
    while ((n = queue_pop(q, got)) > 0) {
        for (unsigned i = 0; i < n; i++) {
            const handoff *h = &got[i];
            if (h->alloc_ns) {
                uint64_t t0 = now_ns();
                free(h->buf);
                free(h->req);
                uint64_t t1 = now_ns();
                if (q->nlat < q->cap_lat)
                    q->lat[q->nlat++] = h->alloc_ns + (t1 - t0);
            } else {
                free(h->buf);
                free(h->req);
            }
        }
        q->done += n;
    }
    free(got);
    return NULL;
}

int main(int argc, char **argv)
{
    long long threads = 2;
    nsub = 2, ncomp = 2, ops = 2000000, min_size = 64, max_size = 16384, batch = 128;
    cl_flag flags[] = {
        {"submitters", CL_INT, &nsub, 1, 1024, "threads that allocate requests", 0},
        {"completers", CL_INT, &ncomp, 1, 1024, "threads that free requests", 0},
        {"threads", CL_INT, &threads, 1, 1024, "shorthand: N submitters and N completers", 0},
        {"ops", CL_INT, &ops, 1, 1LL << 40, "total requests", 0},
        {"min-size", CL_SIZE, &min_size, 1, 1LL << 30, "smallest buffer (bytes)", 0},
        {"max-size", CL_SIZE, &max_size, 1, 1LL << 30, "largest buffer (bytes)", 0},
        {"batch", CL_INT, &batch, 1, MAX_BATCH, "requests handed over per queue operation", 0},
        CL_END,
    };
    cl_parse("xthread", argc, argv, flags);
    if (cl_was_set(flags, "threads")) /* --threads=N: N submitters + N completers */
        nsub = ncomp = threads;
    if (min_size > max_size)
        cl_fail("--min-size (%lld) must be <= --max-size (%lld)", min_size, max_size);
    sizedist_init(&sizes, (uint64_t)min_size, (uint64_t)max_size, 1.0);

    /* All bookkeeping is allocated before the clock starts. */
    queues = cl_check(calloc((size_t)ncomp, sizeof *queues), "calloc");
    size_t cap = (size_t)(ops / SAMPLE_EVERY + nsub + 1);
    for (long long c = 0; c < ncomp; c++) {
        queue *q = &queues[c];
        pthread_mutex_init(&q->mu, NULL);
        pthread_cond_init(&q->not_empty, NULL);
        pthread_cond_init(&q->not_full, NULL);
        for (int i = 0; i < QDEPTH; i++)
            q->slot[i] = cl_check(malloc((size_t)batch * sizeof *q->slot[i]), "malloc");
        q->cap_lat = cap;
        q->lat = cl_check(malloc(cap * sizeof *q->lat), "malloc");
        memset(q->lat, 0, cap * sizeof *q->lat); /* fault the pages in now */
    }
    pthread_barrier_init(&start_barrier, NULL, (unsigned)(nsub + ncomp + 1));
    pthread_t *st = cl_check(malloc((size_t)nsub * sizeof *st), "malloc");
    pthread_t *ct = cl_check(malloc((size_t)ncomp * sizeof *ct), "malloc");
    for (long long c = 0; c < ncomp; c++)
        start_thread(&ct[c], completer, &queues[c]);
    for (long long s = 0; s < nsub; s++)
        start_thread(&st[s], submitter, (void *)(intptr_t)s);

    pthread_barrier_wait(&start_barrier);
    uint64_t t0 = now_ns();
    for (long long s = 0; s < nsub; s++)
        pthread_join(st[s], NULL);
    for (long long c = 0; c < ncomp; c++) { /* no more submissions: close queues */
        pthread_mutex_lock(&queues[c].mu);
        queues[c].closed = 1;
        pthread_cond_broadcast(&queues[c].not_empty);
        pthread_mutex_unlock(&queues[c].mu);
    }
    for (long long c = 0; c < ncomp; c++)
        pthread_join(ct[c], NULL);
    double secs = secs_since(t0);

    /* Merge latency samples. */
    size_t nlat = 0;
    uint64_t done = 0;
    for (long long c = 0; c < ncomp; c++) {
        nlat += queues[c].nlat;
        done += queues[c].done;
    }
    if (done != (uint64_t)ops)
        cl_die("request accounting");
    uint64_t *lat = cl_check(malloc((nlat + 1) * sizeof *lat), "malloc");
    size_t k = 0;
    for (long long c = 0; c < ncomp; c++) {
        memcpy(lat + k, queues[c].lat, queues[c].nlat * sizeof *lat);
        k += queues[c].nlat;
    }
    qsort(lat, nlat, sizeof *lat, cmp_u64);

    json_begin("xthread");
    json_num("ops_per_s", (double)ops / secs);
    json_int("lat_p50_ns", (long long)percentile_sorted(lat, nlat, 0.50));
    json_int("lat_p99_ns", (long long)percentile_sorted(lat, nlat, 0.99));
    json_int("lat_p999_ns", (long long)percentile_sorted(lat, nlat, 0.999));
    json_int("lat_samples", (long long)nlat);
    json_int("ops", ops);
    json_int("submitters", nsub);
    json_int("completers", ncomp);
    /* "threads" echoes the --threads sweep parameter (N submitters + N
     * completers); null when submitters and completers differ. */
    if (nsub == ncomp)
        json_int("threads", nsub);
    else
        json_null("threads");
    json_int("total_threads", nsub + ncomp);
    json_int("batch", batch);
    json_int("min_size", min_size);
    json_int("max_size", max_size);
    json_num("seconds", secs);
    json_end();
    return 0;
}
