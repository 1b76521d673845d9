/* False sharing (in the manner of cache-scratch): the main thread allocates
 * one small object per worker back to back, so they likely share a cache
 * line, and hands them out. Each worker writes its object many times, frees
 * it, and then repeatedly allocates its own object of the same size and
 * writes that. An allocator that gives a worker memory on a cache line
 * another thread is writing (e.g. by reusing the freed foreign object) makes
 * every write a cache-line transfer.
 *
 *   --threads=2 --size=8 --rounds=1000 --writes=20000 --seed=1 */
#include "common.h"

typedef struct {
    unsigned char *object;
    uint64_t key;
} worker_t;

static long rounds, writes;
static size_t size;

/* Bytes start at a key-derived value and are incremented `writes` times. */
static void write_and_check(volatile unsigned char *object, uint64_t key)
{
    for (size_t j = 0; j < size; j++) object[j] = (unsigned char)(key >> (8 * (j % 8)));
    for (long w = 0; w < writes; w++)
        for (size_t j = 0; j < size; j++) object[j]++;
    for (size_t j = 0; j < size; j++)
        if (object[j] != (unsigned char)((key >> (8 * (j % 8))) + (uint64_t)writes))
            die("object %p was overwritten at byte %zu", (void *)object, j);
}

static void *worker(void *arg)
{
    worker_t *w = arg;
    rng_t rng = rng_seed(w->key, 0);
    unsigned char *object = w->object;
    for (long r = 0; r < rounds; r++) {
        write_and_check(object, rng_next(&rng));
        free(object);
        object = xmalloc(size);
    }
    free(object);
    return NULL;
}

int main(int argc, char **argv)
{
    args_init(argc, argv);
    int threads = (int)arg_long("threads", 2);
    size = (size_t)arg_long("size", 8);
    rounds = arg_long("rounds", 1000);
    writes = arg_long("writes", 20000);
    uint64_t seed = (uint64_t)arg_long("seed", 1);
    args_done();

    worker_t *workers = xmalloc(sizeof *workers * (size_t)threads);
    for (int t = 0; t < threads; t++) {
        workers[t].object = xmalloc(size);
        workers[t].key = mix64(seed + (uint64_t)t);
    }
    double start = now_sec();
    run_threads(threads, worker, workers, sizeof *workers);
    printf("ops=%ld secs=%.3f\n", (long)threads * rounds * writes, now_sec() - start);
    free(workers);
    return 0;
}
