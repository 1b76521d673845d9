/* Realloc growth: a set of buffers grows side by side (round-robin, so a
 * buffer's neighbour is often in the way of growing in place) from --start
 * bytes to --max, either by a factor like a vector (--step=0: new size =
 * size * --factor / 100) or by small random appends of 1..step bytes like a
 * string builder. The content written so far is checked after every
 * realloc. Then all are freed; repeat.
 *
 *   --buffers=64 --start=8 --max=64K --step=64 --factor=200 --rounds=20 --seed=1 */
#include "common.h"

int main(int argc, char **argv)
{
    args_init(argc, argv);
    long buffers = arg_long("buffers", 64);
    size_t max_size = (size_t)arg_long("max", 64 << 10);
    size_t start_size = (size_t)arg_long("start", 8);
    size_t step = (size_t)arg_long("step", 64);
    size_t factor = (size_t)arg_long("factor", 200);
    long rounds = arg_long("rounds", 20);
    uint64_t seed = (uint64_t)arg_long("seed", 1);
    args_done();
    if (!step && factor <= 100) die("--factor must be above 100");

    rng_t rng = rng_seed(seed, 0);
    block_t *buf = xmalloc(sizeof *buf * (size_t)buffers);
    long reallocs = 0;
    double start = now_sec();
    for (long r = 0; r < rounds; r++) {
        for (long i = 0; i < buffers; i++) block_alloc(&buf[i], start_size, rng_next(&rng));
        for (long growing = buffers; growing > 0;) {
            growing = 0;
            for (long i = 0; i < buffers; i++) {
                block_t *b = &buf[i];
                if (b->size >= max_size) continue;
                size_t size = step ? b->size + rng_uniform(&rng, 1, step) : b->size * factor / 100;
                if (size <= b->size) size = b->size + 1;
                if (size > max_size) size = max_size;
                void *p = realloc(b->p, size);
                if (!p) die("realloc(%zu) returned NULL", size);
                check(p, b->size, b->key);
                b->p = p;
                b->size = size;
                stamp(p, size, b->key);
                reallocs++;
                growing++;
            }
        }
        for (long i = 0; i < buffers; i++) block_free(&buf[i]);
    }
    printf("ops=%ld secs=%.3f\n", reallocs, now_sec() - start);
    free(buf);
    return 0;
}
