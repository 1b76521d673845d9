/* Memory return: allocate a large working set of small and mid blocks, free
 * all of it in random order, then keep doing small alloc/free work (giving
 * an allocator that returns memory lazily the calls to do it), and report
 * the resident set size then (rss_after_free_kb) and after the program has
 * idled 100 ms, 1 s and 5 s more (rss_after_free_100ms_kb, _1s_kb, _5s_kb),
 * so an allocator that returns memory on a timer is seen doing it. work_s
 * is the time up to the first report, without the idling.
 * Nothing here calls malloc_trim: the metric is what the allocator gives
 * back on its own.
 *
 *   --total=512M --min=16 --max=4096 --work=4M --seed=1 */
#include "common.h"

int main(int argc, char **argv)
{
    args_init(argc, argv);
    size_t total = (size_t)arg_long("total", 512L << 20);
    size_t min_size = (size_t)arg_long("min", 16);
    size_t max_size = (size_t)arg_long("max", 4096);
    long work = arg_long("work", 4L << 20);
    uint64_t seed = (uint64_t)arg_long("seed", 1);
    args_done();

    rng_t rng = rng_seed(seed, 0);
    double start = now_sec();
    /* Upper bound on the block count: every block is at least min_size. */
    size_t capacity = total / min_size + 1, count = 0, bytes = 0;
    block_t *blocks = xmalloc(sizeof *blocks * capacity);
    while (bytes < total) {
        size_t size = rng_log_uniform(&rng, min_size, max_size);
        block_alloc(&blocks[count++], size, rng_next(&rng));
        bytes += size;
    }
    long rss_full_kb = rss_kb();

    for (size_t i = count - 1; i > 0; i--) { /* Fisher-Yates shuffle */
        size_t j = rng_below(&rng, i + 1);
        block_t t = blocks[i];
        blocks[i] = blocks[j];
        blocks[j] = t;
    }
    for (size_t i = 0; i < count; i++) block_free(&blocks[i]);
    free(blocks);

    block_t small[64] = { 0 };
    for (long i = 0; i < work; i++) {
        block_t *b = &small[rng_below(&rng, 64)];
        if (b->p) block_free(b);
        else block_alloc(b, rng_log_uniform(&rng, 16, 256), rng_next(&rng));
    }
    for (int i = 0; i < 64; i++)
        if (small[i].p) block_free(&small[i]);

    double work_s = now_sec() - start;
    printf("rss_full_kb=%ld rss_after_free_kb=%ld work_s=%.3f\n", rss_full_kb, rss_kb(), work_s);
    static const struct { const char *name; long ms; } idle[] = { { "100ms", 100 }, { "1s", 1000 }, { "5s", 5000 } };
    long slept_ms = 0;
    for (int i = 0; i < 3; i++) {
        long ms = idle[i].ms - slept_ms;
        struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
        while (nanosleep(&ts, &ts)) {}
        slept_ms = idle[i].ms;
        printf("rss_after_free_%s_kb=%ld\n", idle[i].name, rss_kb());
    }
    return 0;
}
