/* A program that takes malloc's address, built non-PIE (-no-pie -fno-pic) as Debian builds
 * python3: the executable gets a canonical PLT entry for malloc and the loader binds every
 * library's malloc to it. That entry is not a definition; it jumps to the real allocator. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *(*volatile alloc)(size_t);
void (*volatile release)(void *);

int main(void) {
    alloc = malloc;     /* in code, not a data initializer: an absolute address, so a PLT entry */
    release = free;
    for (int i = 0; i < 1000; i++) release(alloc(100));
    char *s = strdup("hello");   /* libc's own malloc call goes through the canonical entry */
    printf("ok %s\n", s);
    free(s);
    return 0;
}
