/* fork() while other threads allocate. The child inherits the allocator in
 * whatever state the other threads left it (locks held, lists mid-update):
 * an allocator without fork handlers deadlocks or corrupts here. Children
 * allocate heavily, free blocks inherited from the parent, start threads of
 * their own, and must exit 0.
 *
 * A child counts its operations in memory shared with the parent, which
 * fails only if that count stands still for CHILD_STALL_S: a sanitizer
 * build on a loaded machine makes children slow, not stuck. A stuck
 * child's threads are described (state, wait channel, system call) before
 * it is killed. Children leave with _exit: they are copies of a threaded
 * process, whose exit-time handlers (stdio, sanitizers) they need not run.
 * The hammering threads pause while a child runs, so that the child does
 * not compete with them for the CPU; they run again before the next fork. */
#include "hak_test.h"

#include <stdatomic.h>

enum { HAMMER_THREADS = 2, INHERITED_BLOCKS = 256, CHILD_STALL_S = 30 };

static atomic_bool stop_hammering, pause_hammering;

/* Operations done by the children of this process (shared memory). */
static volatile size_t *child_progress;

static void progress_init(void)
{
    if (child_progress) return;
    child_progress = mmap(NULL, sizeof *child_progress, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(child_progress != MAP_FAILED);
}

static void progress_note(void) { __atomic_fetch_add(child_progress, 1, __ATOMIC_RELAXED); }

static int wait_child(pid_t pid) { return hak_wait_child_progress(pid, CHILD_STALL_S, child_progress); }

/* Allocates, verifies and frees continuously until told to stop, keeping a
 * window of live blocks so frees and allocations interleave. */
static void *hammer(void *arg)
{
    enum { WINDOW = 64 };
    hak_item live[WINDOW] = {{0}};
    hak_rng rng = hak_rng_seed((size_t)arg);
    for (size_t i = 0; !atomic_load_explicit(&stop_hammering, memory_order_relaxed); i++) {
        if (atomic_load_explicit(&pause_hammering, memory_order_relaxed)) {
            usleep(1000);
            continue;
        }
        hak_item *slot = &live[i % WINDOW];
        if (slot->ptr) hak_item_verify_free(*slot);
        *slot = hak_item_new(hak_rng_size(&rng, 512 * KiB));
    }
    for (size_t i = 0; i < WINDOW; i++)
        if (live[i].ptr) hak_item_verify_free(live[i]);
    return NULL;
}

/* The child's workload: mixed malloc/realloc/free from 16 B to 4 MiB with
 * every block verified. */
static void child_churn(uint64_t seed)
{
    enum { LIVE = 128 };
    hak_item live[LIVE] = {{0}};
    hak_rng rng = hak_rng_seed(seed);
    for (size_t i = 0; i < 3000; i++) {
        progress_note();
        hak_item *slot = &live[hak_rng_next(&rng) % LIVE];
        size_t size = (hak_rng_next(&rng) % 64 == 0) ? hak_rng_range(&rng, 16, 4 * MiB)
                                                   : hak_rng_range(&rng, 16, 4 * KiB);
        if (!slot->ptr) {
            *slot = hak_item_new(size);
        } else if (hak_rng_next(&rng) % 2) {
            /* realloc keeps the old contents up to the smaller size */
            size_t keep = slot->size < size ? slot->size : size;
            CHECK_PATTERN(slot->ptr, slot->size, hak_seed_of(slot->ptr, slot->size));
            uint64_t old_seed = hak_seed_of(slot->ptr, slot->size);
            void *q = realloc(slot->ptr, size);
            CHECK(q != NULL);
            CHECK_PATTERN(q, keep, old_seed);
            slot->ptr = q;
            slot->size = size;
            hak_fill(q, size, hak_seed_of(q, size));
        } else {
            hak_item_verify_free(*slot);
            slot->ptr = NULL;
        }
    }
    for (size_t i = 0; i < LIVE; i++)
        if (live[i].ptr) hak_item_verify_free(live[i]);
}

static void *child_thread(void *arg)
{
    child_churn((size_t)arg);
    return NULL;
}

static pthread_t hammers[HAMMER_THREADS];

static void start_hammers(void)
{
    progress_init();
    atomic_store(&stop_hammering, false);
    atomic_store(&pause_hammering, false);
    for (size_t i = 0; i < HAMMER_THREADS; i++) hammers[i] = hak_thread_start(hammer, (void *)(i + 1));
    usleep(2000); /* let them get going before the first fork */
}

static void stop_hammers(void)
{
    atomic_store(&stop_hammering, true);
    for (size_t i = 0; i < HAMMER_THREADS; i++) pthread_join(hammers[i], NULL);
}

/* Forks `forks` children; each verifies and frees the blocks it inherited,
 * runs child_churn (on `child_threads` threads if > 0) and exits 0. */
static void fork_children(size_t forks, size_t child_threads)
{
    static hak_item inherited[INHERITED_BLOCKS];
    hak_rng rng = hak_rng_seed(42);
    for (size_t i = 0; i < INHERITED_BLOCKS; i++)
        inherited[i] = hak_item_new(hak_rng_size(&rng, 1 * MiB));

    start_hammers();
    for (size_t f = 0; f < forks; f++) {
        atomic_store(&pause_hammering, false);
        usleep(2000); /* fork while they are at it */
        fflush(NULL); /* no buffered output may be duplicated into the child */
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            for (size_t i = 0; i < INHERITED_BLOCKS; i++) hak_item_verify_free(inherited[i]);
            if (child_threads == 0) {
                child_churn(f);
            } else {
                pthread_t t[8];
                CHECK(child_threads <= 8);
                for (size_t i = 0; i < child_threads; i++)
                    t[i] = hak_thread_start(child_thread, (void *)(f * 100 + i));
                child_churn(f);
                for (size_t i = 0; i < child_threads; i++) pthread_join(t[i], NULL);
            }
            _exit(0);
        }
        atomic_store(&pause_hammering, true);
        int status = wait_child(pid);
        CHECK_CHILD_EXITED_0(status);
    }
    stop_hammers();

    /* The parent's copies are untouched by what the children did. */
    for (size_t i = 0; i < INHERITED_BLOCKS; i++) hak_item_verify_free(inherited[i]);
}

static void fork_while_threads_allocate(void) { fork_children(hak_scale(10, 200), 0); }

static void forked_child_starts_threads(void) { fork_children(hak_scale(4, 50), 3); }

/* A grandchild: the allocator must survive fork() twice in a row. */
static void fork_in_forked_child(void)
{
    start_hammers();
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        pid_t grandchild = fork();
        CHECK(grandchild >= 0);
        if (grandchild == 0) {
            child_churn(7);
            _exit(0);
        }
        child_churn(8);
        int status = wait_child(grandchild);
        CHECK_CHILD_EXITED_0(status);
        _exit(0);
    }
    atomic_store(&pause_hammering, true);
    int status = wait_child(pid);
    CHECK_CHILD_EXITED_0(status);
    stop_hammers();
}

#ifdef HAK_TEST_STANDARD_NAMES
/* A thread keeps taking statistics reports (which hold their own locks
 * while they walk the heaps) while main forks: the child must still be able
 * to take a report, allocate and exit. */
static _Atomic bool stop_reporting;

static void *reporter(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop_reporting)) (void)mallinfo2();
    return NULL;
}

static void fork_while_reporting(void)
{
    pthread_t t = hak_thread_start(reporter, NULL);
    for (size_t f = 0; f < hak_scale(20, 200); f++) {
        fflush(NULL);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            struct mallinfo2 mi = mallinfo2();
            free(malloc(100));
            _exit(mi.arena > 0 ? 0 : 1);
        }
        int status = hak_wait_child(pid, CHILD_STALL_S);
        CHECK_CHILD_EXITED_0(status);
    }
    atomic_store(&stop_reporting, true);
    pthread_join(t, NULL);
}
#endif

#ifndef HAK_TEST_SECURE
/* A thread cuts huge blocks by realloc (in place) while main forks: a
 * child, which may come between a cut and the size its block's header
 * gives, must find the block whole (its usable bytes mapped) and free it,
 * and a new huge block then (which the cache may make of the same memory)
 * must be writable. (A size set after the cut gave children a block past
 * its mapping: 5-12 of 1,000 crashed.) `resized` names the block only
 * while it is live. */
static char *volatile resized;
static _Atomic bool stop_resizing;

static void *resizer(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop_resizing)) {
        char *p = malloc(64 * MiB);
        CHECK(p != NULL);
        resized = p;
        CHECK(realloc(p, 40 * MiB) == p);
        resized = NULL;
        free(p);
    }
    return NULL;
}

static void fork_while_a_huge_block_is_resized(void)
{
    pthread_t t = hak_thread_start(resizer, NULL);
    for (size_t f = 0; f < hak_scale(100, 2000); f++) {
        fflush(NULL);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            char *p = resized;
            if (p == NULL) _exit(0);
            size_t usable = malloc_usable_size(p);
            unsigned char in_core;
            uintptr_t last = ((uintptr_t)p + usable - 1) & ~(uintptr_t)4095;
            if (usable < 40 * MiB || mincore((void *)last, 4096, &in_core) != 0) _exit(2);   /* not mapped */
            free(p);
            char *q = malloc(60 * MiB);
            if (q == NULL) _exit(3);
            for (size_t k = 0; k < 60 * MiB; k += MiB) ((volatile char *)q)[k] = 1;
            ((volatile char *)q)[60 * MiB - 1] = 1;
            free(q);
            _exit(0);
        }
        int status = hak_wait_child(pid, CHILD_STALL_S);
        CHECK_CHILD_EXITED_0(status);
    }
    atomic_store(&stop_resizing, true);
    pthread_join(t, NULL);
}
#endif

/* fork while several threads resize huge blocks without a pause: each
 * resize holds a lock fork waits for, and resizes that overlap one
 * another kept it held, so fork waited as long as they went on (6 threads
 * on 2 cores: for ever; found by an attack helper). fork must return as
 * it does beside threads that allocate. (Each resize moves or cuts its
 * block by mremap: the secure variant's too, beyond its quarantine.) */
enum { NONSTOP_RESIZERS = 6, FORK_WATCHDOG_S = 60 };
static _Atomic bool stop_nonstop;

static void *nonstop_resizer(void *arg)
{
    hak_rng rng = hak_rng_seed((uint64_t)(uintptr_t)arg);
    char *p = malloc(40 * MiB);
    CHECK(p != NULL);
    while (!atomic_load(&stop_nonstop)) {
        size_t size = hak_rng_range(&rng, 40 * MiB, 104 * MiB);
        p = realloc(p, size);
        CHECK(p != NULL);
        p[size - 1] = 1;
    }
    free(p);
    return NULL;
}

static void fork_while_huge_blocks_resize_nonstop(void)
{
    pthread_t t[NONSTOP_RESIZERS];
    for (size_t i = 0; i < NONSTOP_RESIZERS; i++) t[i] = hak_thread_start(nonstop_resizer, (void *)(i + 1));
    usleep(20000);   /* (all of them resizing) */
    hak_watchdog_arm(FORK_WATCHDOG_S, "fork beside threads resizing huge blocks");
    for (size_t f = 0; f < hak_scale(20, 500); f++) {
        fflush(NULL);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) _exit(0);
        int status = hak_wait_child(pid, CHILD_STALL_S);
        CHECK_CHILD_EXITED_0(status);
    }
    alarm(0);
    atomic_store(&stop_nonstop, true);
    for (size_t i = 0; i < NONSTOP_RESIZERS; i++) pthread_join(t[i], NULL);
}

int main(void)
{
    hak_test_begin("test_fork");
    RUN_CASE(fork_while_threads_allocate);
    RUN_CASE(forked_child_starts_threads);
    RUN_CASE(fork_in_forked_child);
#ifndef HAK_TEST_SECURE   /* (which moves a block it cuts) */
    RUN_CASE(fork_while_a_huge_block_is_resized);
#endif
    RUN_CASE(fork_while_huge_blocks_resize_nonstop);
#ifdef HAK_TEST_STANDARD_NAMES
    RUN_CASE(fork_while_reporting);
#endif
    return 0;
}
