/* forkalloc: a parent that forks children which allocate, for the allocation fingerprint's tests.
 *
 * usage: forkalloc CHILDREN
 * The parent keeps 1000 blocks of 100 B, then forks CHILDREN children. Child i allocates and
 * frees 2000 blocks of 1000 B and 100 blocks of 300,000 B (above glibc's 128 KiB mmap threshold),
 * keeps 10 blocks of 5000 B, and exits: the even children with exit(0) (destructors run), the
 * odd ones with _exit(0) after 400 ms asleep (only the interposer's periodic write sees them).
 * The parent waits for them all, frees its blocks and exits. Prints "ok". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void *volatile keep[10];

static void child(int i) {
    void *small[2000];
    for (int k = 0; k < 2000; k++) { small[k] = malloc(1000); memset(small[k], 1, 16); }
    for (int k = 0; k < 2000; k++) free(small[k]);
    for (int k = 0; k < 100; k++) { char *volatile big = malloc(300000); big[0] = 1; free(big); }
    for (int k = 0; k < 10; k++) keep[k] = malloc(5000);
    if (i % 2) { usleep(400000); _exit(0); }
    exit(0);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 3;
    void *mine[1000];
    for (int k = 0; k < 1000; k++) mine[k] = malloc(100);
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid == 0) child(i);
        if (pid < 0) { perror("fork"); return 1; }
    }
    int status, bad = 0;
    while (wait(&status) > 0) bad |= !WIFEXITED(status) || WEXITSTATUS(status);
    for (int k = 0; k < 1000; k++) free(mine[k]);
    puts(bad ? "a child failed" : "ok");
    return bad;
}
