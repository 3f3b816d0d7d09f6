/* A program to inspect with `alloclab inspect --attach` while it pauses, under a preloaded allocator
 * (LD_PRELOAD of libjemalloc.so.2, libtcmalloc.so.4 or libmimalloc.so.2).
 *
 * It builds a heap state: MIB of blocks of mixed sizes, every third freed (free memory between live
 * blocks), and 16 large blocks made and freed (pages the allocator keeps or is returning). It starts
 * a heartbeat thread that mallocs and frees a small block every millisecond, so that a stop often
 * finds it near or inside the allocator. Then it says "paused" on stderr and waits for a line on
 * stdin. Then it reads back every block it kept, prints their count and a checksum of their bytes
 * on stdout (the same bytes whether it was inspected or not: a call that wrote into its heap, or
 * registers or stack bytes not restored, would change them or crash it), and on stderr the
 * heartbeat's longest beat while it paused, less its waits for a CPU (how long it was held).
 *
 * argv: MODE [MIB (32)]
 *   hold    the state, the heartbeat
 *   busy    as hold, and a thread that mallocs and frees without pause until the line comes: a stop
 *           finds it inside the allocator more often than not (--attach lets it run and tries again)
 *   stuck   as hold, and a thread that enters the allocator and stays inside it until the line comes:
 *           blocked in a hook the allocator calls from within its own frames (jemalloc: an arena's
 *           extent hooks; tcmalloc: a MallocHook new hook; mimalloc: its deferred-free callback).
 *           --attach must refuse, and leave it as it was.
 *   spin    as hold, and a thread named "spin" that adds up floating-point numbers in its registers
 *           without a pause (no system call, no memory but a flag) until the line comes; then it adds
 *           up as many again and says on stderr whether both sums agree to the bit. A call made on
 *           that thread whose registers or vector state were not all put back makes them differ.
 * Every mode counts the real-time signals SIGRTMIN+1 it gets (queued: each one sent is delivered
 * once) and says how many on stderr at the end; under jemalloc it says there too the statistics'
 * epoch, which only a write of "epoch" (as --attach's first call is) advances.
 * The allocator's functions are looked up with dlsym: it is preloaded, nothing is linked. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static void keep(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

static unsigned seed = 7;
static unsigned rnd(void) { seed = seed * 1103515245u + 12345u; return seed >> 16; }

/* --- the heartbeat (as tests/programs/inspectee.c's, with a malloc and free at each beat) -------- */
static volatile int watching, stop_beat, stop_busy;
static volatile long long worst_ns, worst_held_ns;
static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}
static long long run_delay_ns(void) {
    char buf[128];
    int fd = open("/proc/thread-self/schedstat", O_RDONLY);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    unsigned long long cpu = 0, delay = 0;
    if (sscanf(buf, "%llu %llu", &cpu, &delay) != 2) return 0;
    return (long long)delay;
}
static void *beat(void *arg) {
    (void)arg;
    long long last = now_ns(), last_delay = run_delay_ns();
    struct timespec ms = {0, 1000000};
    while (!stop_beat) {
        nanosleep(&ms, NULL);
        char *p = malloc(64);
        memset(p, 1, 64);
        keep(p);
        free(p);
        long long t = now_ns(), delay = run_delay_ns();
        long long held = (t - last) - (delay - last_delay);
        if (watching && t - last > worst_ns) worst_ns = t - last;
        if (watching && held > worst_held_ns) worst_held_ns = held;
        last = t;
        last_delay = delay;
    }
    return NULL;
}

static void *busy(void *arg) {
    (void)arg;
    void *slot[64] = {0};
    unsigned s = 99;
    while (!stop_busy) {
        s = s * 1103515245u + 12345u;
        unsigned i = (s >> 16) % 64;
        free(slot[i]);
        slot[i] = malloc(16 + (s >> 8) % 2000);
        keep(slot[i]);
    }
    for (int i = 0; i < 64; i++) free(slot[i]);
    return NULL;
}

/* --- a thread that keeps floating-point state in its registers --------------------------------- */
static volatile int stop_spin;
static volatile sig_atomic_t signals;
static void on_signal(int sig) { (void)sig; signals++; }

__attribute__((noinline)) static double sum_until(long *n, long limit) {
    double a = 1.0, b = 0.0, c = 0.5;
    long i = 0;
    for (; limit ? i < limit : !stop_spin; i++) {
        b += a * c;
        a = a * 1.0000001 + 1e-9;
        c = c * 0.9999999 + 1e-10;
    }
    *n = i;
    return b + a + c;
}
static double spin_sum, spin_again;
static void *spin(void *arg) {
    (void)arg;
    long n = 0, m = 0;
    spin_sum = sum_until(&n, 0);
    spin_again = sum_until(&m, n);
    return NULL;
}

/* --- a thread held inside the allocator ------------------------------------------------------------ */
static int release_fd[2];
static volatile int armed, inside_now;
static pthread_t stuck_thread;
static __thread int holds_here;   /* the stuck thread's own: hooks run in every thread */

static void hold_here(void) {
    if (!armed || !holds_here) return;
    armed = 0;
    inside_now = 1;
    char c;
    while (read(release_fd[0], &c, 1) < 0) {}
}

/* jemalloc: a new arena whose extent hooks are jemalloc's own, but for the first alloc in that thread */
typedef struct extent_hooks_s extent_hooks_t;
typedef void *(extent_alloc_t)(extent_hooks_t *, void *, size_t, size_t, bool *, bool *, unsigned);
struct extent_hooks_s { extent_alloc_t *alloc; void *rest[8]; };
static extent_hooks_t *je_default;
static extent_hooks_t je_hooks;
static void *je_alloc(extent_hooks_t *h, void *addr, size_t size, size_t align, bool *zero, bool *commit,
                      unsigned ind) {
    (void)h;
    hold_here();
    return je_default->alloc(je_default, addr, size, align, zero, commit, ind);
}
static void mi_deferred(bool force, unsigned long long heartbeat, void *arg) {
    (void)force; (void)heartbeat; (void)arg;
    hold_here();
}
static void tc_new(const void *p, size_t size) { (void)p; (void)size; hold_here(); }

static void *stuck(void *arg) {
    (void)arg;
    int (*mallctl)(const char *, void *, size_t *, void *, size_t) = dlsym(RTLD_DEFAULT, "mallctl");
    void *(*mallocx)(size_t, int) = dlsym(RTLD_DEFAULT, "mallocx");
    void (*mi_register_deferred_free)(void (*)(bool, unsigned long long, void *), void *) =
        dlsym(RTLD_DEFAULT, "mi_register_deferred_free");
    int (*add_new_hook)(void (*)(const void *, size_t)) = dlsym(RTLD_DEFAULT, "MallocHook_AddNewHook");
    void *p = NULL;
    holds_here = 1;
    if (mallctl && mallocx) {
        size_t sz = sizeof je_default;
        if (mallctl("arena.0.extent_hooks", &je_default, &sz, NULL, 0)) exit(5);
        memcpy(&je_hooks, je_default, sizeof je_hooks);
        je_hooks.alloc = je_alloc;
        extent_hooks_t *mine = &je_hooks;
        unsigned ind;
        sz = sizeof ind;
        if (mallctl("arenas.create", &ind, &sz, &mine, sizeof mine)) exit(6);
        armed = 1;
        p = mallocx(64 << 10, (int)(((ind) + 1) << 20) | (1 << 8));   /* MALLOCX_ARENA(ind) | MALLOCX_TCACHE_NONE */
    } else if (mi_register_deferred_free) {
        mi_register_deferred_free(mi_deferred, NULL);
        armed = 1;
        p = malloc(8 << 20);   /* a huge block: mimalloc's generic path, which calls the deferred free first */
    } else if (add_new_hook) {
        add_new_hook(tc_new);
        armed = 1;
        p = malloc(100);
    } else {
        exit(7);
    }
    keep(p);
    free(p);
    return NULL;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "hold";
    size_t want = (size_t)(argc > 2 ? atol(argv[2]) : 32) << 20;
    size_t cap = want / 512 + 16, n = 0, used = 0;   /* blocks of 2 KiB on average */
    char **kept = malloc(cap * sizeof *kept);
    size_t *len = malloc(cap * sizeof *len);
    while (used < want && n < cap) {
        size_t sz = 16 + rnd() % 4080;
        char *p = malloc(sz);
        for (size_t i = 0; i < sz; i++) p[i] = (char)(i * 31 + n);
        kept[n] = p;
        len[n++] = sz;
        used += sz;
    }
    for (size_t i = 0; i < n; i += 3) { free(kept[i]); kept[i] = NULL; }
    void *big[16];
    for (int i = 0; i < 16; i++) { big[i] = malloc((size_t)(256 + 64 * i) << 10); memset(big[i], 3, 256 << 10); }
    for (int i = 0; i < 16; i++) free(big[i]);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGRTMIN + 1, &sa, NULL);
    pthread_t hb, other;
    if (pthread_create(&hb, NULL, beat, NULL)) return 3;
    int extra = 0;
    if (!strcmp(mode, "spin")) {
        extra = !pthread_create(&other, NULL, spin, NULL);
        if (extra) pthread_setname_np(other, "spin");
    } else if (!strcmp(mode, "busy")) {
        extra = !pthread_create(&other, NULL, busy, NULL);
    } else if (!strcmp(mode, "stuck")) {
        if (pipe(release_fd)) return 3;
        extra = !pthread_create(&stuck_thread, NULL, stuck, NULL);
        while (!inside_now) usleep(100);   /* until it holds inside the allocator */
    }
    if (!extra && strcmp(mode, "hold")) return 2;
    usleep(20000);
    watching = 1;
    static const char paused[] = "paused\n";
    if (write(2, paused, sizeof paused - 1) < 0) return 4;
    char line[16];
    if (read(0, line, sizeof line) < 0) return 4;
    watching = 0;
    if (!strcmp(mode, "stuck")) {
        if (write(release_fd[1], "x", 1) != 1) return 4;
    }
    if (extra) {
        stop_busy = stop_spin = 1;
        pthread_join(!strcmp(mode, "stuck") ? stuck_thread : other, NULL);
    }
    stop_beat = 1;
    pthread_join(hb, NULL);
    unsigned long long sum = 0;
    size_t live = 0;
    for (size_t i = 0; i < n; i++) {
        if (!kept[i]) continue;
        live++;
        for (size_t j = 0; j < len[i]; j++) sum = sum * 1099511628211ull + (unsigned char)kept[i][j];
    }
    printf("blocks: %zu\nchecksum: %016llx\n", live, sum);
    fprintf(stderr, "heartbeat worst gap while paused: %.3f ms; held: %.3f ms\n", worst_ns / 1e6,
            worst_held_ns / 1e6);
    fprintf(stderr, "signals: %d\n", (int)signals);
    if (!strcmp(mode, "spin"))
        fprintf(stderr, "spin: %s\n", spin_sum == spin_again && spin_sum > 0 ? "sums agree" : "sums differ");
    int (*mallctl)(const char *, void *, size_t *, void *, size_t) = dlsym(RTLD_DEFAULT, "mallctl");
    uint64_t epoch = 0;
    size_t sz = sizeof epoch;
    if (mallctl && mallctl("epoch", &epoch, &sz, NULL, 0) == 0) fprintf(stderr, "jemalloc epoch: %llu\n",
                                                                        (unsigned long long)epoch);
    return 0;
}
