/* fork() from a signal handler (as glibc's tst-mallocfork2 does).
 *
 * A single-threaded worker loops over malloc, realloc, free, statistics
 * reports and forks of its own; another process signals it over and over,
 * and the handler forks a child that exits at once. fork() is
 * async-signal-safe in a single-threaded process, so the signal may land
 * while the worker is inside the allocator, holding one of its locks (the
 * atfork handlers must not take them there), or inside fork() itself. The
 * latter hung when hakmem's purger thread ran in the worker: to glibc the
 * process was then a threaded one, whose fork takes a lock the nested fork
 * waits for. So a program that never started a thread gets no purger
 * (src/purge.c), checked at the end. The supervising process sends the
 * signals and fails (instead of hanging) if the worker stops making
 * progress.
 *
 * (In a multi-threaded process, fork from a signal handler that interrupted
 * an allocator call is not supported, as with glibc: see src/init.c.) */
#include "hak_test.h"

#include <fcntl.h>

enum { FORKS = 500, WORKER_TIMEOUT_S = 30 };

static volatile sig_atomic_t forks_done, fork_failures;

static void fork_in_handler(int sig)
{
    (void)sig;
    int saved = errno;
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    if (pid < 0) fork_failures++;
    else forks_done++;
    errno = saved;
}

/* Reaps the children the handler forked; false if one did not exit 0. */
static bool reap_children(void)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return false;
    return true;
}

static void worker(int devnull)
{
    struct sigaction sa = {.sa_handler = fork_in_handler};
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    /* Tell the supervisor the handler is in place. */
    CHECK(kill(getppid(), SIGUSR2) == 0);

    enum { SLOTS = 64 };
    void *slots[SLOTS] = {0};
    hak_rng rng = hak_rng_seed(19);
    for (size_t i = 0; forks_done < FORKS; i++) {
        size_t k = (size_t)(hak_rng_next(&rng) % SLOTS);
        size_t size = hak_rng_size(&rng, 2 * MiB);
        switch (i % 5) {
            case 0: free(slots[k]); slots[k] = malloc(size); CHECK(slots[k] != NULL); break;
            case 1: slots[k] = realloc(slots[k], size); CHECK(slots[k] != NULL); break;
            case 2: free(slots[k]); slots[k] = NULL; break;
            case 3: hak_stats_write_json(devnull); break;   /* holds the report lock */
            default: if (i % 25 == 4) fork_in_handler(0); break;   /* a fork the handler's may interrupt */
        }
        if (i % 64 == 0) CHECK(reap_children());
    }
    for (size_t k = 0; k < SLOTS; k++) free(slots[k]);
    CHECKF(hak_purger_threads() == 0, "%s", "a purger thread in a program that never started a thread");
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGUSR1);
    sigprocmask(SIG_BLOCK, &block, NULL);
    while (waitpid(-1, NULL, 0) > 0) {}
    CHECK(fork_failures == 0);
    _exit(0);
}

static volatile sig_atomic_t worker_ready;
static void on_ready(int sig) { (void)sig; worker_ready = 1; }

static void fork_from_signal_handler(void)
{
    int devnull = open("/dev/null", O_WRONLY);
    CHECK(devnull >= 0);
    struct sigaction sa = {.sa_handler = on_ready};
    CHECK(sigaction(SIGUSR2, &sa, NULL) == 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) worker(devnull);

    /* Signal the worker every ~200 us until it exits; kill it and fail if it
     * has not finished its forks in time. */
    double deadline = hak_now_ms() + WORKER_TIMEOUT_S * 1000.0;
    int status;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        CHECK(r == 0 || r == pid);
        if (r == pid) break;
        if (hak_now_ms() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            hak_test_fail(__FILE__, __LINE__, "worker still running after %d s: fork from a signal "
                          "handler deadlocked", WORKER_TIMEOUT_S);
        }
        if (worker_ready) kill(pid, SIGUSR1);
        usleep(200);
    }
    CHECK_CHILD_EXITED_0(status);
    close(devnull);
}

int main(void)
{
    hak_test_begin("test_fork_signal");
    RUN_CASE(fork_from_signal_handler);
    return 0;
}
