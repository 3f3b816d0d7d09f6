/* alloclab-spawn: fork and exec one command, wait for it, and report the kernel's figures.
 *
 * Why not let Python fork the program directly? Because ru_maxrss survives exec: a child
 * forked (or vforked) from a 100 MB Python process reports a peak RSS of at least 100 MB,
 * whatever it ran. Forked from this small static program instead, the figure is the
 * program's own. Static linking also keeps LD_PRELOAD and LD_DEBUG from touching us, so the
 * allocator being tested only ever loads into the program.
 *
 * usage: alloclab-spawn RESULT_FILE PROGRAM [ARGS...]
 * RESULT_FILE gets one line: "exit|signal CODE wall_ns utime_us stime_us maxrss_kb minflt
 * majflt nvcsw nivcsw end_anon_kb end_lazyfree_kb end_huge_kb". Exit status 0 unless the launcher itself failed (then 125, or
 * 127 when the program could not be executed).
 *
 * end_anon_kb: the program's anonymous RSS just before it exits (-1 where unknown; always in this
 * one-shot mode, which runs servers). With --serve the launcher seizes the program with ptrace, asking for its exit stop only (PTRACE_O_TRACEEXIT: the exit
 * handlers have run, the memory is not yet released), reads /proc/PID/statm there and lets it go.
 * end_lazyfree_kb, read at the same stop from /proc/PID/smaps_rollup: pages the allocator gave back
 * with MADV_FREE, which RSS (and so end_anon_kb) counts until the kernel reclaims them (-1: unknown);
 * end_huge_kb, its AnonHugePages: the transparent huge pages the kernel gave the program (-1: unknown),
 * which say whether a setting that asks for them (glibc.malloc.hugetlb=1) got them in this run.
 * A signal meanwhile stops the program until it is handed on, at once. Where ptrace is refused
 * (a container's policy) the figure is -1 and nothing else changes. Only the program's main
 * thread is seized: its end is the process's unless it leaves with pthread_exit.
 *
 * usage: alloclab-spawn --serve
 * The same for many runs, without starting a launcher for each (an exec of its own cost about
 * as much as a whole run of /bin/true), and with posix_spawn (a vfork) rather than a fork per
 * run. Requests come on stdin, one at a time: a native uint32
 * byte count, then that many bytes of NUL-terminated strings: stdout file, stderr file, working
 * directory ("" for ours), argc, argv..., and the environment. Each program runs in a session of
 * its own, stdin /dev/null. Replies on stdout, text lines: "pid PID" once it is started, then
 * the result line as above; or one line instead of both, "fail ERRNO" when no process could be
 * made or "noexec ERRNO STAGE" when the program could not be started (stage: open, chdir, exec).
 * Ends at the end of stdin. See measure/spawner.py.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <poll.h>
#include <stdint.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <stdlib.h>
#include <unistd.h>

extern char **environ;

static pid_t child = -1;

/* Pass termination on to the program so a Ctrl-C or timeout reaches it even if it left
 * our process group. */
static void forward(int sig) {
    if (child > 0) kill(child, sig);
}

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int read_full(int fd, void *buf, size_t n) {
    char *p = buf;
    while (n) {
        ssize_t got = read(fd, p, n);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return -1;
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

static void reply(const char *fmt_line) {
    size_t n = strlen(fmt_line);
    const char *p = fmt_line;
    while (n) {
        ssize_t put = write(1, p, n);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) _exit(125);   /* alloclab is gone */
        p += put;
        n -= (size_t)put;
    }
}

static void format_result(char *line, size_t size, int status, long long wall, const struct rusage *ru,
                          long long end_anon_kb, const long long rollup[2]) {
    snprintf(line, size, "%s %d %lld %lld %lld %ld %ld %ld %ld %ld %lld %lld %lld\n",
             WIFSIGNALED(status) ? "signal" : "exit",
             WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), wall,
             (long long)ru->ru_utime.tv_sec * 1000000LL + ru->ru_utime.tv_usec,
             (long long)ru->ru_stime.tv_sec * 1000000LL + ru->ru_stime.tv_usec,
             ru->ru_maxrss, ru->ru_minflt, ru->ru_majflt, ru->ru_nvcsw, ru->ru_nivcsw, end_anon_kb, rollup[0],
             rollup[1]);
}

/* Resident less file-backed and shared pages, as the fingerprint's series reads it. */
static long long anon_kb_of(pid_t pid) {
    char path[64], t[128];
    snprintf(path, sizeof path, "/proc/%d/statm", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, t, sizeof t - 1);
    close(fd);
    if (n <= 0) return -1;
    t[n] = 0;
    long long size, rss, shared;
    if (sscanf(t, "%lld %lld %lld", &size, &rss, &shared) != 3) return -1;
    return (rss > shared ? rss - shared : 0) * (sysconf(_SC_PAGESIZE) / 1024);
}

/* From smaps_rollup: LazyFree (freed with MADV_FREE, still resident until the kernel needs the
 * pages) and AnonHugePages (transparent huge pages given), each -1 where unreadable. */
static long long rollup_field(const char *t, const char *name) {
    const char *at = strstr(t, name);
    long long kb;
    return at && sscanf(at + strlen(name), "%lld", &kb) == 1 ? kb : -1;
}

static void rollup_of(pid_t pid, long long out[2]) {
    char path[64], t[4096];
    out[0] = out[1] = -1;
    snprintf(path, sizeof path, "/proc/%d/smaps_rollup", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    size_t len = 0;
    ssize_t n;
    while (len < sizeof t - 1 && (n = read(fd, t + len, sizeof t - 1 - len)) > 0) len += (size_t)n;
    close(fd);
    t[len] = 0;
    out[0] = rollup_field(t, "\nLazyFree:");
    out[1] = rollup_field(t, "\nAnonHugePages:");
}

static int seize(pid_t pid) {
    return ptrace(PTRACE_SEIZE, pid, NULL, (void *)(long)PTRACE_O_TRACEEXIT) == 0;
}

/* One wait for the program: its ptrace stops are handled here and waited past. Returns wait4's. */
static pid_t wait_program(pid_t pid, int *status, int options, struct rusage *ru, long long *end_anon_kb,
                          long long rollup[2]) {
    for (;;) {
        pid_t r = wait4(pid, status, options, ru);
        if (r <= 0 || !WIFSTOPPED(*status)) return r;
        int event = *status >> 16, sig = WSTOPSIG(*status);
        if (event == PTRACE_EVENT_EXIT) {
            *end_anon_kb = anon_kb_of(pid);
            rollup_of(pid, rollup);
            ptrace(PTRACE_DETACH, pid, NULL, NULL);
        } else if (event == PTRACE_EVENT_STOP) {
            ptrace(PTRACE_LISTEN, pid, NULL, NULL);      /* a group stop: it stays stopped, as untraced */
        } else {
            ptrace(PTRACE_CONT, pid, NULL, (void *)(long)sig);   /* a signal: handed on */
        }
    }
}

static int serve(void) {
    static const char *stages[] = {"open", "chdir", "exec"};
    signal(SIGINT, SIG_IGN);   /* Ctrl-C is alloclab's to handle: it stops the program's group */
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull < 0) return 125;
    /* The program: a session of its own, default signal handling, nothing blocked. */
    posix_spawnattr_t attr;
    sigset_t none, defaults;
    posix_spawnattr_init(&attr);
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGTERM);
    sigaddset(&defaults, SIGHUP);
    sigaddset(&defaults, SIGPIPE);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    /* The program's stops and its end both come as SIGCHLD, waited for with a timeout. */
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    char *buf = NULL;
    char **fields = NULL;
    for (;;) {
        uint32_t size;
        if (read_full(0, &size, sizeof size) != 0) return 0;
        free(buf);
        free(fields);
        buf = malloc((size_t)size + 1);
        if (!buf || read_full(0, buf, size) != 0) return 125;
        buf[size] = '\0';
        int n = 0;
        for (uint32_t i = 0; i < size; i++) n += buf[i] == '\0';
        /* one spare slot: argv's terminating NULL goes between argv and the environment */
        fields = calloc((size_t)n + 2, sizeof *fields);
        if (!fields) return 125;
        char *p = buf;
        for (int i = 0; i < n; i++) { fields[i] = p; p += strlen(p) + 1; }
        int argc = n >= 4 ? atoi(fields[3]) : -1;
        if (argc < 1 || 4 + argc > n) return 125;
        /* shift the environment one slot up to make room for argv's NULL */
        memmove(fields + 5 + argc, fields + 4 + argc, (size_t)(n - 4 - argc) * sizeof *fields);
        fields[4 + argc] = NULL;
        fields[n + 1] = NULL;

        char line[256];
        char **envp = fields + 5 + argc;
        int stage = 0, e = 0;
        pid_t pid = -1;
        long long t0 = 0;
        /* The files are opened here and the child only dup2s them: posix_spawn (a vfork, the
         * parent paused until the exec) then says which step failed, and no page table is copied. */
        int o = open(fields[0], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        int r = o < 0 ? -1 : open(fields[1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (o < 0 || r < 0) e = errno;
        if (!e && fields[2][0]) {
            struct stat st;
            stage = 1;
            if (stat(fields[2], &st) != 0) e = errno;
            else if (!S_ISDIR(st.st_mode)) e = ENOTDIR;
            else if (access(fields[2], X_OK) != 0) e = errno;
        }
        if (!e) {
            posix_spawn_file_actions_t fa;
            posix_spawn_file_actions_init(&fa);
            posix_spawn_file_actions_adddup2(&fa, devnull, 0);
            posix_spawn_file_actions_adddup2(&fa, o, 1);
            posix_spawn_file_actions_adddup2(&fa, r, 2);
            if (fields[2][0]) posix_spawn_file_actions_addchdir_np(&fa, fields[2]);
            stage = 2;
            /* posix_spawnp looks PATH up in our environment: make it the program's for the call */
            char **saved = environ;
            environ = envp;
            t0 = now_ns();
            e = posix_spawnp(&pid, fields[4], &fa, &attr, fields + 4, envp);
            environ = saved;
            posix_spawn_file_actions_destroy(&fa);
        }
        if (o >= 0) close(o);
        if (r >= 0) close(r);
        if (e == EAGAIN || e == ENOMEM) {   /* no process could be made: the launcher's failure */
            snprintf(line, sizeof line, "fail %d\n", e);
            reply(line);
            continue;
        }
        if (e) {
            snprintf(line, sizeof line, "noexec %d %s\n", e, stages[stage]);
            reply(line);
            continue;
        }
        long long end_anon_kb = -1, rollup[2] = {-1, -1};
        seize(pid);
        /* alloclab's first look comes 10 ms after the start: a program done within 5 ms gets its
         * pid and result in one reply, which wakes alloclab once instead of twice. */
        char pid_line[32];
        snprintf(pid_line, sizeof pid_line, "pid %d\n", (int)pid);
        int sent = 0, status = 0;
        struct rusage ru;
        memset(&ru, 0, sizeof ru);
        for (;;) {
            pid_t got = wait_program(pid, &status, WNOHANG, &ru, &end_anon_kb, rollup);
            if (got == pid) break;
            if (got < 0 && errno != EINTR) return 125;
            if (got < 0) continue;
            long long left = t0 + 5000000LL - now_ns();
            if (!sent && left <= 0) { reply(pid_line); sent = 1; }
            struct timespec ts = {left / 1000000000LL, left % 1000000000LL};
            if (sent) sigwaitinfo(&chld, NULL);
            else sigtimedwait(&chld, NULL, &ts);
        }
        long long wall = now_ns() - t0;
        if (!sent) reply(pid_line);
        format_result(line, sizeof line, status, wall, &ru, end_anon_kb, rollup);
        reply(line);
    }
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--serve") == 0) return serve();
    if (argc < 3) {
        fprintf(stderr, "usage: %s RESULT_FILE PROGRAM [ARGS...]\n", argv[0]);
        return 125;
    }
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0) { perror("alloclab-spawn: pipe2"); return 125; }
    long long t0 = now_ns();
    child = fork();
    if (child < 0) { perror("alloclab-spawn: fork"); return 125; }
    if (child == 0) {
        close(pipefd[0]);
        execvp(argv[2], argv + 2);
        int e = errno;
        (void)!write(pipefd[1], &e, sizeof e);
        _exit(127);
    }
    close(pipefd[1]);
    signal(SIGTERM, forward);
    signal(SIGINT, forward);
    signal(SIGHUP, forward);
    int exec_errno = 0;
    ssize_t got = read(pipefd[0], &exec_errno, sizeof exec_errno);
    close(pipefd[0]);

    int status = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    long long end_anon_kb = -1, rollup[2] = {-1, -1};   /* a server runs under this mode: it is not seized (its signals stay its own) */
    while (wait_program(child, &status, 0, &ru, &end_anon_kb, rollup) < 0) {
        if (errno != EINTR) { perror("alloclab-spawn: wait4"); return 125; }
    }
    long long wall = now_ns() - t0;
    if (got == sizeof exec_errno) {
        fprintf(stderr, "alloclab-spawn: cannot execute %s: %s\n", argv[2], strerror(exec_errno));
        return 127;
    }
    FILE *out = fopen(argv[1], "w");
    if (!out) { perror("alloclab-spawn: result file"); return 125; }
    char line[256];
    format_result(line, sizeof line, status, wall, &ru, end_anon_kb, rollup);
    fputs(line, out);
    fclose(out);
    return 0;
}
