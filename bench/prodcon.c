/* Producer/consumer: in each pair, the producer allocates and stamps blocks
 * and passes them through a bounded single-producer/single-consumer ring to
 * the consumer, which checks and frees them. Every free is a cross-thread
 * free. The consumer knows each block's size and key by replaying the
 * producer's RNG stream, so only the pointer travels through the ring. Each
 * side publishes its index every PUBLISH blocks and re-reads the other's
 * only when its cached copy says the ring is full (or empty), so the queue
 * costs little next to the allocator.
 *
 *   --pairs=1 --min=16 --max=512 --objects=12M --seed=1  (--objects per pair) */
#include "common.h"
#include <sched.h>
#include <stdatomic.h>

#define RING 4096   /* power of two */
#define PUBLISH 256 /* indices are published every PUBLISH blocks */

typedef struct {
    _Alignas(64) _Atomic size_t head; /* written by the consumer */
    _Alignas(64) _Atomic size_t tail; /* written by the producer */
    _Alignas(64) void *slot[RING];
    int id;
} pair_t;

static long objects;
static size_t min_size, max_size;
static uint64_t seed;

static void next_block(rng_t *rng, size_t *size, uint64_t *key)
{
    *size = rng_log_uniform(rng, min_size, max_size);
    *key = rng_next(rng);
}

static void *producer(void *arg)
{
    pair_t *q = arg;
    rng_t rng = rng_seed(seed, (uint64_t)q->id);
    size_t tail = 0, head = 0; /* head: last seen consumer position */
    for (long i = 0; i < objects; i++) {
        size_t size;
        uint64_t key;
        next_block(&rng, &size, &key);
        void *p = xmalloc(size);
        stamp(p, size, key);
        while (tail - head == RING) {
            head = atomic_load_explicit(&q->head, memory_order_acquire);
            if (tail - head == RING) sched_yield();
        }
        q->slot[tail++ % RING] = p;
        if (tail % PUBLISH == 0 || i == objects - 1)
            atomic_store_explicit(&q->tail, tail, memory_order_release);
    }
    return NULL;
}

static void *consumer(void *arg)
{
    pair_t *q = arg;
    rng_t rng = rng_seed(seed, (uint64_t)q->id);
    size_t head = 0, tail = 0; /* tail: last seen producer position */
    for (long i = 0; i < objects; i++) {
        size_t size;
        uint64_t key;
        next_block(&rng, &size, &key);
        while (tail == head) {
            tail = atomic_load_explicit(&q->tail, memory_order_acquire);
            if (tail == head) sched_yield();
        }
        void *p = q->slot[head++ % RING];
        if (head % PUBLISH == 0) atomic_store_explicit(&q->head, head, memory_order_release);
        check(p, size, key);
        free(p);
    }
    return NULL;
}

/* Thread 2i produces into pair i, thread 2i+1 consumes from it. */
static pair_t *pairs;
typedef struct { int index; } role_t;

static void *run_role(void *arg)
{
    int index = ((role_t *)arg)->index;
    pair_t *q = &pairs[index / 2];
    return index % 2 ? consumer(q) : producer(q);
}

int main(int argc, char **argv)
{
    args_init(argc, argv);
    int npairs = (int)arg_long("pairs", 1);
    min_size = (size_t)arg_long("min", 16);
    max_size = (size_t)arg_long("max", 512);
    objects = arg_long("objects", 12L << 20);
    seed = (uint64_t)arg_long("seed", 1);
    args_done();

    if (posix_memalign((void **)&pairs, 64, sizeof *pairs * (size_t)npairs)) die("out of memory");
    role_t *roles = xmalloc(sizeof *roles * 2 * (size_t)npairs);
    for (int i = 0; i < npairs; i++) {
        atomic_init(&pairs[i].head, 0);
        atomic_init(&pairs[i].tail, 0);
        pairs[i].id = i;
    }
    for (int i = 0; i < 2 * npairs; i++) roles[i].index = i;

    double start = now_sec();
    run_threads(2 * npairs, run_role, roles, sizeof *roles);
    printf("ops=%ld secs=%.3f\n", (long)npairs * objects, now_sec() - start);
    free(roles);
    free(pairs);
    return 0;
}
