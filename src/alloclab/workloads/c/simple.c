/*
 * simple - single-thread bursts of small allocations and frees.
 *
 * Stands for: the glibc bench-malloc-simple pattern, i.e. a program that
 * allocates a handful of same-size temporaries, uses them, and frees them
 * (parsers, per-request scratch objects).  This is the allocator's fast path:
 * thread cache / tcache hits, no locks, no system calls.  It measures the
 * fixed cost of one malloc + one free.
 *
 * Each iteration allocates `--burst` objects of `--size` bytes, writes the
 * first byte of each (as a user of the object would), then frees them in
 * allocation order.
 *
 * Output: ns_per_pair (cost of one malloc+free pair) and pairs_per_s.
 */
#include "common.h"

int main(int argc, char **argv)
{
    long long size = 64, burst = 100, iters = 500000;
    cl_flag flags[] = {
        {"size", CL_SIZE, &size, 1, 1LL << 30, "bytes per allocation", 0},
        {"burst", CL_INT, &burst, 1, 1LL << 24, "allocations per burst", 0},
        {"iters", CL_INT, &iters, 1, 1LL << 40, "number of bursts", 0},
        CL_END,
    };
    cl_parse("simple", argc, argv, flags);

    /* The pointer array is allocated before timing so it is not measured. */
    void **p = cl_check(malloc((size_t)burst * sizeof *p), "malloc");
    const size_t sz = (size_t)size;
    const long long ew = cl_extra_work;

    uint64_t t0 = now_ns();
    for (long long it = 0; it < iters; it++) {
        for (long long i = 0; i < burst; i++) {
            char *q = malloc(sz);
            if (!q)
                cl_die("malloc");
            q[0] = (char)i; /* the object is used: first byte written */
            p[i] = q;
            extra_work(ew);
        }
        escape(p);
        for (long long i = 0; i < burst; i++)
            free(p[i]);
    }
    double secs = secs_since(t0);
    free(p);

    double pairs = (double)iters * (double)burst;
    json_begin("simple");
    json_num("ns_per_pair", secs * 1e9 / pairs);
    json_num("pairs_per_s", pairs / secs);
    json_num("pairs", pairs);
    json_int("size", size);
    json_int("burst", burst);
    json_int("iters", iters);
    json_int("threads", 1);
    json_num("seconds", secs);
    json_end();
    return 0;
}
