/* A program with a double free: glibc detects it and aborts ("free(): double free detected in
 * tcache 2", SIGABRT) every run; the other allocators do not check, and it exits 0. tune and
 * compare must say that it fails under the default, not pick an allocator that hides the fault. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void keep(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

int main(void) {
    long sum = 0;
    for (int i = 0; i < 20000; i++) {
        char *p = malloc(64 + (size_t)(i % 200));
        memset(p, i & 0x7f, 64);
        keep(p);
        sum += p[0];
        free(p);
        if (i == 10000) free(p);   /* the bug */
    }
    printf("sum: %ld\n", sum);
    return 0;
}
