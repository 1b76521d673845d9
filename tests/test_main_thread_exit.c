/* A process whose main thread leaves by pthread_exit ends when its last
 * thread does, with exit(0) (so its atexit handlers run), also once
 * hakmem's purger thread runs (src/purge.c, purger_retire): a purger that
 * never ended kept such a process alive for ever, and with every signal
 * blocked in it only SIGKILL stopped it. Each case runs in a forked child
 * that must exit 0, having written its atexit marker, within the wait. */
#include "hak_test.h"

static int marker_fd = -1;

static void at_exit_marker(void)
{
    if (write(marker_fd, "x", 1) != 1) _exit(3);
}

/* 64 MiB allocated and freed: memory to return, so the purger starts (on
 * a later allocation's slow path). */
static void start_the_purger(void)
{
    void *b[64];
    for (int i = 0; i < 64; i++) {
        CHECK((b[i] = malloc(MiB)) != NULL);
        memset(b[i], 1, MiB);
    }
    for (int i = 0; i < 64; i++) free(b[i]);
    for (int waited = 0; hak_purger_threads() == 0; waited += 10) {
        CHECKF(waited < 5000, "no purger thread after %d ms", waited);
        free(malloc(2 * MiB));
        usleep(10 * 1000);
    }
}

static void *worker(void *arg)
{
    (void)arg;
    for (int i = 0; i < 100; i++) hak_item_verify_free(hak_item_new(1000 + (size_t)i * 100));
    usleep(50 * 1000);   /* still running when main has left */
    for (int i = 0; i < 100; i++) hak_item_verify_free(hak_item_new(100000 + (size_t)i * 1000));
    return NULL;
}

/* In the child: the purger, `workers` detached threads, then the main
 * thread leaves. */
static void leave_by_pthread_exit(int workers)
{
    start_the_purger();
    CHECK(atexit(at_exit_marker) == 0);
    for (int i = 0; i < workers; i++) CHECK(pthread_detach(hak_thread_start(worker, NULL)) == 0);
    pthread_exit(NULL);
}

static void *fork_and_leave(void *arg);

/* Forks a child that runs `how` (with `workers`), and checks it ended by
 * exit(0) with its atexit handler run. */
static void check_child_ends(int how, int workers)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        marker_fd = fds[1];
        if (how == 0) leave_by_pthread_exit(workers);
        /* how 1: a grandchild forked by a thread that is not main there:
         * the forking thread becomes the grandchild's main thread. */
        pthread_join(hak_thread_start(fork_and_leave, NULL), NULL);
        _exit(0);
    }
    close(fds[1]);
    int status = hak_wait_child(pid, 20);
    char c = 0;
    ssize_t got = read(fds[0], &c, 1);
    close(fds[0]);
    CHECK_CHILD_EXITED_0(status);
    CHECKF(got == 1 && c == 'x', "the atexit handler did not run");
}

static void *fork_and_leave(void *arg)
{
    (void)arg;
    start_the_purger();   /* the purger of the child: not in the grandchild */
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) leave_by_pthread_exit(1);
    int status = hak_wait_child(pid, 20);
    CHECK_CHILD_EXITED_0(status);
    return NULL;
}

static void main_thread_leaves_last(void) { check_child_ends(0, 0); }
static void main_thread_leaves_first(void) { check_child_ends(0, 2); }
static void main_thread_of_a_child_forked_by_another_thread(void) { check_child_ends(1, 0); }

int main(void)
{
    hak_test_begin("test_main_thread_exit");
    RUN_CASE(main_thread_leaves_last);
    RUN_CASE(main_thread_leaves_first);
    RUN_CASE(main_thread_of_a_child_forked_by_another_thread);
    return 0;
}
