/* An executable that defines malloc/free itself (a bump allocator): LD_PRELOAD cannot win. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
static char arena[64 << 20];
static size_t used;
void *malloc(size_t n) { n = (n + 15) & ~(size_t)15; if (used + n > sizeof arena) return NULL; void *p = arena + used; used += n; return p; }
void free(void *p) { (void)p; }
void *calloc(size_t a, size_t b) { void *p = malloc(a * b); if (p) memset(p, 0, a * b); return p; }
void *realloc(void *p, size_t n) { void *q = malloc(n); if (p && q) memcpy(q, p, n); return q; }
int main(void) {
    for (int i = 0; i < 1000; i++) free(malloc(100));
    char *s = strdup("hello");   /* libc calls malloc through the dynamic linker */
    printf("ok %s\n", s);
    return 0;
}
