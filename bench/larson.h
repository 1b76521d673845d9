/* The Larson-style server loop shared by larson.c (malloc/free) and
 * sizeddel.cc (operator new / sized operator delete): each thread owns an
 * array of live blocks and repeatedly frees a random slot and allocates a
 * new random-size block into it; after every round the arrays move one
 * thread on (thread i takes the array thread i+1 worked on), so the first
 * frees after a hand-off are cross-thread frees.
 *
 * The including file defines LARSON_ALLOC(block, size, key),
 * LARSON_FREE(block) and LARSON_ROUNDS (the default of --rounds), then
 * includes this after common.h.
 *
 *   --threads=2 --min=8 --max=1024 --slots=1000 --rounds=N --ops=20000 --seed=1
 *   (--ops is per thread per round) */
static int threads, rounds;
static long slots, ops;
static size_t min_size, max_size;
static uint64_t seed;
static block_t **arrays;
static pthread_barrier_t round_end;

typedef struct { int id; } worker_t;

static void *worker(void *arg)
{
    int id = ((worker_t *)arg)->id;
    rng_t rng = rng_seed(seed, (uint64_t)id + 1);
    for (int r = 0; r < rounds; r++) {
        block_t *array = arrays[(id + r) % threads];
        for (long i = 0; i < ops; i++) {
            block_t *b = &array[rng_below(&rng, (uint64_t)slots)];
            LARSON_FREE(b);
            LARSON_ALLOC(b, rng_uniform(&rng, min_size, max_size), rng_next(&rng));
        }
        pthread_barrier_wait(&round_end);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    args_init(argc, argv);
    threads = (int)arg_long("threads", 2);
    min_size = (size_t)arg_long("min", 8);
    max_size = (size_t)arg_long("max", 1024);
    slots = arg_long("slots", 1000);
    rounds = (int)arg_long("rounds", LARSON_ROUNDS);
    ops = arg_long("ops", 20000);
    seed = (uint64_t)arg_long("seed", 1);
    args_done();

    rng_t rng = rng_seed(seed, 0);
    arrays = (block_t **)xmalloc(sizeof *arrays * (size_t)threads);
    for (int t = 0; t < threads; t++) {
        arrays[t] = (block_t *)xmalloc(sizeof **arrays * (size_t)slots);
        for (long s = 0; s < slots; s++)
            LARSON_ALLOC(&arrays[t][s], rng_uniform(&rng, min_size, max_size), rng_next(&rng));
    }
    pthread_barrier_init(&round_end, NULL, (unsigned)threads);
    worker_t *workers = (worker_t *)xmalloc(sizeof *workers * (size_t)threads);
    for (int t = 0; t < threads; t++) workers[t].id = t;

    double start = now_sec();
    run_threads(threads, worker, workers, sizeof *workers);
    double secs = now_sec() - start;

    for (int t = 0; t < threads; t++) {
        for (long s = 0; s < slots; s++) LARSON_FREE(&arrays[t][s]);
        free(arrays[t]);
    }
    free(arrays);
    free(workers);
    printf("ops=%ld secs=%.3f\n", (long)threads * rounds * ops, secs);
    return 0;
}
