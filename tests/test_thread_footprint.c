/* Per-thread footprint: many live threads each holding a few small blocks
 * must cost about what the blocks and the thread's stack do.
 *
 * - few_blocks: 10 blocks of 16 B - 3 KiB (~15 KiB) per thread. (1,000
 *   such threads used 152 MB resident for 16 MB live, then 61 MB with a
 *   page carved an OS page at a time; glibc 26 MB.) Their first
 *   allocations come from the shared heap, so they share pages.
 * - own_heap: 100 blocks of 32 B per thread, past the shared heap's
 *   share, so each thread has a heap of its own: the heap costs the
 *   entries the thread uses, not all of it (here 25 KiB per thread while
 *   a new heap was cleared whole, 17-19 since).
 * - own_lines: the blocks threads take from the shared heap never share a
 *   cache line across threads (else each thread's writes would take the
 *   line from the other: false sharing).
 * - young_sizes: from 1 to 4 KiB those blocks hold their size rounded up
 *   to a line, not to a thread heap's class, up to 192 bytes more (the
 *   shared heap's own classes: 1,000 threads as in few_blocks used 500 KiB
 *   more without them).
 * - young_fresh_pages: the shared heap takes no page an exited thread's
 *   heap left (carved, so resident, whole): never given up, it would keep
 *   the page for a young thread's few blocks. (Thread heaps do adopt such
 *   pages: test_thread_churn.)
 * - young_leftovers_reused: pages the shared heap gave up full, in which
 *   young threads left a few blocks each, are taken again by the shared
 *   heap once other blocks in them are freed, in one of its own classes and
 *   in one it shares with thread heaps (a shared heap that took no
 *   published page at all stranded them: 30 rounds grew RSS by 26 MiB for 1
 *   MiB live).
 *
 * In the first two, every block stays in use until every thread has
 * measured in. Stacks are 64 KiB, of which a thread touches a few pages. */
#include <stdatomic.h>
#include "hak_test.h"

#define THREADS 200

typedef struct {
    int blocks;
    size_t min, max;
} holding_t;

static pthread_barrier_t filled, done;
static atomic_uint lanes;   /* each thread's seed: 1, 2, ... */

static void *hold_blocks(void *arg)
{
    const holding_t *h = arg;
    hak_rng rng = hak_rng_seed(atomic_fetch_add(&lanes, 1) + 1);
    void *p[128];
    for (int i = 0; i < h->blocks; i++) {
        size_t size = hak_rng_range(&rng, h->min, h->max);
        p[i] = malloc(size);
        CHECK(p[i] != NULL);
        memset(p[i], 1, size);
    }
    pthread_barrier_wait(&filled);
    pthread_barrier_wait(&done);
    for (int i = 0; i < h->blocks; i++) free(p[i]);
    return NULL;
}

/* THREADS threads each holding h's blocks: resident memory per thread
 * below `bound`. */
static void threads_hold(const holding_t *h, size_t bound)
{
    pthread_t t[THREADS];
    atomic_store(&lanes, 0);
    pthread_barrier_init(&filled, NULL, THREADS + 1);
    pthread_barrier_init(&done, NULL, THREADS + 1);
    size_t before = hak_rss_bytes();
    for (size_t i = 0; i < THREADS; i++) t[i] = hak_thread_start(hold_blocks, (void *)h);
    pthread_barrier_wait(&filled);
    size_t per_thread = (hak_rss_bytes() - before) / THREADS;
    printf("     %d threads holding %d blocks of %zu-%zu B: %zu KiB resident per thread\n",
           THREADS, h->blocks, h->min, h->max, per_thread / KiB);
    CHECKF(per_thread < bound * HAK_RSS_SLACK, "%zu KiB per thread", per_thread / KiB);
    pthread_barrier_wait(&done);
    for (size_t i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&filled);
    pthread_barrier_destroy(&done);
}

static void few_blocks(void)
{
    threads_hold(&(holding_t){ .blocks = 10, .min = 16, .max = 3 * KiB }, 40 * KiB);
}

static void own_heap(void)
{
    threads_hold(&(holding_t){ .blocks = 100, .min = 32, .max = 32 }, 24 * KiB);
}

#define LINE_THREADS 8
#define LINE_BLOCKS 16

static void *young_blocks[LINE_THREADS][LINE_BLOCKS];
static pthread_barrier_t start_line;

/* Block i's size: 1 - 106 B, classes below and across a line. */
static size_t young_size(int i) { return 1 + (size_t)i * 7; }

static void *take_young_blocks(void *arg)
{
    void **mine = arg;
    pthread_barrier_wait(&start_line);   /* all at once, so their blocks interleave */
    for (int i = 0; i < LINE_BLOCKS; i++) {
        mine[i] = malloc(young_size(i));
        CHECK(mine[i] != NULL);
        memset(mine[i], 0xab, young_size(i));
    }
    return NULL;
}

static void own_lines(void)
{
    pthread_t t[LINE_THREADS];
    pthread_barrier_init(&start_line, NULL, LINE_THREADS);
    for (int i = 0; i < LINE_THREADS; i++) t[i] = hak_thread_start(take_young_blocks, young_blocks[i]);
    for (int i = 0; i < LINE_THREADS; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&start_line);
    for (int a = 0; a < LINE_THREADS; a++)
        for (int b = a + 1; b < LINE_THREADS; b++)
            for (int i = 0; i < LINE_BLOCKS; i++)
                for (int j = 0; j < LINE_BLOCKS; j++) {
                    uintptr_t x = (uintptr_t)young_blocks[a][i], y = (uintptr_t)young_blocks[b][j];
                    size_t xs = young_size(i), ys = young_size(j);
                    /* the lines [first, last] each block's bytes cover */
                    bool apart = (x + xs - 1) / 64 < y / 64 || (y + ys - 1) / 64 < x / 64;
                    CHECKF(apart, "thread %d's block %p (%zu B) and thread %d's %p (%zu B) share a cache line",
                           a, (void *)x, xs, b, (void *)y, ys);
                }
    for (int a = 0; a < LINE_THREADS; a++)
        for (int i = 0; i < LINE_BLOCKS; i++) free(young_blocks[a][i]);
}

static void *take_young_sizes(void *arg)
{
    (void)arg;
    const size_t sizes[] = {1025, 1100, 1500, 2049, 2100, 2500, 3000, 3900, 4095};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *p = malloc(sizes[i]);
        CHECK(p != NULL);
        size_t usable = malloc_usable_size(p), lines = (sizes[i] + 63) / 64 * 64;
        /* (The secure variant, and any build under a tool, hold the size asked for.) */
        CHECKF(usable >= sizes[i] && usable <= lines, "malloc(%zu) holds %zu", sizes[i], usable);
        memset(p, 1, usable);
        free(p);
    }
    return NULL;
}

static void young_sizes(void)
{
    pthread_join(hak_thread_start(take_young_sizes, NULL), NULL);
}

/* A class the shared heap shares with thread heaps (an even number of
 * lines) and that no other case here takes. */
#define SPARSE_SIZE   3584
#define SPARSE_BLOCKS 16

static void *sparse_left;   /* the one block the exited thread left live */

static void *leave_sparse_page(void *arg)
{
    (void)arg;
    free(malloc(64 * KiB));   /* a medium block: the thread gets a heap of its own at once */
    void *p[SPARSE_BLOCKS];
    for (int i = 0; i < SPARSE_BLOCKS; i++) {
        p[i] = malloc(SPARSE_SIZE);
        CHECK(p[i] != NULL);
        memset(p[i], 2, SPARSE_SIZE);
    }
    for (int i = 1; i < SPARSE_BLOCKS; i++) free(p[i]);
    sparse_left = p[0];   /* its page, mostly free, is published when the thread exits */
    return NULL;
}

static void *take_first_block(void *arg)
{
    void **out = arg;
    *out = malloc(SPARSE_SIZE);   /* the thread's first: the shared heap's */
    CHECK(*out != NULL);
    return NULL;
}

static bool same_page(const void *a, const void *b) { return (uintptr_t)a / (64 * KiB) == (uintptr_t)b / (64 * KiB); }

static void young_fresh_pages(void)
{
    pthread_join(hak_thread_start(leave_sparse_page, NULL), NULL);
    void *young = NULL;
    pthread_join(hak_thread_start(take_first_block, &young), NULL);
    CHECKF(!same_page(young, sparse_left), "a young thread's block %p lies in the page an exited thread left (%p)",
           young, sparse_left);
    free(young);
    free(sparse_left);
}

#define LEFT_THREADS 16
#define LEFT_BLOCKS  60     /* below HAK_YOUNG_ALLOCS: all from the shared heap */
#define LEFT_ROUNDS  30

static void *left[LEFT_THREADS][LEFT_BLOCKS];
static void *kept[LEFT_ROUNDS * LEFT_THREADS * 2];
static size_t left_size;

static void *take_young_blocks_and_exit(void *arg)
{
    void **mine = arg;
    for (int i = 0; i < LEFT_BLOCKS; i++) {
        mine[i] = malloc(left_size);
        CHECK(mine[i] != NULL);
        memset(mine[i], 3, left_size);
    }
    return NULL;
}

/* Rounds of young threads taking blocks of `size`, of which the main
 * thread frees all but two per thread: RSS grows by about what stays. */
static void leave_young_blocks(size_t size)
{
    size_t before = hak_rss_bytes(), n = 0;
    left_size = size;
    for (int r = 0; r < LEFT_ROUNDS; r++) {
        pthread_t t[LEFT_THREADS];
        for (int i = 0; i < LEFT_THREADS; i++) t[i] = hak_thread_start(take_young_blocks_and_exit, left[i]);
        for (int i = 0; i < LEFT_THREADS; i++) pthread_join(t[i], NULL);
        for (int i = 0; i < LEFT_THREADS; i++)
            for (int j = 0; j < LEFT_BLOCKS; j++)
                if (j == 0 || j == LEFT_BLOCKS / 2) kept[n++] = left[i][j];
                else free(left[i][j]);
    }
    size_t after = hak_rss_bytes(), grown = after > before ? after - before : 0, live = n * size;
    printf("     %zu B blocks, %zu KiB live in the shared heap's pages: %zu KiB more resident\n", size, live / KiB,
           grown / KiB);
    CHECKF(grown < (live + 4 * MiB) * HAK_RSS_SLACK, "%zu KiB more resident for %zu KiB live", grown / KiB, live / KiB);
    for (size_t i = 0; i < n; i++) free(kept[i]);
}

static void young_leftovers_reused(void)
{
    leave_young_blocks(1088);   /* one of the shared heap's own classes */
    leave_young_blocks(1024);   /* a class thread heaps have too */
}

int main(void)
{
    hak_test_begin("test_thread_footprint");
    RUN_CASE(few_blocks);
    RUN_CASE(own_heap);
    RUN_CASE(own_lines);
    RUN_CASE(young_sizes);
    RUN_CASE(young_fresh_pages);
    RUN_CASE(young_leftovers_reused);
    return 0;
}
