/* Random alloc/free over a fixed set of slots: each op picks a random slot
 * and frees its block if it holds one, else allocates a log-uniform random
 * size into it, so about half the slots are live at any time. Every thread
 * has its own slots (all frees are same-thread). Used for the small band
 * (8 B - 1 KiB) and the 1 - 8 KiB "mid" band.
 *
 *   --threads=1 --min=8 --max=1024 --slots=800 --ops=20M --seed=1
 *   (--ops is per thread) */
#include "common.h"

static long slots, ops;
static size_t min_size, max_size;
static uint64_t seed;

typedef struct { int id; } worker_t;

static void *worker(void *arg)
{
    rng_t rng = rng_seed(seed, (uint64_t)((worker_t *)arg)->id);
    block_t *array = calloc((size_t)slots, sizeof *array);
    if (!array) die("out of memory");
    for (long i = 0; i < ops; i++) {
        block_t *b = &array[rng_below(&rng, (uint64_t)slots)];
        if (b->p) block_free(b);
        else block_alloc(b, rng_log_uniform(&rng, min_size, max_size), rng_next(&rng));
    }
    for (long s = 0; s < slots; s++)
        if (array[s].p) block_free(&array[s]);
    free(array);
    return NULL;
}

int main(int argc, char **argv)
{
    args_init(argc, argv);
    int threads = (int)arg_long("threads", 1);
    min_size = (size_t)arg_long("min", 8);
    max_size = (size_t)arg_long("max", 1024);
    slots = arg_long("slots", 800);
    ops = arg_long("ops", 20L << 20);
    seed = (uint64_t)arg_long("seed", 1);
    args_done();

    worker_t *workers = xmalloc(sizeof *workers * (size_t)threads);
    for (int t = 0; t < threads; t++) workers[t].id = t;
    double start = now_sec();
    run_threads(threads, worker, workers, sizeof *workers);
    printf("ops=%ld secs=%.3f\n", (long)threads * ops, now_sec() - start);
    free(workers);
    return 0;
}
