/* Runs one benchmark process and reports its wall time, peak RSS and exit
 * status to a file. The runner execs this small program rather than the
 * workload directly because Linux counts the pre-exec address space into a
 * process's ru_maxrss: a child forked from the Python runner would report
 * at least the runner's own RSS. Forked from this small process instead,
 * the workload's ru_maxrss is its own.
 *
 *   launch REPORT_FILE PRELOAD_LIB|"" PROGRAM [ARGS...]
 *
 * PRELOAD_LIB goes into the child's LD_PRELOAD only, so the allocator under
 * test does not also run this launcher; with "" the child has no LD_PRELOAD
 * at all, whatever the caller had. The child's environment is also scrubbed
 * of every variable that tunes an allocator (SCRUBBED below), so no run
 * inherits a setting the report does not show. SIGTERM and SIGINT are forwarded to
 * the child (used to stop redis-server). Exit status: the child's, or
 * 128 + signal number. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile pid_t child;

/* Name prefixes (ending in '_') and exact names of variables that tune an
 * allocator; bench/benchlib.py scrubs the same list. */
static const char *const SCRUBBED[] = {
    "HAKMEM_", "MIMALLOC_", "TCMALLOC_", "JEMALLOC_", "MALLOC_", "LD_PRELOAD", "GLIBC_TUNABLES",
    "_RJEM_MALLOC_CONF",
};

static int scrubbed(const char *var)
{
    size_t name_len = strcspn(var, "=");
    for (size_t i = 0; i < sizeof SCRUBBED / sizeof *SCRUBBED; i++) {
        size_t len = strlen(SCRUBBED[i]);
        int prefix = SCRUBBED[i][len - 1] == '_';
        if (prefix ? strncmp(var, SCRUBBED[i], len) == 0
                   : name_len == len && strncmp(var, SCRUBBED[i], len) == 0)
            return 1;
    }
    return 0;
}

/* Removes every scrubbed variable from the environment. */
static void scrub_environment(void)
{
    for (char **e = environ; *e;) {
        if (!scrubbed(*e)) { e++; continue; }
        char *name = strndup(*e, strcspn(*e, "="));
        if (!name) { perror("launch: strndup"); _exit(127); }
        unsetenv(name); /* shifts the rest of environ down: do not advance */
        free(name);
    }
}

static void forward(int sig)
{
    if (child > 0) kill(child, sig);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: launch REPORT_FILE PRELOAD_LIB|\"\" PROGRAM [ARGS...]\n");
        return 127;
    }
    struct sigaction sa = { .sa_handler = forward, .sa_flags = SA_RESTART };
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    child = fork();
    if (child < 0) { perror("launch: fork"); return 127; }
    if (child == 0) {
        scrub_environment();
        if (argv[2][0]) setenv("LD_PRELOAD", argv[2], 1);
        execvp(argv[3], argv + 3);
        perror("launch: exec");
        _exit(127);
    }
    int status;
    struct rusage ru;
    while (wait4(child, &status, 0, &ru) < 0) {}
    clock_gettime(CLOCK_MONOTONIC, &t1);

    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    FILE *f = fopen(argv[1], "w");
    if (!f) { perror("launch: report file"); return 127; }
    fprintf(f, "exit=%d wall_s=%.6f maxrss_kb=%ld\n", code,
            (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9, ru.ru_maxrss);
    fclose(f);
    return code;
}
