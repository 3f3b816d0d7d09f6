/* A program linked against an allocator library of its own (here jemalloc): it calls malloc and
 * also jemalloc's own API (mallctl), which no preload of another allocator provides. */
#include <stdio.h>
#include <stdlib.h>
int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);
int main(int argc, char **argv) {
    const char *version; size_t len = sizeof version;
    char *p = malloc(100 * (size_t)argc);   /* argc: keep the compiler from eliding the pair */
    p[0] = argv[0][0];
    int rc = mallctl("version", &version, &len, NULL, 0);
    printf("ok mallctl=%d %c %p\n", rc, p[0], (void *)p);  /* p escapes: the pair stays */
    free(p);
    return 0;
}
