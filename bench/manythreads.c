/* Many live threads, few blocks each: --threads threads each allocate and
 * stamp --blocks blocks of --min..--max bytes (uniform), then all wait
 * until every one has filled. The main thread then reads the resident set
 * (rss_held_kb) and reports it with the live set (live_kb) before the
 * threads check and free their blocks and exit. What it shows is the
 * allocator's cost per thread: a heap, pages or caches that a thread
 * holding a few blocks pays for (thread stacks cost every allocator the
 * same).
 *
 *   --threads=1000 --blocks=10 --min=16 --max=3072 --seed=1 */
#include "common.h"

static long blocks;
static size_t min_size, max_size;
static uint64_t seed;
static pthread_barrier_t filled, measured;

typedef struct { long id; size_t live; } lane_t;

static void *holder(void *arg)
{
    lane_t *lane = arg;
    rng_t rng = rng_seed(seed, (uint64_t)lane->id);
    block_t held[64];
    for (long i = 0; i < blocks; i++) {
        block_alloc(&held[i], rng_uniform(&rng, min_size, max_size), rng_next(&rng));
        lane->live += held[i].size;
    }
    pthread_barrier_wait(&filled);
    pthread_barrier_wait(&measured);
    for (long i = 0; i < blocks; i++) block_free(&held[i]);
    return NULL;
}

int main(int argc, char **argv)
{
    args_init(argc, argv);
    long threads = arg_long("threads", 1000);
    blocks = arg_long("blocks", 10);
    min_size = (size_t)arg_long("min", 16);
    max_size = (size_t)arg_long("max", 3072);
    seed = (uint64_t)arg_long("seed", 1);
    args_done();
    if (threads < 1 || blocks < 1 || blocks > 64 || min_size < 1 || max_size < min_size)
        die("need --threads >= 1, 1 <= --blocks <= 64, 1 <= --min <= --max");

    lane_t *lanes = xmalloc(sizeof *lanes * (size_t)threads);
    pthread_t *tids = xmalloc(sizeof *tids * (size_t)threads);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);   /* 1000 default stacks would reserve 8 GiB */
    pthread_barrier_init(&filled, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&measured, NULL, (unsigned)threads + 1);
    double t0 = now_sec();
    for (long i = 0; i < threads; i++) {
        lanes[i] = (lane_t){ .id = i };
        if (pthread_create(&tids[i], &attr, holder, &lanes[i])) die("pthread_create failed (thread %ld)", i);
    }
    pthread_barrier_wait(&filled);
    long held = rss_kb();
    pthread_barrier_wait(&measured);
    for (long i = 0; i < threads; i++) pthread_join(tids[i], NULL);
    double secs = now_sec() - t0;

    size_t live = 0;
    for (long i = 0; i < threads; i++) live += lanes[i].live;
    printf("rss_held_kb=%ld live_kb=%zu rss_per_live=%.3f secs=%.3f\n",
           held, live / 1024, (double)held * 1024 / (double)live, secs);
    free(tids);
    free(lanes);
    return 0;
}
