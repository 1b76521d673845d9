/* A process whose main thread leaves by pthread_exit ends when its last
 * thread does, with exit(0) (so its atexit handlers run), also once
 * hakmem's purger thread runs (src/purge.c, purger_retire): a purger that
 * never ended kept such a process alive for ever, and with every signal
 * blocked in it only SIGKILL stopped it. Each case runs in a forked child
 * that must exit 0, its atexit handler run, within the wait. */
#include "hak_test.h"

static void at_exit_marker(void)
{
    fprintf(stderr, "atexit handler ran\n");
}

/* 64 MiB allocated and freed by a threaded process: memory to return, so
 * the purger starts (on a later allocation's slow path). */
static void start_the_purger(void)
{
    hak_become_threaded();
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

/* From a thread that is not main: a child that leaves as above, which
 * must end. */
static void fork_one_that_leaves(void)
{
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) leave_by_pthread_exit(1);
    int status = hak_wait_child(pid, 20);
    CHECK_CHILD_EXITED_0(status);
}

static void *fork_and_leave(void *arg)
{
    (void)arg;
    start_the_purger();   /* the purger of the child: not in the grandchild */
    fork_one_that_leaves();
    return NULL;
}

static void leave_last(void) { leave_by_pthread_exit(0); }
static void leave_first(void) { leave_by_pthread_exit(2); }

/* A grandchild forked by a thread that is not main in its parent: the
 * forking thread is the grandchild's main thread. */
static void fork_from_another_thread(void)
{
    pthread_join(hak_thread_start(fork_and_leave, NULL), NULL);
}

/* A worker forks after the main thread left, which retired the purger for
 * good: the child's main thread is the forking one, and the child gets a
 * purger again (one that inherited the retirement never did), and ends. */
static void *fork_after_main_left(void *arg)
{
    (void)arg;
    usleep(50 * 1000);   /* main has left */
    fork_one_that_leaves();
    return NULL;
}

static void fork_after_main_thread_left(void)
{
    start_the_purger();
    CHECK(atexit(at_exit_marker) == 0);
    CHECK(pthread_detach(hak_thread_start(fork_after_main_left, NULL)) == 0);
    pthread_exit(NULL);
}

/* The child (with stderr captured) must end by exit(0), its atexit handler
 * run. */
static void check_child_ends(void (*fn)(void))
{
    hak_child_report r = hak_run_in_child(fn);
    CHECK_CHILD_EXITED_0(r.status);
    CHECKF(strstr(r.text, "atexit handler ran") != NULL, "the atexit handler did not run: %s", r.text);
}

static void main_thread_leaves_last(void) { check_child_ends(leave_last); }
static void main_thread_leaves_first(void) { check_child_ends(leave_first); }
static void main_thread_of_a_child_forked_by_another_thread(void) { check_child_ends(fork_from_another_thread); }
static void child_forked_after_the_main_thread_left(void) { check_child_ends(fork_after_main_thread_left); }

int main(void)
{
    hak_test_begin("test_main_thread_exit");
    RUN_CASE(main_thread_leaves_last);
    RUN_CASE(main_thread_leaves_first);
    RUN_CASE(main_thread_of_a_child_forked_by_another_thread);
    RUN_CASE(child_forked_after_the_main_thread_left);
    return 0;
}
