/* A program that bundles its own prefixed allocator (as Redis bundles je_malloc): its own
 * allocations go to je_malloc, which LD_PRELOAD does not replace. */
#include <stdio.h>
#include <stdlib.h>
static char pool[1 << 20];
static size_t off;
void *je_malloc(size_t n) { void *p = pool + off; off += (n + 15) & ~(size_t)15; return p; }
void je_free(void *p) { (void)p; }
int main(void) {
    for (int i = 0; i < 1000; i++) je_free(je_malloc(64));
    free(malloc(10));
    printf("ok\n");
    return 0;
}
