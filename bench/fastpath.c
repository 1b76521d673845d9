/* Fast-path microbenchmark, mainly for instruction counts (bench/instr.py):
 *   --mode=single: one small block malloc'd and freed repeatedly;
 *   --mode=batch:  allocate 1000 blocks of varying sizes (16 - 512 B), then
 *                  free all 1000; repeat.
 * --pairs counts malloc/free pairs in total. The sizes are drawn before the
 * loop so the RNG is not part of the measured instructions.
 *
 *   --mode=single --pairs=1M --size=32 --seed=1 */
#include "common.h"

#define BATCH 1000

int main(int argc, char **argv)
{
    args_init(argc, argv);
    const char *mode = arg_str("mode", "single");
    long pairs = arg_long("pairs", 1L << 20);
    size_t single_size = (size_t)arg_long("size", 32);
    uint64_t seed = (uint64_t)arg_long("seed", 1);
    args_done();

    double start = now_sec();
    if (strcmp(mode, "single") == 0) {
        for (long i = 0; i < pairs; i++) {
            uint64_t *p = xmalloc(single_size);
            *p = (uint64_t)i;
            escape(p);
            if (*p != (uint64_t)i) die("corrupt block %p", (void *)p);
            free(p);
        }
    } else if (strcmp(mode, "batch") == 0) {
        rng_t rng = rng_seed(seed, 0);
        static size_t size[BATCH];
        static uint64_t *block[BATCH];
        for (int j = 0; j < BATCH; j++) size[j] = rng_uniform(&rng, 16, 512);
        for (long done = 0; done < pairs; done += BATCH) {
            int n = pairs - done < BATCH ? (int)(pairs - done) : BATCH;
            for (int j = 0; j < n; j++) {
                block[j] = xmalloc(size[j]);
                *block[j] = (uint64_t)j ^ (uint64_t)done;
            }
            for (int j = 0; j < n; j++) {
                if (*block[j] != ((uint64_t)j ^ (uint64_t)done)) die("corrupt block %p", (void *)block[j]);
                free(block[j]);
            }
        }
    } else {
        die("--mode must be single or batch, not %s", mode);
    }
    printf("ops=%ld secs=%.3f\n", pairs, now_sec() - start);
    return 0;
}
