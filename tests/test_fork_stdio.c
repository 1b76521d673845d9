/* fork() against stdio's locks (the lock-order cycle of glibc's bug 19431).
 *
 * Reader threads run getline() on their own FILEs: getline holds the FILE's
 * lock while it grows its line with realloc, which may take an allocator
 * lock. A flusher thread runs fflush(NULL): it holds stdio's list lock while
 * it locks every FILE in turn. The main thread forks. fork() takes the list
 * lock after the atfork prepare handlers have run; an allocator whose
 * prepare handler takes its own locks first closes the cycle
 *   fork: allocator locks -> list lock (held by the flusher)
 *   flusher: list lock -> a reader's FILE lock
 *   reader: FILE lock -> allocator lock (held by fork).
 * A deadlock is caught by a watchdog alarm and reported as a failure. */
#include "hak_test.h"

#include <stdatomic.h>

enum { READERS = 2, LINES = 24, WATCHDOG_S = 30, CHILD_TIMEOUT_S = 30 };

static atomic_bool stop;
static atomic_size_t lines_read;
static FILE *files[READERS];

/* Line i of a file is LINE_LENGTH(i) copies of 'a' + i: from 100 B to
 * 3 MiB, so getline's realloc goes through small, medium, large and huge
 * blocks, taking the allocator's arena and cache locks on its way. */
static size_t line_length(size_t i) { return (size_t)100 << (i % 16); }

static FILE *make_file(void)
{
    FILE *f = tmpfile();
    CHECK(f != NULL);
    for (size_t i = 0; i < LINES; i++) {
        size_t n = line_length(i);
        for (size_t j = 0; j < n; j++) CHECK(fputc('a' + (int)(i % 26), f) != EOF);
        CHECK(fputc('\n', f) != EOF);
    }
    CHECK(fflush(f) == 0);
    return f;
}

static void *reader(void *arg)
{
    FILE *f = arg;
    while (!atomic_load(&stop)) {
        rewind(f);
        for (size_t i = 0; i < LINES; i++) {
            char *line = NULL;   /* a fresh buffer: every line grows from scratch */
            size_t cap = 0;
            ssize_t n = getline(&line, &cap, f);
            CHECKF(n == (ssize_t)line_length(i) + 1, "line %zu: %zd bytes", i, n);
            CHECK(line[0] == 'a' + (int)(i % 26) && line[n - 2] == line[0]);
            free(line);
            atomic_fetch_add(&lines_read, 1);
        }
    }
    return NULL;
}

static void *flusher(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) fflush(NULL);
    return NULL;
}

static void fork_against_getline_and_fflush(void)
{
    for (size_t i = 0; i < READERS; i++) files[i] = make_file();
    hak_watchdog_arm(WATCHDOG_S, "fork, fflush(NULL) and getline");

    pthread_t threads[READERS + 1];
    for (size_t i = 0; i < READERS; i++) threads[i] = hak_thread_start(reader, files[i]);
    threads[READERS] = hak_thread_start(flusher, NULL);

    /* Bounded by time, not count: on a loaded machine fewer forks run. */
    size_t forks = 0;
    double until = hak_now_ms() + (double)hak_scale(2000, 30000);
    while (hak_now_ms() < until || forks < 20) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            /* The readers' FILE locks may be held in this copy: no stdio. */
            void *p = malloc(1000);
            free(p);
            _exit(p != NULL ? 0 : 1);
        }
        int status = hak_wait_child(pid, CHILD_TIMEOUT_S);
        CHECK_CHILD_EXITED_0(status);
        forks++;
    }
    atomic_store(&stop, true);
    for (size_t i = 0; i < READERS + 1; i++) pthread_join(threads[i], NULL);
    alarm(0);
    for (size_t i = 0; i < READERS; i++) fclose(files[i]);
    CHECK(atomic_load(&lines_read) > 0);
    printf("     %zu forks, %zu lines read\n", forks, atomic_load(&lines_read));
}

int main(void)
{
    hak_test_begin("test_fork_stdio");
    RUN_CASE(fork_against_getline_and_fflush);
    return 0;
}
