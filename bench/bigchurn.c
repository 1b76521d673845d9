/* Repeated large-block churn: --slots live blocks of --min..--max bytes
 * (uniform), each op replacing a random one with a fresh calloc'd block, as
 * a program does that keeps a few big zero-initialised buffers (images,
 * matrices, value-initialised `new char[n]()`). Each new block is checked to
 * be zero where it will be stamped, then stamped (every page touched).
 * Rewards reusing freed large memory cheaply; an allocator that maps and
 * unmaps every block pays for page faults, one that reuses pays for zeroing.
 *
 *   --slots=20 --ops=1000 --min=5M --max=25M --seed=1 */
#include "common.h"

int main(int argc, char **argv)
{
    args_init(argc, argv);
    long slots = arg_long("slots", 20);
    long ops = arg_long("ops", 1000);
    size_t min_size = (size_t)arg_long("min", 5L << 20);
    size_t max_size = (size_t)arg_long("max", 25L << 20);
    uint64_t seed = (uint64_t)arg_long("seed", 1);
    args_done();

    rng_t rng = rng_seed(seed, 0);
    block_t *slot = xmalloc(sizeof *slot * (size_t)slots);
    double start = now_sec();
    for (long i = 0; i < slots + ops; i++) {
        block_t *b = &slot[i < slots ? i : (long)rng_below(&rng, (uint64_t)slots)];
        if (i >= slots) block_free(b);
        b->size = rng_uniform(&rng, min_size, max_size);
        b->key = rng_next(&rng);
        b->p = calloc(1, b->size);
        if (!b->p) die("calloc(1, %zu) returned NULL", b->size);
        check_zero(b->p, b->size);
        stamp(b->p, b->size, b->key);
    }
    for (long s = 0; s < slots; s++) block_free(&slot[s]);
    printf("ops=%ld secs=%.3f\n", ops, now_sec() - start);
    free(slot);
    return 0;
}
