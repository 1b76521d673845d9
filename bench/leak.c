/* A leaking program: random alloc/free in --slots slots of log-uniform
 * --min..--max blocks, where one block in --leak_every is dropped instead of
 * freed (its pointer kept aside only to check it at the end, never freed),
 * until --leak bytes are leaked. The leaked blocks stay scattered over
 * pages that otherwise empty out, so peak RSS shows how much memory a
 * never-freed block pins. Exits with everything leaked still allocated.
 *
 *   --slots=4000 --min=16 --max=16K --leak=48M --leak_every=8 --seed=1 */
#include "common.h"

int main(int argc, char **argv)
{
    args_init(argc, argv);
    long slots = arg_long("slots", 4000);
    size_t min_size = (size_t)arg_long("min", 16);
    size_t max_size = (size_t)arg_long("max", 16 << 10);
    size_t leak_target = (size_t)arg_long("leak", 48L << 20);
    long leak_every = arg_long("leak_every", 8);
    uint64_t seed = (uint64_t)arg_long("seed", 1);
    args_done();

    rng_t rng = rng_seed(seed, 0);
    block_t *slot = xmalloc(sizeof *slot * (size_t)slots);
    memset(slot, 0, sizeof *slot * (size_t)slots);
    size_t leaked_cap = leak_target / min_size + 1, leaked_count = 0, leaked_bytes = 0;
    block_t *leaked = xmalloc(sizeof *leaked * leaked_cap);
    long ops = 0;
    double start = now_sec();
    while (leaked_bytes < leak_target) {
        block_t *b = &slot[rng_below(&rng, (uint64_t)slots)];
        ops++;
        if (!b->p) {
            block_alloc(b, rng_log_uniform(&rng, min_size, max_size), rng_next(&rng));
        } else if (rng_below(&rng, (uint64_t)leak_every) == 0) {
            leaked[leaked_count++] = *b;
            leaked_bytes += b->size;
            b->p = NULL;
        } else {
            block_free(b);
        }
    }
    for (size_t i = 0; i < leaked_count; i++) check(leaked[i].p, leaked[i].size, leaked[i].key);
    for (long s = 0; s < slots; s++)
        if (slot[s].p) check(slot[s].p, slot[s].size, slot[s].key);
    printf("ops=%ld leaked_blocks=%zu secs=%.3f\n", ops, leaked_count, now_sec() - start);
    return 0; /* nothing freed: the point of the workload */
}
