/* Aligned and zeroed allocation mix: --slots slots, each op frees a random
 * slot if full, else fills it through one of malloc, calloc, posix_memalign,
 * aligned_alloc or memalign (calloc with odds --calloc in 100, the aligned
 * three together --aligned in 100), log-uniform --min..--max bytes,
 * alignment a power of two from 16 to 4 KiB (one in 64 up to 64 KiB). Each
 * aligned block's address is checked; each calloc'd block is checked to be
 * zero in every byte (the freed blocks it may reuse were stamped).
 *
 *   --slots=2000 --ops=1M --min=8 --max=32K --calloc=40 --aligned=30 --seed=1 */
#include "common.h"
#include <malloc.h>

static void check_all_zero(const unsigned char *b, size_t size)
{
    uint64_t acc = 0;
    size_t i = 0;
    for (; i + 8 <= size; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        acc |= w;
    }
    for (; i < size; i++) acc |= b[i];
    if (acc) die("calloc'd block %p (size %zu) is not all zero", (const void *)b, size);
}

int main(int argc, char **argv)
{
    args_init(argc, argv);
    long slots = arg_long("slots", 2000);
    long ops = arg_long("ops", 1L << 20);
    size_t min_size = (size_t)arg_long("min", 8);
    size_t max_size = (size_t)arg_long("max", 32 << 10);
    long calloc_odds = arg_long("calloc", 40);
    long aligned_odds = arg_long("aligned", 30);
    uint64_t seed = (uint64_t)arg_long("seed", 1);
    args_done();

    rng_t rng = rng_seed(seed, 0);
    block_t *slot = xmalloc(sizeof *slot * (size_t)slots);
    memset(slot, 0, sizeof *slot * (size_t)slots);
    long calls[3] = { 0 }; /* malloc, calloc, aligned */
    double start = now_sec();
    for (long i = 0; i < ops; i++) {
        block_t *b = &slot[rng_below(&rng, (uint64_t)slots)];
        if (b->p) {
            block_free(b);
            continue;
        }
        size_t size = rng_log_uniform(&rng, min_size, max_size);
        long kind = (long)rng_below(&rng, 100);
        void *p = NULL;
        if (kind < calloc_odds) {
            p = calloc(1, size);
            if (!p) die("calloc(1, %zu) returned NULL", size);
            check_all_zero(p, size);
            calls[1]++;
        } else if (kind < calloc_odds + aligned_odds) {
            size_t align = (size_t)16 << rng_below(&rng, rng_below(&rng, 64) ? 9 : 13);
            switch (rng_below(&rng, 3)) {
            case 0: if (posix_memalign(&p, align, size)) p = NULL; break;
            case 1: p = aligned_alloc(align, (size + align - 1) & ~(align - 1)); break;
            default: p = memalign(align, size); break;
            }
            if (!p) die("aligned allocation of %zu bytes at %zu returned NULL", size, align);
            if ((uintptr_t)p % align) die("block %p of %zu bytes is not %zu-aligned", p, size, align);
            calls[2]++;
        } else {
            p = xmalloc(size);
            calls[0]++;
        }
        b->p = p;
        b->size = size;
        b->key = rng_next(&rng);
        stamp(p, size, b->key);
    }
    for (long s = 0; s < slots; s++)
        if (slot[s].p) block_free(&slot[s]);
    printf("malloc=%ld calloc=%ld aligned=%ld secs=%.3f\n", calls[0], calls[1], calls[2], now_sec() - start);
    free(slot);
    return 0;
}
