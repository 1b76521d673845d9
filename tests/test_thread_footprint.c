/* Per-thread footprint: many live threads each holding a few small blocks
 * must cost about what the blocks and the thread's stack do (1,000 threads
 * holding 10 blocks each used 152 MB resident for 16 MB live, then 61 MB
 * with a page carved an OS page at a time; glibc 26 MB). Their first
 * allocations come from the shared heap, so they share pages. Each thread
 * here takes 10 blocks of 16 B - 3 KiB (~15 KiB), all in use until every
 * thread has measured in. */
#include "hak_test.h"

#define THREADS 200
#define BLOCKS 10
#define BOUND_PER_THREAD (40 * KiB)   /* was ~150 KiB, then ~60; now ~26 (stack included) */

static pthread_barrier_t filled, done;

static void *hold_blocks(void *arg)
{
    hak_rng rng = hak_rng_seed((uintptr_t)arg);
    void *p[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) {
        size_t size = hak_rng_range(&rng, 16, 3 * KiB);
        p[i] = malloc(size);
        CHECK(p[i] != NULL);
        memset(p[i], 1, size);
    }
    pthread_barrier_wait(&filled);
    pthread_barrier_wait(&done);
    for (int i = 0; i < BLOCKS; i++) free(p[i]);
    return NULL;
}

static void many_threads_few_blocks(void)
{
    pthread_t t[THREADS];
    pthread_barrier_init(&filled, NULL, THREADS + 1);
    pthread_barrier_init(&done, NULL, THREADS + 1);
    size_t before = hak_rss_bytes();
    for (size_t i = 0; i < THREADS; i++) t[i] = hak_thread_start(hold_blocks, (void *)(i + 1));
    pthread_barrier_wait(&filled);
    size_t per_thread = (hak_rss_bytes() - before) / THREADS;
    printf("     %d threads holding %d blocks each: %zu KiB resident per thread\n", THREADS, BLOCKS, per_thread / KiB);
    CHECKF(per_thread < BOUND_PER_THREAD * HAK_RSS_SLACK, "%zu KiB per thread", per_thread / KiB);
    pthread_barrier_wait(&done);
    for (size_t i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
}

int main(void)
{
    hak_test_begin("test_thread_footprint");
    RUN_CASE(many_threads_few_blocks);
    return 0;
}
