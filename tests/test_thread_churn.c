/* Thread churn: thousands of short-lived threads allocate, hand some blocks
 * to a long-lived survivor thread, free the rest and exit. The survivor
 * frees the handed-over blocks long after their owner thread is gone, which
 * is where an allocator with per-thread heaps must adopt or reclaim the
 * memory of dead threads. Resident memory must stay bounded. */
#include "hak_test.h"

enum {
    BLOCKS_PER_THREAD = 64,
    HANDOFF_EVERY = 4,      /* every 4th block goes to the survivor */
    CONCURRENT = 8,         /* threads alive at once */
    SURVIVOR_BACKLOG = 2048 /* blocks the survivor holds before freeing */
};

#define RSS_BOUND (512 * MiB)

static hak_queue handoff;
static hak_item handoff_ring[1024];

static void *short_lived(void *arg)
{
    size_t id = (size_t)arg;
    hak_rng rng = hak_rng_seed(id);
    hak_item mine[BLOCKS_PER_THREAD];
    for (size_t i = 0; i < BLOCKS_PER_THREAD; i++)
        mine[i] = hak_item_new(hak_rng_size(&rng, 256 * KiB));
    for (size_t i = 0; i < BLOCKS_PER_THREAD; i++) {
        if (i % HANDOFF_EVERY == 0)
            hak_queue_push(&handoff, mine[i]);
        else
            hak_item_verify_free(mine[i]);
    }
    return NULL;
}

typedef struct {
    size_t freed;
} survivor_result;

/* Keeps up to SURVIVOR_BACKLOG blocks alive and frees the oldest first, so
 * most blocks outlive the thread that allocated them by many generations. */
static void *survivor(void *arg)
{
    static hak_item backlog[SURVIVOR_BACKLOG];
    survivor_result *res = arg;
    size_t held = 0, oldest = 0;
    hak_item it;
    while (hak_queue_pop(&handoff, &it)) {
        if (held == SURVIVOR_BACKLOG) {
            hak_item_verify_free(backlog[oldest]);
            res->freed++;
            backlog[oldest] = it;
            oldest = (oldest + 1) % SURVIVOR_BACKLOG;
        } else {
            backlog[held++] = it;
        }
    }
    for (size_t i = 0; i < held; i++) {
        hak_item_verify_free(backlog[i]);
        res->freed++;
    }
    return NULL;
}

static void churn_threads(void)
{
    /* (Long mode: a creep too slow for 2,000 threads shows in 100,000:
     * pages of each class mapped while others sat unseen in the reclaim
     * queue grew the secure variant's RSS 48 to 93 MiB.) */
    size_t threads = hak_scale(2000, 100000);
    survivor_result res = {0};
    hak_queue_init(&handoff, handoff_ring, sizeof handoff_ring / sizeof handoff_ring[0]);
    pthread_t surv = hak_thread_start(survivor, &res);

    /* The survivor's backlog is full after ~128 threads: from then on the
     * live set is steady, and freed memory of dead threads must be reused.
     * Every 256 threads hand over ~10 MiB, so a leak shows in a few steps. */
    enum { WARM_UP = 512 };
    size_t peak_rss = 0, base_rss = 0;
    for (size_t started = 0; started < threads; started += CONCURRENT) {
        pthread_t batch[CONCURRENT];
        for (size_t i = 0; i < CONCURRENT; i++)
            batch[i] = hak_thread_start(short_lived, (void *)(started + i));
        for (size_t i = 0; i < CONCURRENT; i++) pthread_join(batch[i], NULL);
        if (started % 256 == 0) {
            size_t rss = hak_rss_bytes();
            if (rss > peak_rss) peak_rss = rss;
            CHECK_RSS_BELOW(RSS_BOUND);
            if (started == WARM_UP) base_rss = rss;
            else if (started > WARM_UP)
                CHECK_RSS_GROWTH_BELOW(base_rss, 32 * MiB + (started - WARM_UP) * HAK_RSS_PER_THREAD_RUN);
        }
    }
    hak_queue_close(&handoff);
    pthread_join(surv, NULL);
    size_t total = (threads + CONCURRENT - 1) / CONCURRENT * CONCURRENT;
    CHECK_EQ_SIZE(res.freed, total * (BLOCKS_PER_THREAD / HANDOFF_EVERY));
    CHECK_RSS_BELOW(RSS_BOUND);
    printf("     %zu threads, %zu blocks handed over, peak RSS %zu MiB\n", total, res.freed,
           peak_rss / MiB);
}

/* Threads that exit while still owning live blocks, all freed afterwards by
 * the main thread; then a new generation of threads allocates again. */
enum { ORPHAN_THREADS = 64 };
static hak_item orphans[ORPHAN_THREADS][BLOCKS_PER_THREAD];

static void *allocate_and_exit(void *arg)
{
    size_t id = (size_t)arg;
    hak_rng rng = hak_rng_seed(100000 + id);
    for (size_t i = 0; i < BLOCKS_PER_THREAD; i++)
        orphans[id][i] = hak_item_new(hak_rng_size(&rng, 64 * KiB));
    return NULL;
}

static void orphaned_blocks_freed_by_main(void)
{
    /* A generation holds ~13 MiB: the pages of dead threads must serve the
     * next generation, so RSS stays within about one generation of the first. */
    size_t base_rss = 0;
    for (size_t gen = 0; gen < hak_scale(20, 200); gen++) {
        pthread_t t[ORPHAN_THREADS];
        for (size_t i = 0; i < ORPHAN_THREADS; i++)
            t[i] = hak_thread_start(allocate_and_exit, (void *)i);
        for (size_t i = 0; i < ORPHAN_THREADS; i++) pthread_join(t[i], NULL);
        for (size_t i = 0; i < ORPHAN_THREADS; i++)
            for (size_t j = 0; j < BLOCKS_PER_THREAD; j++) hak_item_verify_free(orphans[i][j]);
        if (gen == 0) {
            base_rss = hak_rss_bytes();
            continue;
        }
        /* Freed memory may stay resident for the purge delay, which adapts
         * up to 500 ms when each generation reuses what the last freed, and
         * the purger that returns it may wait for a core on a loaded machine:
         * give it up to 5 s to go (a page nobody reuses or frees never goes). */
        size_t growth = 16 * MiB + gen * ORPHAN_THREADS * HAK_RSS_PER_THREAD_RUN;
        for (int waited_ms = 0; hak_rss_bytes() >= base_rss + growth * HAK_RSS_SLACK && waited_ms < 5000;
             waited_ms += 10)
            usleep(10 * 1000);
        CHECK_RSS_GROWTH_BELOW(base_rss, growth);
    }
    CHECK_RSS_BELOW(RSS_BOUND);
}

int main(void)
{
    hak_test_begin("test_thread_churn");
    RUN_CASE(churn_threads);
    RUN_CASE(orphaned_blocks_freed_by_main);
    return 0;
}
