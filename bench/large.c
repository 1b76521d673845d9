/* Large blocks: a few live slots, each op frees a random one and allocates a
 * log-uniform size between --min and --max into it. Stamping touches every
 * 4 KiB page, so an allocator pays for the page faults of fresh mappings and
 * gains from reusing (or cheaply remapping) memory.
 *
 *   --slots=8 --ops=2000 --min=64K --max=32M --seed=1 */
#include "common.h"

int main(int argc, char **argv)
{
    args_init(argc, argv);
    long slots = arg_long("slots", 8);
    long ops = arg_long("ops", 2000);
    size_t min_size = (size_t)arg_long("min", 64 << 10);
    size_t max_size = (size_t)arg_long("max", 32 << 20);
    uint64_t seed = (uint64_t)arg_long("seed", 1);
    args_done();

    rng_t rng = rng_seed(seed, 0);
    block_t *slot = xmalloc(sizeof *slot * (size_t)slots);
    double start = now_sec();
    for (long s = 0; s < slots; s++)
        block_alloc(&slot[s], rng_log_uniform(&rng, min_size, max_size), rng_next(&rng));
    for (long i = 0; i < ops; i++) {
        block_t *b = &slot[rng_below(&rng, (uint64_t)slots)];
        block_free(b);
        block_alloc(b, rng_log_uniform(&rng, min_size, max_size), rng_next(&rng));
    }
    for (long s = 0; s < slots; s++) block_free(&slot[s]);
    printf("ops=%ld secs=%.3f\n", ops, now_sec() - start);
    free(slot);
    return 0;
}
