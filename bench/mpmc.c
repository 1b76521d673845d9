/* Many producers to many consumers: --producers threads allocate and stamp
 * blocks of log-uniform sizes and push them, in batches of BATCH, into one
 * bounded queue; --consumers threads pop batches, check every block and
 * free it. No consumer is a producer, so every free is cross-thread, and a
 * page's blocks come back from several threads at once. Batches keep the
 * queue's lock a small share of the time.
 *
 *   --producers=3 --consumers=2 --min=16 --max=16K --objects=2M --seed=1
 *   (--objects in total, split between the producers) */
#include "batchq.h"

static batchq_t queue;
static long per_producer;
static size_t min_size, max_size;
static uint64_t seed;

typedef struct { int id; int producer; long freed; } role_t;

static void *run_role(void *arg)
{
    role_t *role = arg;
    if (role->producer) {
        rng_t rng = rng_seed(seed, (uint64_t)role->id + 1);
        batch_t b = { 0 };
        for (long i = 0; i < per_producer; i++) {
            block_alloc(&b.item[b.count++], rng_log_uniform(&rng, min_size, max_size), rng_next(&rng));
            if (b.count == BATCH || i == per_producer - 1) {
                batchq_push(&queue, &b);
                b.count = 0;
            }
        }
        batchq_producer_done(&queue);
    } else {
        role->freed = batchq_free_all(&queue);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    args_init(argc, argv);
    int producers = (int)arg_long("producers", 3);
    int consumers = (int)arg_long("consumers", 2);
    min_size = (size_t)arg_long("min", 16);
    max_size = (size_t)arg_long("max", 16 << 10);
    long objects = arg_long("objects", 2L << 20);
    seed = (uint64_t)arg_long("seed", 1);
    args_done();
    if (producers < 1 || consumers < 1) die("need at least one producer and one consumer");

    per_producer = objects / producers;
    batchq_init(&queue, BATCHQ_MAX, producers);
    int n = producers + consumers;
    role_t *roles = xmalloc(sizeof *roles * (size_t)n);
    for (int i = 0; i < n; i++) roles[i] = (role_t){ .id = i, .producer = i < producers };

    double start = now_sec();
    run_threads(n, run_role, roles, sizeof *roles);
    double secs = now_sec() - start;
    long freed = 0;
    for (int i = producers; i < n; i++) freed += roles[i].freed;
    if (freed != per_producer * producers)
        die("consumers freed %ld blocks of the %ld produced", freed, per_producer * producers);
    printf("ops=%ld secs=%.3f\n", freed, secs);
    free(roles);
    return 0;
}
