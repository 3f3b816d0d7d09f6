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
 * majflt nvcsw nivcsw". Exit status 0 unless the launcher itself failed (then 125, or 127
 * when the program could not be executed).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

int main(int argc, char **argv) {
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
    while (wait4(child, &status, 0, &ru) < 0) {
        if (errno != EINTR) { perror("alloclab-spawn: wait4"); return 125; }
    }
    long long wall = now_ns() - t0;
    if (got == sizeof exec_errno) {
        fprintf(stderr, "alloclab-spawn: cannot execute %s: %s\n", argv[2], strerror(exec_errno));
        return 127;
    }
    FILE *out = fopen(argv[1], "w");
    if (!out) { perror("alloclab-spawn: result file"); return 125; }
    fprintf(out, "%s %d %lld %lld %lld %ld %ld %ld %ld %ld\n",
            WIFSIGNALED(status) ? "signal" : "exit",
            WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), wall,
            (long long)ru.ru_utime.tv_sec * 1000000LL + ru.ru_utime.tv_usec,
            (long long)ru.ru_stime.tv_sec * 1000000LL + ru.ru_stime.tv_usec,
            ru.ru_maxrss, ru.ru_minflt, ru.ru_majflt, ru.ru_nvcsw, ru.ru_nivcsw);
    fclose(out);
    return 0;
}
