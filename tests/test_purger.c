/* Memory goes back to the OS on time with no further allocator call: the
 * background purger (src/purge.c). Each case frees a large working set and
 * then only sleeps, polling the resident set until it falls to a quarter of
 * its peak (generous deadline: the machine may be loaded; the time it took
 * is printed). Run with HAKMEM_PURGE_DELAY=10 and HAKMEM_BACKGROUND=1 set
 * by ctest; "off" re-runs itself with HAKMEM_BACKGROUND=0. */
#include "hak_test.h"
#include <semaphore.h>
#include <stdatomic.h>

#define WORKING_SET (128 * MiB)
#define DEADLINE_MS 5000

static void **blocks;
static size_t nblocks;

static void fill(size_t from, size_t bytes, uint64_t seed)
{
    hak_rng rng = hak_rng_seed(seed);
    size_t total = 0;
    nblocks = from;
    while (total < bytes) {
        size_t size = hak_rng_range(&rng, 16, 1024);
        blocks[nblocks] = malloc(size);
        CHECK(blocks[nblocks] != NULL);
        memset(blocks[nblocks++], 0x5A, size);
        total += size;
    }
}

static void free_range(size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) free(blocks[i]);
}

/* Until RSS <= limit, `work` (NULL: none, no allocator call) then a
 * pause, each round; fail at the deadline. */
static void wait_below_doing(size_t limit, size_t peak, const char *what, void (*work)(void))
{
    double t0 = hak_now_ms();
    size_t rss;
    while ((rss = hak_rss_bytes()) > limit) {
        CHECKF(hak_now_ms() - t0 < DEADLINE_MS, "%s: rss %zu MiB still > %zu MiB (peak %zu MiB) after %d ms",
               what, rss / MiB, limit / MiB, peak / MiB, DEADLINE_MS);
        if (work != NULL) work();
        usleep(20 * 1000);
    }
    printf("     %s: peak %zu MiB, %zu MiB after %.0f ms %s\n", what, peak / MiB, rss / MiB, hak_now_ms() - t0,
           work != NULL ? "busy" : "idle");
}

/* Sleep (no allocator call) until RSS <= limit; fail at the deadline. */
static void wait_below(size_t limit, size_t peak, const char *what)
{
    wait_below_doing(limit, peak, what, NULL);
}

/* The resident set before a case fills: what earlier cases freed goes
 * back first (malloc_trim), so that the purger returning it meanwhile
 * cannot hide the new blocks' memory from the case's measure of it. */
static size_t settled_rss(void)
{
    malloc_trim(0);
    return hak_rss_bytes();
}

/* ... until RSS <= a quarter of the peak. */
static void wait_returned(size_t peak, const char *what)
{
    wait_below(peak / 4, peak, what);
}

/* The scenario of the issue: two threads fill the working set and exit; a
 * thread that never allocated frees the first half (cross-thread), main the
 * rest; then the program sleeps. */
static void *fill_half(void *arg)
{
    size_t half = (size_t)(uintptr_t)arg;
    hak_rng rng = hak_rng_seed(half + 7);
    size_t total = 0, i = half ? WORKING_SET / 16 / 2 : 0, start = i;
    while (total < WORKING_SET / 2) {
        size_t size = hak_rng_range(&rng, 16, 1024);
        blocks[i] = malloc(size);
        CHECK(blocks[i] != NULL);
        memset(blocks[i++], 0x5A, size);
        total += size;
    }
    return (void *)(uintptr_t)(i - start);
}

static size_t half_counts[2];

static void *free_first_half(void *arg)
{
    free_range(0, half_counts[0]);
    return NULL;
}

static void idle_after_large_free(void)
{
    void *n0, *n1;
    pthread_t a = hak_thread_start(fill_half, (void *)0), b = hak_thread_start(fill_half, (void *)1);
    pthread_join(a, &n0);
    pthread_join(b, &n1);
    half_counts[0] = (size_t)(uintptr_t)n0;
    half_counts[1] = (size_t)(uintptr_t)n1;
    size_t peak = hak_rss_bytes();
    pthread_t f = hak_thread_start(free_first_half, NULL);
    pthread_join(f, NULL);
    size_t second = WORKING_SET / 16 / 2;
    free_range(second, second + half_counts[1]);
    wait_returned(peak, "exited threads' blocks freed, then idle");
}

/* A thread that never allocated frees every block of a living, idle thread. */
static sem_t filled, freed;

static void *fill_then_wait(void *arg)
{
    fill(0, WORKING_SET, 11);
    sem_post(&filled);
    sem_wait(&freed);   /* alive and idle while main checks */
    return NULL;
}

static void *free_all(void *arg)
{
    free_range(0, nblocks);
    return NULL;
}

static void freed_by_thread_that_never_allocated(void)
{
    sem_init(&filled, 0, 0);
    sem_init(&freed, 0, 0);
    pthread_t owner = hak_thread_start(fill_then_wait, NULL);
    sem_wait(&filled);
    size_t peak = hak_rss_bytes();
    pthread_t freer = hak_thread_start(free_all, NULL);
    pthread_join(freer, NULL);
    wait_returned(peak, "freed by a thread that never allocated");
    sem_post(&freed);
    pthread_join(owner, NULL);
}

/* A living thread frees its own working set, then blocks. */
static void *fill_free_then_wait(void *arg)
{
    fill(0, WORKING_SET, 13);
    sem_post(&filled);
    sem_wait(&freed);
    free_range(0, nblocks);
    sem_post(&filled);
    sem_wait(&freed);
    return NULL;
}

static void idle_living_thread(void)
{
    sem_init(&filled, 0, 0);
    sem_init(&freed, 0, 0);
    pthread_t t = hak_thread_start(fill_free_then_wait, NULL);
    sem_wait(&filled);
    size_t peak = hak_rss_bytes();
    sem_post(&freed);
    sem_wait(&filled);   /* it has freed everything and now waits */
    wait_returned(peak, "a living thread freed its blocks and idles");
    sem_post(&freed);
    pthread_join(t, NULL);
}

/* Living threads free their own medium blocks (9-32 KiB: the classes whose
 * last freed blocks wait in the thread's ring, free.c), then block: the
 * blocks kept in the rings must not pin their pages. (Not in the secure
 * variant, whose idle threads' quarantines hold their last medium blocks,
 * and so their pages, until the threads free or exit: README, Hardening.) */
#ifndef HAK_TEST_SECURE
#define RING_THREADS 16
#define RING_CLASSES 16
#define RING_BLOCKS 8

static pthread_barrier_t ring_filled, ring_freed, ring_done;

static void *fill_ring_classes_free_then_wait(void *arg)
{
    (void)arg;
    void *own[RING_CLASSES][RING_BLOCKS];
    for (int c = 0; c < RING_CLASSES; c++)
        for (int i = 0; i < RING_BLOCKS; i++) {
            size_t size = 8 * KiB + 1 + (size_t)c * 1536;
            own[c][i] = malloc(size);
            CHECK(own[c][i] != NULL);
            memset(own[c][i], 0x3C, size);
        }
    pthread_barrier_wait(&ring_filled);
    for (int c = 0; c < RING_CLASSES; c++)
        for (int i = 0; i < RING_BLOCKS; i++) free(own[c][i]);
    pthread_barrier_wait(&ring_freed);
    pthread_barrier_wait(&ring_done);   /* alive and idle while main watches */
    return NULL;
}

static void idle_living_threads_medium(void)
{
    pthread_barrier_init(&ring_filled, NULL, RING_THREADS + 1);
    pthread_barrier_init(&ring_freed, NULL, RING_THREADS + 1);
    pthread_barrier_init(&ring_done, NULL, RING_THREADS + 1);
    size_t base = settled_rss();
    pthread_t t[RING_THREADS];
    for (int i = 0; i < RING_THREADS; i++) t[i] = hak_thread_start(fill_ring_classes_free_then_wait, NULL);
    pthread_barrier_wait(&ring_filled);
    size_t held = hak_rss_bytes() - base;
    CHECKF(held > 20 * MiB, "only %zu MiB resident for the blocks", held / MiB);
    pthread_barrier_wait(&ring_freed);
    wait_below(base + held / 4, base + held, "living threads freed their medium blocks and idle");
    pthread_barrier_wait(&ring_done);
    for (int i = 0; i < RING_THREADS; i++) pthread_join(t[i], NULL);
}
#endif

/* Blocks another thread frees into pages their living owner still holds
 * (not full, so not abandoned) wait there until the owner allocates again;
 * an owner that does not must not pin them. Medium blocks, a page's worth
 * less one per class: the pages stay the owner's. */
static void *fill_medium_then_wait(void *arg)
{
    static const size_t sizes[] = {96 * KiB, 160 * KiB, 256 * KiB, 384 * KiB, 640 * KiB};
    nblocks = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int i = 0; i < 10; i++) {
            blocks[nblocks] = malloc(sizes[s]);
            CHECK(blocks[nblocks] != NULL);
            memset(blocks[nblocks++], 0x77, sizes[s]);
        }
    sem_post(&filled);
    sem_wait(&freed);
    return NULL;
}

static void freed_into_an_idle_owners_pages(void)
{
    sem_init(&filled, 0, 0);
    sem_init(&freed, 0, 0);
    size_t base = settled_rss();
    pthread_t owner = hak_thread_start(fill_medium_then_wait, NULL);
    sem_wait(&filled);
    size_t held = hak_rss_bytes() - base;
    CHECKF(held > 10 * MiB, "only %zu MiB resident for the blocks", held / MiB);
    pthread_t freer = hak_thread_start(free_all, NULL);
    pthread_join(freer, NULL);
    /* (Within a second or two: these are looked at once a second.) */
    wait_below(base + held / 4, base + held, "freed into pages a living idle thread owns");
    sem_post(&freed);
    pthread_join(owner, NULL);
}

/* Workers of a pool take turns at a job: the one whose turn it is fills
 * pages of one small class, frees some of its blocks itself (so that pages
 * it found full and gave up come back to it), and hands the rest to main,
 * which frees half of them while the worker refills its pages (which so
 * take remote frees before they are full again), then all. The worker
 * then waits for its next turn, owning nothing but pages only main freed
 * into: those must not stay resident, or the idle pool holds each
 * worker's last job (a change that kept such pages owned held 8 workers'
 * worth: here 24 MiB above the start, against 0.6; in the attack helper's
 * program, with jobs of 12 MiB, 105 MiB against 4.6). */
#define POOL_WORKERS 8
#define JOB_BLOCKS 50000
#define JOB_SIZE 64
static sem_t job_turn[POOL_WORKERS], job_handed, job_refill;
static bool pool_closed;

/* The job's blocks up to JOB_BLOCKS again. */
static void job_fill(void)
{
    while (nblocks < JOB_BLOCKS) {
        blocks[nblocks] = malloc(JOB_SIZE);
        CHECK(blocks[nblocks] != NULL);
        memset(blocks[nblocks++], 0x42, JOB_SIZE);
    }
}

/* Of the job's blocks, those at `at` modulo `every` freed; the others
 * kept, in order. */
static void job_free_each(size_t every, size_t at)
{
    size_t kept = 0;
    for (size_t i = 0; i < nblocks; i++) {
        if (i % every == at) free(blocks[i]);
        else blocks[kept++] = blocks[i];
    }
    nblocks = kept;
}

static void *pool_worker(void *arg)
{
    sem_t *turn = arg;
    for (;;) {
        sem_wait(turn);
        if (pool_closed) return NULL;
        nblocks = 0;
        job_fill();
        job_free_each(64, 0);
        sem_post(&job_handed);
        sem_wait(&job_refill);
        job_fill();
        sem_post(&job_handed);
    }
}

static void pool_workers_taking_turns(void)
{
    sem_init(&job_handed, 0, 0);
    sem_init(&job_refill, 0, 0);
    pool_closed = false;
    size_t base = settled_rss(), peak = base;
    pthread_t t[POOL_WORKERS];
    for (int i = 0; i < POOL_WORKERS; i++) {
        sem_init(&job_turn[i], 0, 0);
        t[i] = hak_thread_start(pool_worker, &job_turn[i]);
    }
    for (int round = 0; round < 2 * POOL_WORKERS; round++) {
        sem_post(&job_turn[round % POOL_WORKERS]);
        sem_wait(&job_handed);
        job_free_each(2, 1);
        sem_post(&job_refill);
        sem_wait(&job_handed);
        size_t rss = hak_rss_bytes();
        if (rss > peak) peak = rss;
        free_range(0, nblocks);
    }
    /* (One job's blocks; two in the secure variant, whose main thread,
     * idle here, keeps its quarantine, whose blocks pin their pages: about
     * 3 MiB.) */
#ifdef HAK_TEST_SECURE
    size_t jobs_left = 2;
#else
    size_t jobs_left = 1;
#endif
    wait_below(base + jobs_left * JOB_BLOCKS * JOB_SIZE, peak, "a pool's idle workers, whose last jobs main freed");
    pool_closed = true;
    for (int i = 0; i < POOL_WORKERS; i++) {
        sem_post(&job_turn[i]);
        pthread_join(t[i], NULL);
    }
}

/* A producer allocates blocks of one class, frees about half of them
 * itself (at random, so that pages it abandoned full come back to it)
 * and hands the rest to main; then it stops using that class, busy with
 * another. Main frees every block it got: the pages the producer still
 * holds are all free, and must go back though it never allocates that
 * class again (they held 19 MiB for good: an attack helper's producers). */
enum { PRODUCED = 200000, PRODUCER_POOL = 4096 };
static atomic_bool producer_stop;

static void *produce_then_use_another_class(void *arg)
{
    (void)arg;
    hak_rng rng = hak_rng_seed(23);
    static void *pool[PRODUCER_POOL];
    nblocks = 0;
    for (int i = 0; i < PRODUCED; i++) {
        char *p = malloc(64);
        CHECK(p != NULL);
        memset(p, 0x5A, 64);
        if (hak_rng_range(&rng, 0, 1) == 0) {
            size_t k = hak_rng_range(&rng, 0, PRODUCER_POOL - 1);
            free(pool[k]);
            pool[k] = p;
        } else {
            blocks[nblocks++] = p;
        }
    }
    for (size_t k = 0; k < PRODUCER_POOL; k++) free(pool[k]);
    sem_post(&filled);
    void *other[64] = {0};
    for (unsigned i = 0; !atomic_load(&producer_stop); i++) {
        free(other[i % 64]);
        other[i % 64] = malloc(1000);
        if (i % 65536 == 0) usleep(1000);
    }
    for (size_t k = 0; k < 64; k++) free(other[k]);
    return NULL;
}

static void freed_into_a_class_its_owner_left(void)
{
    sem_init(&filled, 0, 0);
    atomic_store(&producer_stop, false);
    size_t base = settled_rss();
    pthread_t t = hak_thread_start(produce_then_use_another_class, NULL);
    sem_wait(&filled);
    size_t peak = hak_rss_bytes();
    free_range(0, nblocks);
    wait_below(base + (peak - base) / 4, peak, "a class its busy owner left, freed by another thread");
    atomic_store(&producer_stop, true);
    pthread_join(t, NULL);
}

/* Huge blocks go to a cache; with the program idle the cache is purged. */
static void huge_cache_when_idle(void)
{
    size_t base = settled_rss();
    for (int i = 0; i < 3; i++) {
        size_t size = (size_t)(40 + 10 * i) * MiB;
        char *p = malloc(size);
        CHECK(p != NULL);
        memset(p, 0x33, size);
        free(p);
    }
    /* The cache holds up to 128 MiB: at least 90 MiB were resident in it. */
    wait_returned(base + 90 * MiB, "huge blocks cached, then idle");
}

/* fork: the child inherits no purger; it starts its own and returns memory. */
static void purger_across_fork(void)
{
    fill(0, WORKING_SET / 4, 17);   /* the parent's purger runs */
    free_range(0, nblocks);
    CHECK(hak_purger_threads() == 1);
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        /* (The child's first allocations may already start its purger.) */
        fill(0, WORKING_SET, 19);
        size_t peak = hak_rss_bytes();
        free_range(0, nblocks);
        wait_returned(peak, "child of fork frees its blocks, then idles");
        CHECK(hak_purger_threads() == 1);
        fflush(stdout);
        _exit(0);
    }
    int status = hak_wait_child(pid, 60);
    CHECK_CHILD_EXITED_0(status);
}

/* None at start-up (checked in main), exactly one once there was memory
 * to return. */
static void one_purger_once_needed(void)
{
    CHECK(hak_purger_threads() == 1);
}

/* HAKMEM_BACKGROUND=0 (this program re-run with it): no thread at all, and
 * memory still goes back through malloc's slow path. */
/* Without the purger only allocator calls return memory: here only
 * malloc/free pairs, which the fast paths serve from the blocks the pairs
 * themselves free (the heartbeat brings the slow path round). */
static void small_pairs(void)
{
    for (int i = 0; i < 1000; i++) free(malloc(16 + (size_t)i % 2000));
}

static void medium_pairs(void)   /* a medium class: the kept block's path */
{
    for (int i = 0; i < 1000; i++) free(malloc(12 * KiB));
}

static void returned_by_pairs(void (*pairs)(void), const char *what)
{
    fill(0, WORKING_SET, 23);
    size_t peak = hak_rss_bytes();
    free_range(0, nblocks);
    double t0 = hak_now_ms();
    while (hak_rss_bytes() > peak / 4) {
        CHECKF(hak_now_ms() - t0 < DEADLINE_MS, "%s: rss %zu MiB with HAKMEM_BACKGROUND=0", what, hak_rss_bytes() / MiB);
        pairs();
        usleep(5 * 1000);
    }
    printf("     %s: peak %zu MiB, back under a quarter after %.0f ms\n", what, peak / MiB, hak_now_ms() - t0);
}

static void background_off_child(void)
{
    CHECK(hak_purger_threads() == 0);
    for (int i = 0; i < 4; i++) medium_pairs();   /* its blocks in place before the fill */
    returned_by_pairs(small_pairs, "small pairs");
    returned_by_pairs(medium_pairs, "medium pairs");
    CHECK(hak_purger_threads() == 0);
}

static void background_off(void)
{
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        setenv("HAKMEM_BACKGROUND", "0", 1);
        char *argv[] = {"test_purger", "off", NULL};
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    int status = hak_wait_child(pid, 60);
    CHECK_CHILD_EXITED_0(status);
}

/* A thread fills pages of a medium class and frees its blocks, the first
 * of each page last, then exits. In the secure variant those last frees
 * wait in quarantine, handed over at the thread's exit to the shared heap's,
 * where no later free pushed them out: each kept its page resident (an
 * attack helper's program held 16 MiB for 64 blocks of 16 KiB until
 * malloc_trim). They leave on the purger's clock, and their pages go. */
enum { SPREAD_BLOCK = 16 * KiB, SPREAD_BLOCKS = 4096, PAGE_BLOCKS_AT_MOST = 32 };

static void *fill_free_spread_then_exit(void *arg)
{
    (void)arg;
    for (size_t i = 0; i < SPREAD_BLOCKS; i++) {
        blocks[i] = malloc(SPREAD_BLOCK);
        CHECK(blocks[i] != NULL);
        memset(blocks[i], 0x5A, SPREAD_BLOCK);
    }
    sem_post(&filled);
    sem_wait(&freed);
    for (size_t i = 0; i < SPREAD_BLOCKS; i++)
        if (i % PAGE_BLOCKS_AT_MOST != 0) free(blocks[i]);
    for (size_t i = 0; i < SPREAD_BLOCKS; i += PAGE_BLOCKS_AT_MOST) free(blocks[i]);
    return NULL;
}

/* That thread, run to its exit: the resident set before it and at its peak. */
static void spread_thread_run(size_t *before, size_t *peak)
{
    sem_init(&filled, 0, 0);
    sem_init(&freed, 0, 0);
    *before = settled_rss();
    pthread_t t = hak_thread_start(fill_free_spread_then_exit, NULL);
    sem_wait(&filled);
    *peak = hak_rss_bytes();
    sem_post(&freed);
    pthread_join(t, NULL);
}

static void exited_thread_last_frees(void)
{
    size_t before, peak;
    spread_thread_run(&before, &peak);
    /* (Held, the last blocks kept a quarter of the peak.) */
    wait_below(before + (peak - before) / 16, peak, "an exited thread's blocks, the first of each page freed last");
}

/* The same, with a fork once the parent's purger has taken the work (the
 * tick) and sleeps until it is due: the child inherits the blocks but no
 * purger, and must not lose that work. A busy, threaded child, as a
 * pre-forked server's worker is (an attack helper's child held them for
 * good: it started no purger, and its heartbeats had nothing noted). On a
 * machine so loaded that the fork comes after the purger's deadline, the
 * parent has returned the memory first and the case checks little. */
static void *sleep_a_while(void *arg)
{
    usleep(200 * 1000);
    return arg;
}

static void light_work(void)
{
    for (int i = 0; i < 1000; i++) free(malloc(64));
}

static void exited_thread_last_frees_then_fork(void)
{
    size_t before, peak;
    spread_thread_run(&before, &peak);
    usleep(200 * 1000);   /* (the purger is due back at the tick, 500 ms after the exit) */
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        pthread_t other = hak_thread_start(sleep_a_while, NULL);
        wait_below_doing(before + (peak - before) / 16, peak, "child of fork", light_work);
        pthread_join(other, NULL);
        fflush(stdout);
        _exit(0);
    }
    int status = hak_wait_child(pid, 60);
    CHECK_CHILD_EXITED_0(status);
}

int main(int argc, char **argv)
{
    blocks = mmap(NULL, WORKING_SET / 16 * sizeof(void *), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(blocks != MAP_FAILED);
    if (argc > 1 && strcmp(argv[1], "off") == 0) {
        hak_test_begin("test_purger (HAKMEM_BACKGROUND=0)");
        RUN_CASE(background_off_child);
        return 0;
    }
    hak_test_begin("test_purger");
    CHECK(hak_purger_threads() == 0);   /* a program that counts its threads at start-up sees none */
    RUN_CASE(idle_after_large_free);
    RUN_CASE(one_purger_once_needed);
    RUN_CASE(freed_by_thread_that_never_allocated);
    RUN_CASE(idle_living_thread);
#ifndef HAK_TEST_SECURE
    RUN_CASE(idle_living_threads_medium);
#endif
    RUN_CASE(freed_into_an_idle_owners_pages);
    RUN_CASE(pool_workers_taking_turns);
    RUN_CASE(freed_into_a_class_its_owner_left);
    RUN_CASE(huge_cache_when_idle);
    RUN_CASE(exited_thread_last_frees);
    RUN_CASE(exited_thread_last_frees_then_fork);
    RUN_CASE(purger_across_fork);
    RUN_CASE(background_off);
    return 0;
}
