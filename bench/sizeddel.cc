/* C++ sized delete in a Larson-style server: like larson.c (each thread
 * frees a random slot of its array and allocates a new block into it, arrays
 * handed one thread on after every round), but blocks come from
 * `operator new(n)` and go back through `operator delete(p, n)`, the sized
 * form C++14 compilers emit for `delete` of a complete type. An allocator
 * that exports the sized form may skip looking the size up.
 *
 *   --threads=2 --min=8 --max=1024 --slots=1000 --rounds=100 --ops=20000 --seed=1 */
#include "common.h"
#include <new>

static int threads, rounds;
static long slots, ops;
static size_t min_size, max_size;
static uint64_t seed;
static block_t **arrays;
static pthread_barrier_t round_end;

static void new_block(block_t *b, size_t size, uint64_t key)
{
    b->p = ::operator new(size);
    b->size = size;
    b->key = key;
    stamp(b->p, size, key);
}

static void delete_block(block_t *b)
{
    check(b->p, b->size, b->key);
    ::operator delete(b->p, b->size);
    b->p = nullptr;
}

struct worker_t { int id; };

static void *worker(void *arg)
{
    int id = static_cast<worker_t *>(arg)->id;
    rng_t rng = rng_seed(seed, (uint64_t)id + 1);
    for (int r = 0; r < rounds; r++) {
        block_t *array = arrays[(id + r) % threads];
        for (long i = 0; i < ops; i++) {
            block_t *b = &array[rng_below(&rng, (uint64_t)slots)];
            delete_block(b);
            new_block(b, rng_uniform(&rng, min_size, max_size), rng_next(&rng));
        }
        pthread_barrier_wait(&round_end);
    }
    return nullptr;
}

int main(int argc, char **argv)
{
    args_init(argc, argv);
    threads = (int)arg_long("threads", 2);
    min_size = (size_t)arg_long("min", 8);
    max_size = (size_t)arg_long("max", 1024);
    slots = arg_long("slots", 1000);
    rounds = (int)arg_long("rounds", 100);
    ops = arg_long("ops", 20000);
    seed = (uint64_t)arg_long("seed", 1);
    args_done();

    rng_t rng = rng_seed(seed, 0);
    arrays = new block_t *[threads];
    for (int t = 0; t < threads; t++) {
        arrays[t] = new block_t[slots];
        for (long s = 0; s < slots; s++)
            new_block(&arrays[t][s], rng_uniform(&rng, min_size, max_size), rng_next(&rng));
    }
    pthread_barrier_init(&round_end, nullptr, (unsigned)threads);
    worker_t *workers = new worker_t[threads];
    for (int t = 0; t < threads; t++) workers[t].id = t;

    double start = now_sec();
    run_threads(threads, worker, workers, sizeof *workers);
    double secs = now_sec() - start;

    for (int t = 0; t < threads; t++) {
        for (long s = 0; s < slots; s++) delete_block(&arrays[t][s]);
        delete[] arrays[t];
    }
    delete[] arrays;
    delete[] workers;
    printf("ops=%ld secs=%.3f\n", (long)threads * rounds * ops, secs);
    return 0;
}
