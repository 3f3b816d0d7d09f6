/* Linked against jemalloc (libjemalloc.so.2 on the command line), it reports which allocator
 * served its malloc family, from behaviour rather than symbols: glibc's main arena (mallinfo2)
 * grows only when glibc's malloc serves, and malloc_usable_size(malloc(100)) is 104 under glibc
 * (chunk minus header), 112 under jemalloc (its size class). It also calls jemalloc's own API
 * (mallctl), which stays with jemalloc whatever is preloaded. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);
int main(void) {
    enum { N = 2000 };
    static void *held[N];
    for (int i = 0; i < N; i++) held[i] = malloc(1000);
    char *c = calloc(10, 10), *r = realloc(malloc(10), 5000);
    void *a = aligned_alloc(64, 256), *pm = NULL;
    int pm_rc = posix_memalign(&pm, 4096, 100);
    void *small = malloc(100);
    size_t usable = malloc_usable_size(small);
    struct mallinfo2 mi = mallinfo2();
    const char *version = ""; size_t len = sizeof version;
    int ctl = mallctl("version", &version, &len, NULL, 0);
    printf("glibc_arena_kb=%zu usable_100=%zu aligned=%d posix_memalign=%d mallctl=%d\n",
           mi.arena / 1024, usable, ((size_t)a % 64) == 0, pm_rc == 0 && ((size_t)pm % 4096) == 0, ctl);
    free(small); free(pm); free(a); free(r); free(c);
    for (int i = 0; i < N; i++) free(held[i]);
    return 0;
}
