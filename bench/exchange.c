/* Remote-free exchange in rounds: in round r each of --threads threads
 * allocates --blocks blocks (log-uniform --min..--max) into its half r%2 of
 * an outbox, and for each one frees a block another thread allocated in the
 * previous round (thread id + 1 + r % (threads - 1), so every pair of threads
 * meets). Almost every free is remote, and it arrives while the owner is
 * allocating from the same pages. One barrier per round.
 *
 *   --threads=4 --blocks=2000 --rounds=200 --min=8 --max=16K --seed=1 */
#include "common.h"

static int threads;
static long blocks, rounds;
static size_t min_size, max_size;
static uint64_t seed;
static block_t *outbox; /* [thread][half][block] */
static pthread_barrier_t round_end;

static block_t *box(int thread, long half)
{
    return &outbox[((size_t)thread * 2 + (size_t)half) * (size_t)blocks];
}

typedef struct { int id; } worker_t;

static void *worker(void *arg)
{
    int id = ((worker_t *)arg)->id;
    rng_t rng = rng_seed(seed, (uint64_t)id + 1);
    for (long r = 0; r < rounds; r++) {
        block_t *mine = box(id, r % 2);
        block_t *theirs = r ? box((int)((id + 1 + (r - 1) % (threads - 1)) % threads), (r - 1) % 2) : NULL;
        for (long i = 0; i < blocks; i++) {
            block_alloc(&mine[i], rng_log_uniform(&rng, min_size, max_size), rng_next(&rng));
            if (theirs) block_free(&theirs[i]);
        }
        pthread_barrier_wait(&round_end);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    args_init(argc, argv);
    threads = (int)arg_long("threads", 4);
    blocks = arg_long("blocks", 2000);
    rounds = arg_long("rounds", 200);
    min_size = (size_t)arg_long("min", 8);
    max_size = (size_t)arg_long("max", 16 << 10);
    seed = (uint64_t)arg_long("seed", 1);
    args_done();
    if (threads < 2) die("--threads must be at least 2");

    outbox = xmalloc(sizeof *outbox * (size_t)threads * 2 * (size_t)blocks);
    pthread_barrier_init(&round_end, NULL, (unsigned)threads);
    worker_t *workers = xmalloc(sizeof *workers * (size_t)threads);
    for (int t = 0; t < threads; t++) workers[t].id = t;

    double start = now_sec();
    run_threads(threads, worker, workers, sizeof *workers);
    double secs = now_sec() - start;

    /* The last round's blocks are still live, in every thread's half. */
    for (int t = 0; t < threads; t++)
        for (long i = 0; i < blocks; i++) block_free(&box(t, (rounds - 1) % 2)[i]);
    free(outbox);
    free(workers);
    printf("ops=%ld secs=%.3f\n", (long)threads * rounds * blocks, secs);
    return 0;
}
