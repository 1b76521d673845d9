/* The runner's verification pass (unmeasured, once per allocator): checks
 * what the workloads' sparse stamps cannot. Every block is filled in every
 * byte of its malloc_usable_size with a pattern of its own and checked in
 * every byte while all blocks are live, so two blocks that overlap by even
 * one byte, or a usable size that reaches into a neighbour, fail. Also
 * checks: malloc alignment (16, or the size's power of two below 16),
 * posix_memalign/aligned_alloc/memalign alignment up to 64 KiB, calloc
 * zeroes every byte (also of reused memory), realloc keeps the contents,
 * and blocks a thread allocated are intact for (and freeable by) another.
 * Exits 2 on the first failure, with what and where.
 *
 *   --blocks=20000 --seed=1 */
#include "common.h"
#include <malloc.h>

typedef struct {
    unsigned char *p;
    size_t size;   /* requested */
    size_t usable; /* malloc_usable_size, filled in full */
    uint64_t key;
} vblock_t;

static uint64_t pattern_word(uint64_t key, size_t word) { return mix64(key + word * 0x9e3779b97f4a7c15ULL); }

static void fill(vblock_t *b)
{
    size_t words = b->usable / 8, i;
    for (i = 0; i < words; i++) {
        uint64_t w = pattern_word(b->key, i);
        memcpy(b->p + 8 * i, &w, 8);
    }
    uint64_t w = pattern_word(b->key, i);
    memcpy(b->p + 8 * i, &w, b->usable % 8);
}

/* Checks bytes [0, len) of b against its pattern. */
static void check_prefix(const vblock_t *b, size_t len, const char *when)
{
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w = pattern_word(b->key, i / 8), got;
        memcpy(&got, b->p + i, 8);
        if (got != w) break;
    }
    for (uint64_t w = pattern_word(b->key, i / 8); i < len; i++)
        if (b->p[i] != (unsigned char)(w >> (8 * (i % 8))))
            die("%s: block %p (size %zu, usable %zu) differs at byte %zu: it overlaps another block "
                "or was changed while live", when, (void *)b->p, b->size, b->usable, i);
}

static void adopt(vblock_t *b, void *p, size_t size, size_t align, uint64_t key, const char *how)
{
    if (!p) die("%s(%zu) returned NULL", how, size);
    size_t need = align;
    if (!need) for (need = 16; need > 1 && need > size; need /= 2) {}
    if ((uintptr_t)p % need) die("%s(%zu) returned %p, not %zu-aligned", how, size, p, need);
    b->p = p;
    b->size = size;
    b->usable = malloc_usable_size(p);
    b->key = key;
    if (b->usable < size) die("%s(%zu): malloc_usable_size is %zu, below the size", how, size, b->usable);
}

static void check_zero_all(const vblock_t *b)
{
    for (size_t i = 0; i < b->size; i++)
        if (b->p[i]) die("calloc(%zu) returned %p, not zero at byte %zu", b->size, (void *)b->p, i);
}

static size_t pick_size(rng_t *rng, long i)
{
    if (i % 2000 == 1999) return rng_log_uniform(rng, 1 << 20, 40 << 20); /* large and huge */
    if (i % 50 == 49) return rng_log_uniform(rng, 16 << 10, 1 << 20);
    return rng_log_uniform(rng, 1, 16 << 10);
}

/* Allocates into b by one of the entry points, chosen by the RNG. */
static void allocate(vblock_t *b, rng_t *rng, long i)
{
    size_t size = pick_size(rng, i);
    uint64_t key = rng_next(rng);
    size_t align = (size_t)16 << rng_below(rng, 13); /* 16 B .. 64 KiB */
    void *p = NULL;
    switch (rng_below(rng, 6)) {
    case 0:
        adopt(b, calloc(1, size), size, 0, key, "calloc");
        check_zero_all(b);
        break;
    case 1:
        if (posix_memalign(&p, align, size)) p = NULL;
        adopt(b, p, size, align, key, "posix_memalign");
        break;
    case 2:
        size = (size + align - 1) & ~(align - 1);
        adopt(b, aligned_alloc(align, size), size, align, key, "aligned_alloc");
        break;
    case 3:
        adopt(b, memalign(align, size), size, align, key, "memalign");
        break;
    default:
        adopt(b, malloc(size), size, 0, key, "malloc");
        break;
    }
    fill(b);
}

static void check_all(vblock_t *blocks, long n, const char *when)
{
    for (long i = 0; i < n; i++) check_prefix(&blocks[i], blocks[i].usable, when);
}

typedef struct { vblock_t *blocks; long n; uint64_t stream; } batch_t;

static uint64_t seed;

static void *allocate_batch(void *arg)
{
    batch_t *batch = arg;
    rng_t rng = rng_seed(seed, batch->stream);
    for (long i = 0; i < batch->n; i++) allocate(&batch->blocks[i], &rng, i);
    return NULL;
}

int main(int argc, char **argv)
{
    args_init(argc, argv);
    long n = arg_long("blocks", 20000);
    seed = (uint64_t)arg_long("seed", 1);
    args_done();

    rng_t rng = rng_seed(seed, 0);
    /* The first half is allocated on another thread, the second here. */
    vblock_t *blocks = xmalloc(sizeof *blocks * (size_t)n);
    batch_t other = { blocks, n / 2, 1 };
    run_threads(1, allocate_batch, &other, 0);
    for (long i = n / 2; i < n; i++) allocate(&blocks[i], &rng, i);
    check_all(blocks, n, "all live");

    /* Free a random half (the other thread's blocks among them), refill it
     * from the freed memory, check everything again. */
    for (long i = 0; i < n; i += 1 + (long)rng_below(&rng, 2)) {
        free(blocks[i].p);
        allocate(&blocks[i], &rng, i);
    }
    check_all(blocks, n, "after free and reuse");

    /* realloc every block to a new size, grown or shrunk; the old contents
     * up to the smaller size must survive. */
    for (long i = 0; i < n; i++) {
        vblock_t *b = &blocks[i];
        size_t size = rng_below(&rng, 2) ? b->size + rng_log_uniform(&rng, 1, b->size + 64) : b->size / 2 + 1;
        vblock_t moved = *b;
        void *p = realloc(b->p, size);
        adopt(&moved, p, size, 0, b->key, "realloc");
        check_prefix(&moved, b->size < size ? b->size : size, "after realloc");
        *b = moved;
        fill(b);
    }
    check_all(blocks, n, "after realloc");

    for (long i = 0; i < n; i++) free(blocks[i].p);
    free(blocks);
    printf("verified_blocks=%ld\n", n);
    return 0;
}
