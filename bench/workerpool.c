/* Worker pool with a reclaimer: --producers threads each keep --slots live
 * blocks of --size bytes and keep replacing a random one; every replaced
 * block goes, in batches of BATCH, through one bounded queue to a single
 * reclaimer thread that checks and frees it and never allocates. So every
 * free is cross-thread and comes from a thread with no allocation of its
 * own (the shape where some allocators strand freed memory).
 *
 * The main thread samples the resident set every 5 ms while the workers
 * run; over the second half of the run (the steady state) it reports the
 * largest sample (rss_steady_kb), the live set (live_kb: the producers'
 * blocks plus what the queue can hold in flight) and their ratio
 * (rss_per_live, the figure the allocator should keep low).
 *
 *   --producers=16 --slots=4096 --size=592 --ops=400K --seed=1
 *   (--ops replacements per producer) */
#include "batchq.h"

#include <stdatomic.h>

#define QUEUE 32 /* batches */

static batchq_t queue;
static long ops_per_producer, slots;
static size_t block_size;
static uint64_t seed;
static atomic_long ops_done;

typedef struct { int id; long freed; } role_t;

static void *producer(void *arg)
{
    role_t *role = arg;
    rng_t rng = rng_seed(seed, (uint64_t)role->id + 1);
    block_t *mine = xmalloc(sizeof *mine * (size_t)slots);
    for (long i = 0; i < slots; i++) block_alloc(&mine[i], block_size, rng_next(&rng));
    batch_t b = { 0 };
    for (long i = 0; i < ops_per_producer; i++) {
        block_t *slot = &mine[rng_below(&rng, (uint64_t)slots)];
        b.item[b.count++] = *slot;
        block_alloc(slot, block_size, rng_next(&rng));
        if (b.count == BATCH) {
            batchq_push(&queue, &b);
            b.count = 0;
            atomic_fetch_add_explicit(&ops_done, BATCH, memory_order_relaxed);
        }
    }
    if (b.count) batchq_push(&queue, &b);
    for (long i = 0; i < slots; i++) block_free(&mine[i]);
    free(mine);
    batchq_producer_done(&queue);
    return NULL;
}

static void *reclaimer(void *arg)
{
    role_t *role = arg;
    role->freed = batchq_free_all(&queue);
    return NULL;
}

int main(int argc, char **argv)
{
    args_init(argc, argv);
    int producers = (int)arg_long("producers", 16);
    slots = arg_long("slots", 4096);
    block_size = (size_t)arg_long("size", 592);
    ops_per_producer = arg_long("ops", 400L << 10);
    seed = (uint64_t)arg_long("seed", 1);
    args_done();
    if (producers < 1 || slots < 1 || block_size < 1) die("need producers, slots and a size");

    batchq_init(&queue, QUEUE, producers);
    int n = producers + 1;
    role_t *roles = xmalloc(sizeof *roles * (size_t)n);
    pthread_t *tids = xmalloc(sizeof *tids * (size_t)n);
    for (int i = 0; i < n; i++) {
        roles[i] = (role_t){ .id = i };
        if (pthread_create(&tids[i], NULL, i < producers ? producer : reclaimer, &roles[i]))
            die("pthread_create failed");
    }

    /* Sample until the producers are done; keep the samples of the second
     * half of the replacements. */
    long total_ops = ops_per_producer * producers, steady_kb = 0;
    double start = now_sec();
    while (atomic_load_explicit(&ops_done, memory_order_relaxed) < total_ops - (long)producers * BATCH) {
        long rss = rss_kb();
        if (atomic_load_explicit(&ops_done, memory_order_relaxed) >= total_ops / 2 && rss > steady_kb) steady_kb = rss;
        struct timespec ts = { 0, 5000000L };
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < n; i++) pthread_join(tids[i], NULL);
    double secs = now_sec() - start;
    if (roles[producers].freed != total_ops)
        die("the reclaimer freed %ld blocks of the %ld replaced", roles[producers].freed, total_ops);
    if (steady_kb == 0) steady_kb = rss_kb();   /* a run too short to sample */
    long live_kb = (long)(((size_t)producers * (size_t)slots + (size_t)QUEUE * BATCH) * block_size / 1024);
    printf("ops=%ld secs=%.3f live_kb=%ld rss_steady_kb=%ld rss_per_live=%.3f\n",
           total_ops, secs, live_kb, steady_kb, (double)steady_kb / (double)live_kb);
    free(tids);
    free(roles);
    return 0;
}
