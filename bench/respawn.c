/* Thread respawn: --generations times, --threads threads are created and
 * joined. Thread i of a generation checks and frees the long-lived blocks
 * thread i of the previous generation left behind (frees into the heap of
 * a thread that has exited), does --work alloc/free ops of its own in a
 * small working set, then leaves --keep new long-lived blocks for the next
 * generation and exits. The live set stays bounded (threads x keep blocks),
 * so peak RSS shows whether memory of exited threads is reused.
 *
 *   --threads=4 --generations=300 --keep=2000 --work=20000 --min=16 --max=4K --seed=1 */
#include "common.h"

#define WORKING_SET 256

static long keep, work;
static size_t min_size, max_size;
static uint64_t seed;

typedef struct {
    block_t *legacy; /* keep blocks from the previous generation, or none */
    int has_legacy;
    uint64_t stream;
} lane_t;

static void *generation_thread(void *arg)
{
    lane_t *lane = arg;
    rng_t rng = rng_seed(seed, lane->stream);
    if (lane->has_legacy)
        for (long i = 0; i < keep; i++) block_free(&lane->legacy[i]);
    block_t set[WORKING_SET] = { { 0 } };
    for (long i = 0; i < work; i++) {
        block_t *b = &set[rng_below(&rng, WORKING_SET)];
        if (b->p) block_free(b);
        else block_alloc(b, rng_log_uniform(&rng, min_size, max_size), rng_next(&rng));
    }
    for (int i = 0; i < WORKING_SET; i++)
        if (set[i].p) block_free(&set[i]);
    for (long i = 0; i < keep; i++)
        block_alloc(&lane->legacy[i], rng_log_uniform(&rng, min_size, max_size), rng_next(&rng));
    lane->has_legacy = 1;
    return NULL;
}

int main(int argc, char **argv)
{
    args_init(argc, argv);
    int threads = (int)arg_long("threads", 4);
    long generations = arg_long("generations", 300);
    keep = arg_long("keep", 2000);
    work = arg_long("work", 20000);
    min_size = (size_t)arg_long("min", 16);
    max_size = (size_t)arg_long("max", 4096);
    seed = (uint64_t)arg_long("seed", 1);
    args_done();

    lane_t *lanes = xmalloc(sizeof *lanes * (size_t)threads);
    for (int t = 0; t < threads; t++)
        lanes[t] = (lane_t){ .legacy = xmalloc(sizeof(block_t) * (size_t)keep), .has_legacy = 0 };

    double start = now_sec();
    for (long g = 0; g < generations; g++) {
        for (int t = 0; t < threads; t++) lanes[t].stream = (uint64_t)(g * threads + t + 1);
        run_threads(threads, generation_thread, lanes, sizeof *lanes);
    }
    double secs = now_sec() - start;

    for (int t = 0; t < threads; t++) {
        for (long i = 0; i < keep; i++) block_free(&lanes[t].legacy[i]);
        free(lanes[t].legacy);
    }
    free(lanes);
    printf("threads_created=%ld secs=%.3f\n", generations * threads, secs);
    return 0;
}
