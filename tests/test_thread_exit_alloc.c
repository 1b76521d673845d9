/* Allocation after a thread's heap was given up at exit.
 *
 * At thread exit, POSIX runs the destructors of pthread keys in rounds (up
 * to PTHREAD_DESTRUCTOR_ITERATIONS) while some destructor sets a key again.
 * Here every thread's key destructor allocates, checks and frees blocks of
 * several sizes, keeps one block for the next round and sets its key again,
 * every round: some of these calls come after the allocator's own
 * destructor gave up the thread's heap, the last ones after the last round
 * in which that destructor can run. Thousands of such threads must leave
 * neither memory nor heaps behind.
 *
 * - libc_frees_after_young_threads: a thread that made no heap of its own
 *   (a few small blocks, from the shared heap) leaves its dlerror state,
 *   which libc frees after every key destructor has run. In the secure
 *   variant, or with calls counted, that free needs a heap; one made then
 *   was never given up (half of 3,000 threads kept one, when every other
 *   thread made a heap of its own and so reused the first's thread slot). */
#include "hak_test.h"

#include <dlfcn.h>
#include <limits.h>
#include <sys/syscall.h>

enum { CONCURRENT = 8 };

static pthread_key_t key;
static const size_t sizes[] = {24, 200, 3000, 40000};

/* The value of the key: the block kept from the previous round. Its first
 * word counts the rounds. */
static void allocate_in_destructor(void *value)
{
    size_t *kept = value;
    size_t round = kept[0];
    CHECK_PATTERN(kept + 1, 64 - sizeof(size_t), round);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *p = malloc(sizes[i]);
        CHECK(p != NULL);
        hak_fill(p, sizes[i], i);
        CHECK_PATTERN(p, sizes[i], i);
        free(p);
    }
    free(kept);
    size_t *next = malloc(64);
    CHECK(next != NULL);
    next[0] = round + 1;
    hak_fill(next + 1, 64 - sizeof(size_t), round + 1);
    /* Beyond the last round glibc ignores (and clears) the value: free it. */
    if (round + 1 >= PTHREAD_DESTRUCTOR_ITERATIONS) {
        free(next);
        next = NULL;
    }
    CHECK(pthread_setspecific(key, next) == 0);
}

static void *set_key_and_exit(void *arg)
{
    free(malloc(100));   /* the thread has a heap of its own before it exits */
    size_t *first = malloc(64);
    CHECK(first != NULL);
    first[0] = 0;
    hak_fill(first + 1, 64 - sizeof(size_t), 0);
    CHECK(pthread_setspecific(key, first) == 0);
    return arg;
}

/* Runs `threads` threads, CONCURRENT at a time. */
static void run_threads(size_t threads)
{
    for (size_t started = 0; started < threads; started += CONCURRENT) {
        pthread_t batch[CONCURRENT];
        for (size_t i = 0; i < CONCURRENT; i++) batch[i] = hak_thread_start(set_key_and_exit, NULL);
        for (size_t i = 0; i < CONCURRENT; i++) pthread_join(batch[i], NULL);
    }
}

/* Live heaps, from the JSON report ("heaps":N); -1 if it has none. */
static long live_heaps(void)
{
    int fd = (int)syscall(SYS_memfd_create, "report", 0);
    CHECK(fd >= 0);
    hak_stats_write_json(fd);
    static char buf[1 << 16];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    close(fd);
    CHECK(n > 0);
    buf[n] = 0;
    const char *field = strstr(buf, "\"heaps\":");
    return field != NULL ? strtol(field + 8, NULL, 10) : -1;
}

static void destructors_allocate_after_heap_given_up(void)
{
    CHECK(pthread_key_create(&key, allocate_in_destructor) == 0);
    run_threads(256);   /* warm up: arenas, spare heaps, the survivors' pages */
    size_t base_rss = hak_rss_bytes();
    long base_heaps = live_heaps();
    size_t threads = hak_scale(4000, 40000);
    run_threads(threads);
    /* A heap left behind per thread costs ~28 KiB: 110 MiB for 4,000. */
    CHECK_RSS_GROWTH_BELOW(base_rss, 24 * MiB + threads * HAK_RSS_PER_THREAD_RUN);
    long heaps = live_heaps();
    CHECKF(base_heaps > 0 && heaps <= base_heaps, "%ld live heaps after %zu threads exited (%ld before)", heaps, threads,
           base_heaps);
    printf("     %zu threads, RSS %zu -> %zu MiB, %ld live heaps\n", threads, base_rss / MiB,
           hak_rss_bytes() / MiB, heaps);
}

/* One small block (the dlerror state, from the shared heap) freed by libc
 * at exit. */
static void *fail_a_lookup(void *arg)
{
    CHECK(dlsym(RTLD_DEFAULT, "hak_test_no_such_symbol") == NULL);
    return arg;
}

/* More blocks than the shared heap serves a thread: a heap of its own. */
static void *make_a_heap(void *arg)
{
    void *p[200];
    for (size_t i = 0; i < 200; i++) CHECK((p[i] = malloc(32)) != NULL);
    for (size_t i = 0; i < 200; i++) free(p[i]);
    return arg;
}

static void libc_frees_after_young_threads(void)
{
    for (int i = 0; i < 8; i++) pthread_join(hak_thread_start(i % 2 ? make_a_heap : fail_a_lookup, NULL), NULL);
    long base_heaps = live_heaps();
    size_t threads = hak_scale(2000, 20000);
    for (size_t i = 0; i < threads; i++) pthread_join(hak_thread_start(i % 2 ? make_a_heap : fail_a_lookup, NULL), NULL);
    long heaps = live_heaps();
    CHECKF(base_heaps > 0 && heaps <= base_heaps, "%ld live heaps after %zu threads exited (%ld before)", heaps, threads,
           base_heaps);
}

int main(void)
{
    hak_test_begin("test_thread_exit_alloc");
    RUN_CASE(destructors_allocate_after_heap_given_up);
    RUN_CASE(libc_frees_after_young_threads);
    return 0;
}
