/* alloclab-exitread: a preload that defines no allocator function and reads the process's memory as
 * exit() begins, for a program with an allocator built into it. The launcher's own end reading is
 * taken at the exit stop (spawn.c), after the atexit handlers and the objects' destructors, where
 * such a copy gives back what it holds (the mimalloc crate: 656 MiB at rest, 4.8 MiB at the exit
 * stop). glibc runs the main thread's thread_local destructors before those handlers, so one
 * registered at start runs as exit() begins, after the program's own such destructors.
 *
 * ALLOCLAB_EXIT_READ=PATH: the reading goes to PATH.PID (each process its own: a forked child
 * exits too), one line "anon_kb lazyfree_kb", the anonymous RSS as spawn.c reads it (resident less
 * file-backed and shared) and smaps_rollup's LazyFree (-1 where unreadable). Nothing else is done:
 * no call of the program's is wrapped, nothing runs until exit. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char out_path[4096];

static long long statm_anon_kb(void) {
    char t[128];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, t, sizeof t - 1);
    close(fd);
    if (n <= 0) return -1;
    t[n] = 0;
    long long size, rss, shared;
    if (sscanf(t, "%lld %lld %lld", &size, &rss, &shared) != 3) return -1;
    return (rss > shared ? rss - shared : 0) * (sysconf(_SC_PAGESIZE) / 1024);
}

static long long lazyfree_kb(void) {
    static char t[8192];
    int fd = open("/proc/self/smaps_rollup", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t len = 0;
    ssize_t n;
    while (len < sizeof t - 1 && (n = read(fd, t + len, sizeof t - 1 - len)) > 0) len += (size_t)n;
    close(fd);
    t[len] = 0;
    const char *at = strstr(t, "\nLazyFree:");
    long long kb;
    return at && sscanf(at + 10, "%lld", &kb) == 1 ? kb : -1;
}

extern int __cxa_thread_atexit_impl(void (*fn)(void *), void *obj, void *dso);
extern void *__dso_handle;

static void at_exit_start(void *unused) {
    (void)unused;
    char path[4200], line[64];
    long long anon = statm_anon_kb(), lazy = lazyfree_kb();
    snprintf(path, sizeof path, "%s.%d", out_path, (int)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return;
    int len = snprintf(line, sizeof line, "%lld %lld\n", anon, lazy);
    if (write(fd, line, (size_t)len) != len) { /* a partial line is read as none */ }
    close(fd);
}

__attribute__((constructor)) static void exitread_init(void) {
    const char *p = getenv("ALLOCLAB_EXIT_READ");
    if (!p || !*p || strlen(p) >= sizeof out_path) return;
    strcpy(out_path, p);
    __cxa_thread_atexit_impl(at_exit_start, NULL, &__dso_handle);
}
