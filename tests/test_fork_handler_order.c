/* fork() against a library's own fork handler, registered before hakmem's.
 *
 * glibc runs the prepare handlers in the reverse order of registration. A
 * library that registers one from its constructor, before hakmem started
 * (the program's own libraries do, when hakmem is preloaded), would have
 * it run after hakmem's prepare handler took the allocator's locks. That
 * handler takes the library's lock, which a thread of the library holds
 * while it allocates, maybe waiting for an allocator lock:
 *   fork: allocator locks -> library lock (held by the worker)
 *   worker: library lock -> allocator lock (held by fork).
 * hakmem's handlers are registered before any other (init.c), so the
 * library's prepare handler runs first. A deadlock is caught by a watchdog
 * alarm and reported as a failure. Run linked to hakmem and preloaded. */
#include "hak_test.h"

#include <stdatomic.h>

int fork_handler_lib_work(size_t size);   /* fork_handler_lib.c */

enum { WORKERS = 2, WATCHDOG_S = 30, CHILD_TIMEOUT_S = 30 };

static atomic_bool stop;
static atomic_size_t units;

/* Sizes past the size classes (large and huge blocks): each takes an
 * arena's or the huge cache's lock. */
static void *worker(void *arg)
{
    size_t size = (size_t)arg;
    while (!atomic_load(&stop)) {
        CHECK(fork_handler_lib_work(size));
        atomic_fetch_add(&units, 1);
    }
    return NULL;
}

static void fork_against_a_library_handler(void)
{
    hak_watchdog_arm(WATCHDOG_S, "fork and the library's allocating threads");
    pthread_t threads[WORKERS];
    for (size_t i = 0; i < WORKERS; i++) threads[i] = hak_thread_start(worker, (void *)((size_t)(3 + 30 * i) << 20));
    size_t forks = 0;
    double until = hak_now_ms() + (double)hak_scale(1000, 20000);
    while (hak_now_ms() < until || forks < 50) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            int ok = fork_handler_lib_work(5 << 20);
            _exit(ok ? 0 : 1);
        }
        int status = hak_wait_child(pid, CHILD_TIMEOUT_S);
        CHECK_CHILD_EXITED_0(status);
        char *record = malloc(64);   /* the forking thread allocates too */
        CHECK(record != NULL);
        snprintf(record, 64, "fork %zu", forks);
        free(record);
        forks++;
    }
    atomic_store(&stop, true);
    for (size_t i = 0; i < WORKERS; i++) pthread_join(threads[i], NULL);
    alarm(0);
    CHECK(atomic_load(&units) > 0);
    printf("     %zu forks, %zu units of the library's work\n", forks, atomic_load(&units));
}

int main(void)
{
    hak_test_begin("test_fork_handler_order");
    RUN_CASE(fork_against_a_library_handler);
    return 0;
}
