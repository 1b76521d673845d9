/* calloc must return zeroed memory even when it reuses blocks that were just
 * filled with 0xAB and freed: an allocator that skips zeroing for "fresh"
 * memory it wrongly believes untouched fails here. */
#include "hak_test.h"

/* Dirties `count` blocks of `size`, frees them, then callocs the same sizes
 * (the likeliest to reuse those blocks) and checks every byte is zero. */
static void dirty_free_then_calloc(size_t size, size_t count)
{
    void *blocks[256];
    CHECK(count <= 256);
    for (int order = 0; order < 2; order++) {
        for (size_t i = 0; i < count; i++) {
            blocks[i] = malloc(size);
            CHECKF(blocks[i] != NULL, "malloc(%zu)", size);
            memset(blocks[i], 0xAB, malloc_usable_size(blocks[i]));
        }
        /* free in allocation order, then in reverse order */
        for (size_t i = 0; i < count; i++) free(blocks[order ? count - 1 - i : i]);
        for (size_t i = 0; i < count; i++) {
            blocks[i] = calloc(1, size);
            CHECKF(blocks[i] != NULL, "calloc(1, %zu)", size);
            size_t off = hak_first_not(blocks[i], size, 0);
            CHECKF(off == SIZE_MAX, "calloc(1, %zu) = %p: byte %zu is 0x%02x", size, blocks[i],
                   off, ((unsigned char *)blocks[i])[off]);
        }
        for (size_t i = 0; i < count; i++) free(blocks[i]);
    }
}

static void small_sizes(void)
{
    for (size_t size = 1; size <= 1024; size += (size < 128 ? 1 : 37)) dirty_free_then_calloc(size, 200);
}

static void medium_sizes(void)
{
    const size_t sizes[] = {1025, 2048, 4000, 4096, 8192, 12345, 32 * KiB, 64 * KiB + 1,
                            128 * KiB - 16, 128 * KiB, 256 * KiB, 512 * KiB + 7, 1 * MiB - 1};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) dirty_free_then_calloc(sizes[i], 64);
}

static void large_sizes(void)
{
    const size_t sizes[] = {1 * MiB, 2 * MiB, 2 * MiB + 1, 3 * MiB + 17, 8 * MiB, 33 * MiB};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) dirty_free_then_calloc(sizes[i], 4);
}

/* calloc(n, size) with both factors varying; the product is what must be
 * zeroed and usable. */
static void count_times_size(void)
{
    const size_t counts[] = {1, 2, 3, 7, 100, 1000, 4096};
    const size_t sizes[] = {1, 3, 8, 24, 100, 1000, 4096};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            size_t total = counts[c] * sizes[s];
            void *dirty = malloc(total);
            CHECK(dirty != NULL);
            memset(dirty, 0xAB, total);
            free(dirty);
            unsigned char *p = calloc(counts[c], sizes[s]);
            CHECK(p != NULL);
            CHECK(malloc_usable_size(p) >= total);
            CHECKF(hak_first_not(p, total, 0) == SIZE_MAX, "calloc(%zu, %zu) not zeroed",
                   counts[c], sizes[s]);
            memset(p, 0xCD, total);
            free(p);
        }
}

/* calloc with a zero factor returns a unique pointer that free accepts. */
static void zero_count_or_size(void)
{
    void *a = calloc(0, 16), *b = calloc(16, 0), *c = calloc(0, 0);
    CHECK(a != NULL && b != NULL && c != NULL);
    CHECK(a != b && b != c && a != c);
    free(a);
    free(b);
    free(c);
}

int main(void)
{
    hak_test_begin("test_calloc");
    RUN_CASE(small_sizes);
    RUN_CASE(medium_sizes);
    RUN_CASE(large_sizes);
    RUN_CASE(count_times_size);
    RUN_CASE(zero_count_or_size);
    return 0;
}
