/*
 * fragment - long-running heap with mixed lifetimes and sizes: how much RSS
 * does the allocator need per byte the program actually holds, and does that
 * creep upwards over time?
 *
 * Stands for: long-lived services (Redis/memcached-style caches, language
 * runtimes, databases) whose heap mixes short-lived temporaries with objects
 * that live for minutes.  A long-lived object left in the middle of a span or
 * page pins it, so freed space around it cannot be returned or reused for
 * other sizes: RSS grows beyond live bytes (blowup) and can keep growing
 * (creep) even though the live set is stable.
 *
 * Shape: one thread does `--ops` steps.  Each step frees the objects whose
 * lifetime ends now, then allocates one object: size from a power law
 * (log-uniform with extra skew, 16 B..64 KB: many small, few large), and
 * lifetime (in steps) geometric from a mixture: mostly short (mean 64 steps),
 * some medium (mean 4096), a few long (mean ~ horizon/2, up to `--horizon`
 * steps).  Live bytes are tracked exactly; RSS is sampled every 4096 steps.
 * Deaths are kept in a calendar queue: objects are chained through their
 * first word into the bucket of the step they die at, and the size sits in
 * the second word, so there is no side table in RSS.  After `--horizon`
 * steps the live set is statistically stable, so RSS growth between the two
 * halves of the run is fragmentation, not more live data (as long as --ops is
 * well above 2 x horizon).
 *
 * Output: blowup = peak (RSS - startup RSS) / peak live bytes; creep =
 * relative growth of (RSS - startup RSS) from the middle to the end of the
 * run; peak_live_kb, peak_rss_kb, ops_per_s.
 */
#include "common.h"

typedef struct obj {
    struct obj *next; /* calendar bucket chain */
    size_t size;
} obj;

int main(int argc, char **argv)
{
    long long ops = 8000000, min_size = 16, max_size = 64 << 10, horizon = 1 << 18;
    long long short_mean = 64, medium_mean = 4096, long_permille = 20, medium_permille = 150;
    cl_flag flags[] = {
        {"ops", CL_INT, &ops, 2, 1LL << 40, "allocations (each with its eventual free)", 0},
        {"min-size", CL_SIZE, &min_size, 16, 1LL << 30, "smallest object (bytes, >= 16)", 0},
        {"max-size", CL_SIZE, &max_size, 16, 1LL << 30, "largest object (bytes)", 0},
        {"horizon", CL_INT, &horizon, 16, 1LL << 26, "longest lifetime in steps", 0},
        {"short-mean", CL_INT, &short_mean, 1, 1LL << 26, "mean lifetime of short-lived objects", 0},
        {"medium-mean", CL_INT, &medium_mean, 1, 1LL << 26, "mean lifetime of medium-lived objects", 0},
        {"medium-permille", CL_INT, &medium_permille, 0, 1000, "medium-lived objects per 1000", 0},
        {"long-permille", CL_INT, &long_permille, 0, 1000, "long-lived objects per 1000", 0},
        CL_END,
    };
    cl_parse("fragment", argc, argv, flags);
    if (min_size > max_size)
        cl_fail("--min-size (%lld) must be <= --max-size (%lld)", min_size, max_size);
    if (medium_permille + long_permille > 1000)
        cl_fail("--medium-permille + --long-permille must be <= 1000");

    sizedist_t sizes;
    sizedist_init(&sizes, (uint64_t)min_size, (uint64_t)max_size, 2.0);
    rng_t rng;
    rng_seed(&rng, (uint64_t)cl_seed, 0);

    /* Calendar: bucket t % horizon holds the objects that die at step t. */
    obj **bucket = cl_check(malloc((size_t)horizon * sizeof *bucket), "malloc");
    memset(bucket, 0, (size_t)horizon * sizeof *bucket); /* resident before baseline */
    long long rss_start = rss_kb();

    const double long_mean = (double)horizon / 2;
    long long live = 0, peak_live = 0, peak_rss = 0, rss_mid = 0, rss_end = 0, live_mid = 0;
    long long objects_live = 0;
    uint64_t checksum = 0;
    uint64_t t0 = now_ns();
    for (long long t = 0; t < ops; t++) {
        /* Free what dies now. */
        obj **b = &bucket[t % horizon];
        for (obj *o = *b, *next; o; o = next) {
            next = o->next;
            checksum += ((unsigned char *)o)[o->size - 1];
            live -= (long long)o->size;
            objects_live--;
            free(o);
        }
        *b = NULL;

        /* Allocate one object with a size and a lifetime. */
        size_t size = sizedist_draw(&sizes, &rng);
        uint64_t kind = rng_below(&rng, 1000);
        double mean = kind < (uint64_t)long_permille ? long_mean
                      : kind < (uint64_t)(long_permille + medium_permille) ? (double)medium_mean
                                                                           : (double)short_mean;
        long long life = 1 + (long long)(-mean * cm_log(rng_unit(&rng)));
        if (life >= horizon)
            life = horizon - 1;
        obj *o = malloc(size);
        if (!o)
            cl_die("malloc");
        touch(o, size);
        o->size = size;
        o->next = bucket[(t + life) % horizon];
        bucket[(t + life) % horizon] = o;
        live += (long long)size;
        objects_live++;
        if (live > peak_live)
            peak_live = live;
        extra_work(cl_extra_work);

        /* Sample RSS (a few hundred samples per run: cheap). */
        if ((t & 4095) == 4095 || t == ops / 2 - 1 || t == ops - 1) {
            long long r = rss_kb() - rss_start;
            if (r > peak_rss)
                peak_rss = r;
            if (t == ops / 2 - 1) {
                rss_mid = r;
                live_mid = live;
            }
            if (t == ops - 1)
                rss_end = r;
        }
    }
    double secs = secs_since(t0);
    long long live_end = live;

    /* Tear down (not timed). */
    for (long long i = 0; i < horizon; i++)
        for (obj *o = bucket[i], *next; o; o = next) {
            next = o->next;
            free(o);
        }
    free(bucket);
    escape(&checksum);

    double peak_live_kb = (double)peak_live / 1024.0;
    json_begin("fragment");
    json_num("blowup", peak_live_kb > 0 ? (double)peak_rss / peak_live_kb : 0.0);
    json_num("creep", rss_mid > 0 ? (double)(rss_end - rss_mid) / (double)rss_mid : 0.0);
    json_num("peak_live_kb", peak_live_kb);
    json_int("peak_rss_kb", peak_rss);
    json_int("rss_mid_kb", rss_mid);
    json_int("rss_end_kb", rss_end);
    json_num("live_mid_kb", (double)live_mid / 1024.0);
    json_num("live_end_kb", (double)live_end / 1024.0);
    json_num("ops_per_s", (double)ops / secs);
    json_int("ops", ops);
    json_int("threads", 1);
    json_int("horizon", horizon);
    json_int("rss_start_kb", rss_start);
    json_num("seconds", secs);
    json_end();
    return 0;
}
