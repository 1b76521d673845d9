/* hakmem opened with dlopen by a worker thread, in a program not linked to
 * it: its start-up runs off the main thread, which therefore is not marked
 * to retire the purger when it leaves by pthread_exit (src/purge.c,
 * main_thread_known). A purger started anyway kept such a process alive
 * for ever. Each case runs in a child that must exit 0 within the wait:
 *
 * - worker_only: only the worker allocates (64 MiB, then more while it
 *   gives the purger the time it took to start before); then the main
 *   thread leaves.
 * - main_allocates_too: then the main thread allocates through hakmem as
 *   well, so the purger does start (checked), and it leaves.
 *
 * Not linked to hakmem (as preload_check): the suite's helpers that only
 * read /proc and wait for children serve. */
#include "hak_test.h"

static const char *library;
static void *(*hak_malloc_fn)(size_t);
static void (*hak_free_fn)(void *);

/* 64 MiB allocated and freed through hakmem (enough to start its purger),
 * then a 2 MiB block every 10 ms until the purger runs or 500 ms passed.
 * Whether it runs. */
static bool give_the_purger_its_chance(void)
{
    void *b[64];
    for (int i = 0; i < 64; i++) {
        CHECK((b[i] = hak_malloc_fn(MiB)) != NULL);
        memset(b[i], 1, MiB);
    }
    for (int i = 0; i < 64; i++) hak_free_fn(b[i]);
    for (int waited = 0; waited < 500 && hak_purger_threads() == 0; waited += 10) {
        hak_free_fn(hak_malloc_fn(2 * MiB));
        usleep(10 * 1000);
    }
    return hak_purger_threads() > 0;
}

static void *open_and_allocate(void *arg)
{
    void *h = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    CHECKF(h != NULL, "dlopen: %s", dlerror());
    hak_malloc_fn = (void *(*)(size_t))dlsym(h, "malloc");
    hak_free_fn = (void (*)(void *))dlsym(h, "free");
    CHECK(hak_malloc_fn != NULL && hak_free_fn != NULL);
    give_the_purger_its_chance();
    return arg;
}

static void leave(bool main_allocates)
{
    pthread_join(hak_thread_start(open_and_allocate, NULL), NULL);
    if (main_allocates) CHECKF(give_the_purger_its_chance(), "%s", "no purger after the main thread allocated");
    pthread_exit(NULL);
}

/* The child must end, with exit 0, within 20 s. */
static void run_case(const char *name, bool main_allocates)
{
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) leave(main_allocates);
    int status = hak_wait_child(pid, 20);
    CHECK_CHILD_EXITED_0(status);
    printf("  %s: ok\n", name);
}

int main(int argc, char **argv)
{
    CHECKF(argc == 2, "usage: %s path/to/libhakmem.so", argv[0]);
    library = argv[1];
    run_case("worker_only", false);
    run_case("main_allocates_too", true);
    return 0;
}
