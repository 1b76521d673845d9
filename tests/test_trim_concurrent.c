/* malloc_trim(0) (hak_collect) while other threads allocate, free, hand
 * blocks to each other and exit. A trim frees the empty pages of its own
 * heap and of the shared heap, sweeps the published pages of every thread
 * (adopting those with no live block), purges every arena's free spans and
 * unmaps the huge cache, all while their owners use them: no live block may
 * be lost, moved or cleared, and a zeroed block handed out after a purge
 * must still read as zero. Each worker's blocks are filled with a pattern
 * keyed by address and size, checked by whichever thread frees them. */
#include "hak_test.h"

#include <stdatomic.h>

enum { WORKERS = 3, SLOTS = 256, ROUNDS = 3 };

static atomic_bool stop_trimming;
static _Atomic(size_t) trims;

/* Blocks handed from one worker (and round) to another; the taker checks
 * and frees. */
static hak_item handed[SLOTS];
static pthread_mutex_t handed_lock[SLOTS];

static hak_item swap_handed(size_t h, hak_item item)
{
    pthread_mutex_lock(&handed_lock[h]);
    hak_item taken = handed[h];
    handed[h] = item;
    pthread_mutex_unlock(&handed_lock[h]);
    return taken;
}

static void trim_now(void)
{
#if defined(HAK_TEST_STANDARD_NAMES) || defined(HAK_TEST_LIBC)
    (void)malloc_trim(0);   /* (glibc says 0 when it found nothing to release) */
    struct mallinfo2 mi = mallinfo2();
    CHECK(mi.uordblks <= mi.arena + mi.hblkhd);   /* in use within what is mapped */
#else
    hak_collect();
#endif
    atomic_fetch_add(&trims, 1);
}

static void *trimmer(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop_trimming)) {
        trim_now();
        sched_yield();
    }
    return NULL;
}

/* Mostly small and medium blocks, some large and a few huge, some zeroed. */
static hak_item new_block(hak_rng *rng)
{
    unsigned roll = (unsigned)(hak_rng_next(rng) % 1000);
    size_t size = roll < 700   ? hak_rng_range(rng, 1, 1024)
                  : roll < 960 ? hak_rng_range(rng, 1025, 200 * KiB)
                  : roll < 998 ? hak_rng_range(rng, 200 * KiB, 2 * MiB)
                               : hak_rng_range(rng, 33 * MiB, 36 * MiB);
    if (roll % 4 == 0) {
        unsigned char *p = calloc(1, size);
        CHECKF(p != NULL, "calloc(1, %zu)", size);
        size_t off = hak_first_not(p, size, 0);
        CHECKF(off == SIZE_MAX, "calloc(1, %zu) = %p: byte %zu is 0x%02x after trims", size, (void *)p, off, p[off]);
        hak_fill(p, size, hak_seed_of(p, size));
        return (hak_item){p, size};
    }
    return hak_item_new(size);
}

typedef struct {
    int index;
    int round;
} worker_arg;

static void *worker(void *varg)
{
    const worker_arg *arg = varg;
    hak_rng rng = hak_rng_seed((uint64_t)(arg->round * WORKERS + arg->index) + 7);
    hak_item mine[SLOTS] = {{0}};
    for (size_t i = 0; i < 1500; i++) {
        size_t k = (size_t)(hak_rng_next(&rng) % SLOTS);
        if (mine[k].ptr) hak_item_verify_free(mine[k]);
        mine[k] = new_block(&rng);
        if (i % 8 == 0) {   /* hand one over, take whatever was there */
            hak_item taken = swap_handed((size_t)(hak_rng_next(&rng) % SLOTS), mine[k]);
            mine[k] = (hak_item){0};
            if (taken.ptr) hak_item_verify_free(taken);
        }
    }
    for (size_t k = 0; k < SLOTS; k++)
        if (mine[k].ptr) hak_item_verify_free(mine[k]);
    return NULL;
}

/* Workers come and go (their heaps given up, pages abandoned and adopted)
 * while the trimmer runs; the blocks they handed over outlive them. */
static void trim_while_threads_allocate(void)
{
    for (size_t h = 0; h < SLOTS; h++) pthread_mutex_init(&handed_lock[h], NULL);
    pthread_t trim_thread = hak_thread_start(trimmer, NULL);
    worker_arg args[ROUNDS][WORKERS];
    for (int round = 0; round < ROUNDS; round++) {
        pthread_t threads[WORKERS];
        for (int w = 0; w < WORKERS; w++) {
            args[round][w] = (worker_arg){w, round};
            threads[w] = hak_thread_start(worker, &args[round][w]);
        }
        for (int w = 0; w < WORKERS; w++) pthread_join(threads[w], NULL);
        trim_now();   /* this thread too, between rounds */
    }
    atomic_store(&stop_trimming, true);
    pthread_join(trim_thread, NULL);
    for (size_t h = 0; h < SLOTS; h++) {
        hak_item taken = swap_handed(h, (hak_item){0});
        if (taken.ptr) hak_item_verify_free(taken);
    }
    printf("     %zu trims meanwhile\n", atomic_load(&trims));
    CHECK(atomic_load(&trims) > ROUNDS);
    /* Everything still works afterwards. */
    hak_rng rng = hak_rng_seed(99);
    for (int i = 0; i < 100; i++) hak_item_verify_free(new_block(&rng));
}

int main(void)
{
    hak_test_begin("test_trim_concurrent");
    RUN_CASE(trim_while_threads_allocate);
    printf("all passed\n");
    return 0;
}
