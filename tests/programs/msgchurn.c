/* Threads that each build, fill and free messages of 64 KiB, three in flight (the echo-server
 * pattern of IVS#143). Each thread allocates from an arena of its own; freeing the three lets its
 * top pass glibc's trim threshold (128 KiB), glibc gives it back with madvise, and the next round
 * faults the pages in again. Prints the messages' checksum.
 * Usage: msgchurn [THREADS] [ROUNDS] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MSG (64 * 1024)
#define IN_FLIGHT 3

static long rounds;

static void *worker(void *arg) {
    unsigned long long sum = (unsigned long long)(size_t)arg;
    for (long r = 0; r < rounds; r++) {
        unsigned char *m[IN_FLIGHT];
        for (int i = 0; i < IN_FLIGHT; i++) {
            m[i] = malloc(MSG);
            memset(m[i], (int)(r + i), MSG);
        }
        for (int i = 0; i < IN_FLIGHT; i++) {
            sum += m[i][(r * 131 + i) % MSG];
            free(m[i]);
        }
    }
    return (void *)(size_t)sum;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    rounds = argc > 2 ? atol(argv[2]) : 20000;
    pthread_t t[64];
    unsigned long long total = 0;
    if (threads < 1 || threads > 64) return 2;
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, (void *)(size_t)i);
    for (int i = 0; i < threads; i++) {
        void *r;
        pthread_join(t[i], &r);
        total += (unsigned long long)(size_t)r;
    }
    printf("threads %d rounds %ld checksum %llu\n", threads, rounds, total);
    return 0;
}
