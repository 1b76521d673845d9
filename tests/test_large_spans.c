/* Blocks above the size classes, freed by several threads at once. Large
 * blocks share the arenas' segments with pages: threads allocate, hand over
 * and free large blocks (1-8 MiB) and medium pages in one arena (ctest sets
 * HAKMEM_ARENAS=1), so frees of neighbouring spans race to coalesce under
 * the arena lock. Giant blocks (aligned beyond a segment) are mappings of
 * their own, whose frees race on the list of them (and in the secure
 * variant on the ring of the last ones freed, huge.c). Every block is
 * verified. */
#include "hak_test.h"

enum { THREADS = 3, LIVE = 6 };

static hak_item handoff[THREADS];           /* one block passed to the next thread */
static pthread_mutex_t handoff_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t block_size(hak_rng *rng)
{
    return hak_rng_next(rng) % 4 ? hak_rng_range(rng, 1 * MiB + 1, 8 * MiB) : hak_rng_range(rng, 40 * KiB, 1 * MiB);
}

static void *churn(void *arg)
{
    size_t id = (size_t)arg;
    hak_rng rng = hak_rng_seed(id + 1);
    hak_item live[LIVE] = {{0}};
    size_t rounds = hak_scale(200, 3000);
    for (size_t i = 0; i < rounds; i++) {
        hak_item *slot = &live[hak_rng_next(&rng) % LIVE];
        if (slot->ptr) hak_item_verify_free(*slot);
        *slot = hak_item_new(block_size(&rng));
        if (i % 8 == 0) {   /* pass one on: its free will come from another thread */
            pthread_mutex_lock(&handoff_lock);
            hak_item theirs = handoff[(id + 1) % THREADS];
            handoff[(id + 1) % THREADS] = *slot;
            pthread_mutex_unlock(&handoff_lock);
            *slot = (hak_item){0};
            if (theirs.ptr) hak_item_verify_free(theirs);
        }
    }
    for (size_t s = 0; s < LIVE; s++)
        if (live[s].ptr) hak_item_verify_free(live[s]);
    return NULL;
}

static void threads_share_one_arena(void)
{
    pthread_t t[THREADS];
    for (size_t i = 0; i < THREADS; i++) t[i] = hak_thread_start(churn, (void *)i);
    for (size_t i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    for (size_t i = 0; i < THREADS; i++)
        if (handoff[i].ptr) hak_item_verify_free(handoff[i]);
}

/* Each thread maps, fills, checks and frees giant blocks: in the secure
 * variant a free made its block inaccessible after putting it in the ring
 * of retired blocks, where the frees of other threads could push it out and
 * unmap it (and its descriptor) first: a crash within milliseconds. */
static void *giant_churn(void *arg)
{
    hak_rng rng = hak_rng_seed((size_t)arg + 1);
    size_t rounds = hak_scale(300, 5000);
    for (size_t i = 0; i < rounds; i++) {
        size_t size = hak_rng_range(&rng, 1, 64 * KiB);
        uint64_t seed = hak_rng_next(&rng);
        char *p = aligned_alloc(32 * MiB, size);
        CHECK(p != NULL);
        CHECK_ALIGNED(p, 32 * MiB);
        hak_fill(p, size, seed);
        CHECK_PATTERN(p, size, seed);
        free(p);
    }
    return NULL;
}

static void giant_blocks_freed_at_once(void)
{
    enum { GIANT_THREADS = 6 };   /* (more than the secure variant's ring of 8 can hold between two frees) */
    pthread_t t[GIANT_THREADS];
    for (size_t i = 0; i < GIANT_THREADS; i++) t[i] = hak_thread_start(giant_churn, (void *)i);
    for (size_t i = 0; i < GIANT_THREADS; i++) pthread_join(t[i], NULL);
}

int main(void)
{
    hak_test_begin("test_large_spans");
    RUN_CASE(threads_share_one_arena);
    RUN_CASE(giant_blocks_freed_at_once);
    return 0;
}
