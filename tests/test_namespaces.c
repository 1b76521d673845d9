/* unshare and setns refuse a process of several threads for some
 * namespaces (EINVAL). A program that joined its threads is one thread
 * again, and may enter one: hakmem's purger thread must not stand in its
 * way (src/purge.c ends it first), and memory still goes back after.
 * unshare(CLONE_VM) needs no privilege and succeeds exactly when the
 * process has one thread; setns into the process's own mount namespace
 * needs CAP_SYS_ADMIN (else EPERM, said and not checked). A sandbox that
 * forbids the calls (EPERM, ENOSYS) is said so too. */
#include "hak_test.h"

#include <fcntl.h>
#include <sched.h>

/* A thread of the program's that commits enough for the purger to start
 * (8 MiB), then is joined; the main thread's next large malloc starts the
 * purger. Waits until it runs. */
static void *allocate_and_free(void *arg)
{
    enum { BLOCKS = 32 };
    char *b[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) {
        b[i] = malloc(MiB);
        CHECK(b[i] != NULL);
        memset(b[i], 1, MiB);
    }
    for (int i = 0; i < BLOCKS; i++) free(b[i]);
    return arg;
}

static bool purger_running_after_threads_joined(void)
{
    CHECK(pthread_join(hak_thread_start(allocate_and_free, NULL), NULL) == 0);
    for (int i = 0; i < 200 && hak_purger_threads() == 0; i++) {
        free(malloc(16 * MiB));
        usleep(5000);
    }
    return hak_purger_threads() == 1;
}

static bool refused_here(int rc, const char *call)
{
    if (rc == 0 || errno == EINVAL) return false;
    printf("     %s: %s here, not checked\n", call, strerror(errno));
    return true;
}

/* A pause before the purger ever started leaves it free to start (a
 * sandbox's unshare early in main turned it off for good). In a child, whose
 * purger has not started. */
static void unshare_before_the_purger_started(void)
{
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        CHECK(hak_purger_threads() == 0);
        CHECK(unshare(0) == 0);
        CHECKF(purger_running_after_threads_joined(), "no purger after an unshare made before it started");
        _exit(0);
    }
    int status = hak_wait_child(pid, 30);
    CHECK_CHILD_EXITED_0(status);
}

static void unshare_finds_one_thread(void)
{
    CHECKF(purger_running_after_threads_joined(), "the purger did not start");
    int rc = unshare(CLONE_VM);
    if (refused_here(rc, "unshare")) return;
    CHECKF(rc == 0, "unshare(CLONE_VM) with the program's threads joined: %s", strerror(errno));
    CHECK(hak_purger_threads() == 0);
}

static void setns_finds_one_thread(void)
{
    CHECKF(purger_running_after_threads_joined(), "the purger did not start again");
    int fd = open("/proc/self/ns/mnt", O_RDONLY);
    CHECK(fd >= 0);
    int rc = setns(fd, CLONE_NEWNS);
    close(fd);
    if (refused_here(rc, "setns")) return;
    CHECKF(rc == 0, "setns(mount namespace) with the program's threads joined: %s", strerror(errno));
}

/* unshare is no cancellation point: a thread with a cancel pending goes
 * on past it, though hakmem waits there for its purger to end. */
static void *unshare_with_cancel_pending(void *arg)
{
    pthread_cancel(pthread_self());
    *(int *)arg = unshare(0);
    return arg;
}

static void unshare_is_no_cancellation_point(void)
{
    CHECKF(purger_running_after_threads_joined(), "the purger did not start again");
    int rc = -2;
    void *result = NULL;
    CHECK(pthread_join(hak_thread_start(unshare_with_cancel_pending, &rc), &result) == 0);
    CHECKF(result != PTHREAD_CANCELED, "a thread with a cancel pending was cancelled inside unshare");
    CHECK(rc == 0);
}

/* After: the purger starts again, and memory freed is given back. */
static void memory_still_goes_back(void)
{
    CHECKF(purger_running_after_threads_joined(), "the purger did not start again");
    size_t before = hak_rss_bytes();
    char *p = malloc(64 * MiB);
    CHECK(p != NULL);
    memset(p, 1, 64 * MiB);
    free(p);
    bool back = false;
    for (int i = 0; i < 300 && !back; i++) {
        usleep(10000);
        back = hak_rss_bytes() < before + 16 * MiB;
    }
    CHECKF(back, "64 MiB freed were not given back within 3 s");
}

int main(void)
{
    hak_test_begin("test_namespaces");
    RUN_CASE(unshare_before_the_purger_started);
    RUN_CASE(unshare_finds_one_thread);
    RUN_CASE(setns_finds_one_thread);
    RUN_CASE(unshare_is_no_cancellation_point);
    RUN_CASE(memory_still_goes_back);
    return 0;
}
