/* A small "real program" for profiling: word frequencies of generated documents.
 *
 * Per document it tokenizes WORDS words of generated text, copies every token to the heap,
 * counts them in a chained hash table (one heap node per distinct word), sorts the distinct
 * words by count with qsort, then frees everything. Hashing, comparing and sorting are real
 * work, so the allocator is a part of the CPU time rather than nearly all of it (unlike
 * churn.c). Deterministic: the same arguments always do the same work.
 *
 * Usage: wordfreq [DOCS=2000] [WORDS=4000] [VOCAB=3000]; prints "docs/s: N" and a checksum. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct node { char *word; long count; struct node *next; };

static uint64_t rng = 88172645463325252ULL;
static uint64_t next_rand(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }

static uint64_t hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) { h ^= (unsigned char)s[i]; h *= 1099511628211ULL; }
    return h;
}

static int by_count(const void *a, const void *b) {
    const struct node *x = *(struct node *const *)a, *y = *(struct node *const *)b;
    if (x->count != y->count) return x->count < y->count ? 1 : -1;
    return strcmp(x->word, y->word);
}

int main(int argc, char **argv) {
    long docs = argc > 1 ? atol(argv[1]) : 2000;
    long words = argc > 2 ? atol(argv[2]) : 4000;
    long vocab = argc > 3 ? atol(argv[3]) : 3000;
    if (docs < 1 || words < 1 || vocab < 1) { fprintf(stderr, "usage: wordfreq [DOCS] [WORDS] [VOCAB]\n"); return 2; }

    /* The vocabulary: VOCAB words of 3-18 letters. */
    char **vocabulary = malloc(vocab * sizeof *vocabulary);
    for (long i = 0; i < vocab; i++) {
        int len = 3 + (int)(next_rand() % 16);
        vocabulary[i] = malloc(len + 1);
        for (int j = 0; j < len; j++) vocabulary[i][j] = 'a' + (char)(next_rand() % 26);
        vocabulary[i][len] = 0;
    }
    size_t nbuckets = 4096;
    struct node **table = calloc(nbuckets, sizeof *table);
    uint64_t checksum = 0;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long d = 0; d < docs; d++) {
        long distinct = 0;
        for (long w = 0; w < words; w++) {
            /* Skewed word choice: low indices are common, as in text. */
            uint64_t r = next_rand();
            long idx = (long)((r % vocab) * ((r >> 32) % vocab) / vocab);
            const char *src = vocabulary[idx];
            size_t n = strlen(src);
            char *token = malloc(n + 1);     /* the tokenizer's copy */
            memcpy(token, src, n + 1);
            uint64_t h = hash(token, n);
            struct node **slot = &table[h & (nbuckets - 1)];
            struct node *e = *slot;
            while (e && strcmp(e->word, token) != 0) e = e->next;
            if (e) {
                e->count++;
                free(token);
            } else {
                e = malloc(sizeof *e);
                e->word = token; e->count = 1; e->next = *slot; *slot = e;
                distinct++;
            }
        }
        struct node **all = malloc(distinct * sizeof *all);
        long k = 0;
        for (size_t i = 0; i < nbuckets; i++)
            for (struct node *e = table[i]; e; e = e->next) all[k++] = e;
        qsort(all, k, sizeof *all, by_count);
        checksum += hash(all[0]->word, strlen(all[0]->word)) ^ (uint64_t)all[0]->count;
        for (long i = 0; i < k; i++) { free(all[i]->word); free(all[i]); }
        free(all);
        memset(table, 0, nbuckets * sizeof *table);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
    printf("docs/s: %.1f\nchecksum: %llu\n", docs / s, (unsigned long long)checksum);
    for (long i = 0; i < vocab; i++) free(vocabulary[i]);
    free(vocabulary);
    free(table);
    return 0;
}
