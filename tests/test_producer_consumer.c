/* Cross-thread frees: producers allocate and fill blocks, consumers verify and
 * free them. Every round hands over 64 MiB; between rounds the producers go
 * idle until the consumers have freed everything, then allocation resumes.
 * An allocator that never reuses remotely freed memory grows by 64 MiB a
 * round and trips the RSS bound. */
#include "hak_test.h"

#include <stdatomic.h>

enum { PRODUCERS = 2, CONSUMERS = 2, QUEUE_CAPACITY = 4096 };

#define ROUND_BYTES (64 * MiB)
#define WARM_UP_ROUNDS 3
#define RSS_BOUND (512 * MiB)
#define RETURN_WITHIN 5000   /* ms a round's freed memory may take to be reused or go (hak_wait_rss_below) */

static hak_queue queue;
static hak_item queue_ring[QUEUE_CAPACITY];
static pthread_barrier_t round_start, round_produced;
static size_t rounds;
static atomic_size_t items_produced, items_freed;

static void *producer(void *arg)
{
    size_t id = (size_t)arg;
    hak_rng rng = hak_rng_seed(1000 + id);
    for (size_t round = 0; round < rounds; round++) {
        pthread_barrier_wait(&round_start);
        for (size_t bytes = 0; bytes < ROUND_BYTES / PRODUCERS;) {
            hak_item it = hak_item_new(hak_rng_size(&rng, 1 * MiB));
            bytes += it.size;
            atomic_fetch_add(&items_produced, 1);
            hak_queue_push(&queue, it);
        }
        /* Idle until the next round: only the consumers free meanwhile. */
        pthread_barrier_wait(&round_produced);
    }
    return NULL;
}

static void *consumer(void *arg)
{
    (void)arg;
    hak_item it;
    while (hak_queue_pop(&queue, &it)) {
        hak_item_verify_free(it);
        atomic_fetch_add(&items_freed, 1);
    }
    return NULL;
}

static void wait_until_all_freed(void)
{
    while (atomic_load(&items_freed) != atomic_load(&items_produced))
        usleep(1000);
}

static void producers_consumers_rounds(void)
{
    pthread_t producers[PRODUCERS], consumers[CONSUMERS];
    rounds = hak_scale(12, 100);
    hak_queue_init(&queue, queue_ring, QUEUE_CAPACITY);
    pthread_barrier_init(&round_start, NULL, PRODUCERS + 1);
    pthread_barrier_init(&round_produced, NULL, PRODUCERS + 1);
    for (size_t i = 0; i < PRODUCERS; i++) producers[i] = hak_thread_start(producer, (void *)i);
    for (size_t i = 0; i < CONSUMERS; i++) consumers[i] = hak_thread_start(consumer, NULL);

    size_t peak_rss = 0, base_rss = 0;
    for (size_t round = 0; round < rounds; round++) {
        pthread_barrier_wait(&round_start);
        pthread_barrier_wait(&round_produced);
        wait_until_all_freed();
        size_t rss = hak_rss_bytes();
        if (rss > peak_rss) peak_rss = rss;
        CHECK_RSS_BELOW(RSS_BOUND);
        /* After a warm-up (allocators settle at different levels), a round's
         * memory must serve the next: growth beyond one round's worth fails,
         * so a leak of 8 MiB a round shows within the default 12 rounds. */
        if (round == WARM_UP_ROUNDS) base_rss = rss;
        else if (round > WARM_UP_ROUNDS) CHECK_RSS_GROWTH_WITHIN(base_rss, ROUND_BYTES, RETURN_WITHIN);
    }

    hak_queue_close(&queue);
    for (size_t i = 0; i < PRODUCERS; i++) pthread_join(producers[i], NULL);
    for (size_t i = 0; i < CONSUMERS; i++) pthread_join(consumers[i], NULL);
    CHECK(atomic_load(&items_freed) == atomic_load(&items_produced));
    CHECK(atomic_load(&items_produced) > rounds * 1000);
    printf("     %zu rounds of %zu MiB, %zu blocks, peak RSS %zu MiB\n", rounds,
           ROUND_BYTES / MiB, atomic_load(&items_produced), peak_rss / MiB);
}

/* The same handover, main thread to one consumer, one block size at a time:
 * a size class whose remote frees are never gathered stands out. */
static void single_size_rounds(void)
{
    static const size_t sizes[] = {16, 48, 1000, 4096, 40000, 300000};
    static hak_item ring[QUEUE_CAPACITY];
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t count = 32 * MiB / sizes[s] < 50000 ? 32 * MiB / sizes[s] : 50000;
        hak_queue_init(&queue, ring, QUEUE_CAPACITY);
        atomic_store(&items_produced, 0);
        atomic_store(&items_freed, 0);
        pthread_t c = hak_thread_start(consumer, NULL);
        size_t base_rss = 0;
        for (size_t round = 0; round < hak_scale(6, 40); round++) {
            for (size_t i = 0; i < count; i++) {
                atomic_fetch_add(&items_produced, 1);
                hak_queue_push(&queue, hak_item_new(sizes[s]));
            }
            wait_until_all_freed();
            CHECK_RSS_BELOW(RSS_BOUND);
            /* Each round hands over up to 32 MiB of this size: a class whose
             * remote frees are not reused grows by that much per round. */
            if (round == 0) base_rss = hak_rss_bytes();
            else CHECK_RSS_GROWTH_WITHIN(base_rss, 16 * MiB, RETURN_WITHIN);
        }
        hak_queue_close(&queue);
        pthread_join(c, NULL);
        CHECK(atomic_load(&items_freed) == atomic_load(&items_produced));
    }
}

int main(void)
{
    hak_test_begin("test_producer_consumer");
    RUN_CASE(producers_consumers_rounds);
    RUN_CASE(single_size_rounds);
    return 0;
}
