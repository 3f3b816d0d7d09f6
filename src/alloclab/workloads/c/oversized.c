/*
 * oversized - per "query", allocate ~1000 chunks of 27 KB, touch them, free
 * them all; repeat.
 *
 * Stands for: PostgreSQL running an index scan over many partitions.  Each
 * chunk is above the memory context's chunk limit, so the context hands it
 * straight to malloc, and the whole batch is freed when the query's context
 * is reset.  Known effect: under default glibc a 27 KB chunk is below the
 * mmap threshold, so the batch is carved from the brk heap; freeing it all
 * coalesces into the top chunk, which is larger than M_TRIM_THRESHOLD, so
 * glibc shrinks the heap (brk) after EVERY query and the next query page-
 * faults all ~27 MB back in.  With MALLOC_TOP_PAD_=64M glibc keeps 64 MB of
 * top and the faults disappear (tens of times faster).  Other allocators keep
 * or decay the pages and do not pay the cost per query.
 *
 * Touching: the first 64 bytes plus one byte per 4 KiB page of every chunk,
 * as the executor would write tuples into it.  This is what makes the
 * trimmed-and-refaulted pages cost time.
 *
 * Output: queries_per_s.
 */
#include "common.h"

int main(int argc, char **argv)
{
    long long queries = 150, chunks = 1000, chunk_size = 27000, warmup = 1;
    cl_flag flags[] = {
        {"queries", CL_INT, &queries, 1, 1LL << 40, "number of queries", 0},
        {"chunks", CL_INT, &chunks, 1, 1LL << 24, "chunks allocated per query", 0},
        {"chunk-size", CL_SIZE, &chunk_size, 1, 1LL << 30, "bytes per chunk", 0},
        {"warmup", CL_INT, &warmup, 0, 1LL << 30, "untimed queries first (a backend is warm)", 0},
        CL_END,
    };
    cl_parse("oversized", argc, argv, flags);

    void **p = cl_check(malloc((size_t)chunks * sizeof *p), "malloc");
    const size_t sz = (size_t)chunk_size;
    const long long ew = cl_extra_work;

    /* Warm-up queries are not timed: a PostgreSQL backend has run queries
     * before, so first-touch faults of a heap that is then KEPT are not the
     * steady-state cost.  (A heap that is trimmed after every query pays
     * them on every timed query anyway.) */
    uint64_t t0 = 0;
    for (long long q = -warmup; q < queries; q++) {
        if (q == 0)
            t0 = now_ns();
        for (long long i = 0; i < chunks; i++) {
            p[i] = malloc(sz);
            if (!p[i])
                cl_die("malloc");
            touch(p[i], sz);
            extra_work(ew);
        }
        escape(p);
        /* The memory context reset frees the chunks in allocation order. */
        for (long long i = 0; i < chunks; i++)
            free(p[i]);
    }
    double secs = secs_since(t0);
    free(p);

    json_begin("oversized");
    json_num("queries_per_s", (double)queries / secs);
    json_num("ms_per_query", secs * 1e3 / (double)queries);
    json_num("allocs_per_s", (double)queries * (double)chunks / secs);
    json_int("queries", queries);
    json_int("chunks", chunks);
    json_int("chunk_size", chunk_size);
    json_int("warmup", warmup);
    json_int("threads", 1);
    json_num("seconds", secs);
    json_end();
    return 0;
}
