/* realloc chains that check every byte: growth by one byte, doubling up to
 * 64 MiB, shrinking back down, moves forced by neighbouring allocations,
 * vectors grown side by side into huge blocks; large and huge blocks
 * shrunk give back what falls off;
 * realloc(NULL, n) and realloc(p, 0) as glibc defines them. */
#include "hak_test.h"

#define SEED 0x5eedull /* the pattern is keyed by offset only: blocks move */

/* Grows or shrinks p (holding `old` pattern bytes) to `size`, checks that
 * the common prefix survived and fills the rest. */
static void *resize_checked(void *p, size_t old, size_t size)
{
    void *q = realloc(p, size);
    CHECKF(q != NULL, "realloc(%p, %zu) failed", p, size);
    CHECK(malloc_usable_size(q) >= size);
    size_t keep = old < size ? old : size;
    CHECK_PATTERN(q, keep, SEED);
    if (size > keep) hak_fill(q, size, SEED); /* rewrites the prefix identically */
    return q;
}

static void grow_by_one_byte(void)
{
    const size_t limit = hak_scale(4 * KiB + 64, 32 * KiB);
    void *p = NULL;
    for (size_t n = 1; n <= limit; n++) p = resize_checked(p, n - 1, n);
    for (size_t n = limit; n > 1; n--) p = resize_checked(p, n, n - 1);
    CHECK_PATTERN(p, 1, SEED);
    free(p);
}

static void double_up_then_shrink_down(void)
{
    const size_t top = hak_scale(64 * MiB, 256 * MiB);
    void *p = NULL;
    size_t n = 0;
    for (size_t next = 1; next <= top; next *= 2) {
        p = resize_checked(p, n, next);
        n = next;
    }
    for (size_t next = n / 2; next >= 1; next /= 2) {
        p = resize_checked(p, n, next);
        n = next;
    }
    CHECK_PATTERN(p, n, SEED);
    free(p);
}

/* Sizes just around the usual class and page boundaries, in both
 * directions, with a fresh block between steps so that growing in place is
 * often impossible and the block must move. */
static void boundary_sizes_with_neighbours(void)
{
    static const size_t sizes[] = {8, 16, 24, 31, 32, 33, 64, 127, 128, 129, 500, 1024, 1025,
                                   4095, 4096, 4097, 8191, 8193, 32768, 65535, 65537,
                                   131072 + 1, 262144, 1 * MiB - 1, 1 * MiB + 1, 4 * MiB + 3,
                                   16 * MiB + 1};
    enum { N = sizeof sizes / sizeof sizes[0] };
    hak_item blockers[2 * N];
    size_t nblock = 0;
    void *p = NULL;
    size_t n = 0;
    for (size_t i = 0; i < N; i++) {
        p = resize_checked(p, n, sizes[i]);
        n = sizes[i];
        blockers[nblock++] = hak_item_new(n);
    }
    for (size_t i = N; i-- > 0;) {
        p = resize_checked(p, n, sizes[i]);
        n = sizes[i];
        blockers[nblock++] = hak_item_new(n / 2 + 1);
    }
    free(p);
    for (size_t i = 0; i < nblock; i++) hak_item_verify_free(blockers[i]);
}

/* Buffers grown side by side by a factor of 1.3, as vectors grow, from
 * 256 KiB through medium, large and huge blocks (a large block that grows
 * again gets a mapping of its own, resized or moved by mremap), each one in
 * the way of the others growing in place; then shrunk by halves. Every
 * byte is checked at every step. */
static void vectors_grow_into_huge_blocks(void)
{
    enum { BUFFERS = 3 };
    const size_t top = hak_scale(40 * MiB, 160 * MiB);
    void *p[BUFFERS] = {0};
    size_t n[BUFFERS] = {0};
    for (size_t next = 256 * KiB; next <= top; next = next * 13 / 10)
        for (int i = 0; i < BUFFERS; i++) {
            p[i] = resize_checked(p[i], n[i], next + (size_t)i * 4097);
            n[i] = next + (size_t)i * 4097;
        }
    for (int i = 0; i < BUFFERS; i++) {
        for (size_t next = n[i] / 2; next >= 256 * KiB; next /= 2) {
            p[i] = resize_checked(p[i], n[i], next);
            n[i] = next;
        }
        CHECK_PATTERN(p[i], n[i], SEED);
        free(p[i]);
    }
}

/* A block from posix_memalign keeps its contents through realloc. */
static void realloc_of_aligned_block(void)
{
    const size_t aligns[] = {64, 4096, 2 * MiB};
    for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
        void *p = NULL;
        CHECK(posix_memalign(&p, aligns[i], 1000) == 0);
        hak_fill(p, 1000, SEED);
        p = resize_checked(p, 1000, 300 * KiB);
        p = resize_checked(p, 300 * KiB, 100);
        free(p);
    }
}

static void realloc_null_is_malloc(void)
{
    const size_t sizes[] = {0, 1, 17, 4096, 1 * MiB, 8 * MiB};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *p = realloc(NULL, sizes[i]);
        CHECKF(p != NULL, "realloc(NULL, %zu)", sizes[i]);
        CHECK(malloc_usable_size(p) >= sizes[i]);
        hak_fill(p, sizes[i], SEED);
        CHECK_PATTERN(p, sizes[i], SEED);
        free(p);
    }
}

/* glibc (malloc(3), "realloc"): realloc(p, 0) with p != NULL is free(p) and
 * returns NULL. A leak there would show in RSS: 200k x 4 KiB = 800 MiB. */
static void realloc_to_zero_frees(void)
{
    const size_t rounds = hak_scale(200000, 2000000);
    size_t rss_before = hak_rss_bytes();
    for (size_t i = 0; i < rounds; i++) {
        size_t size = (i % 3 == 0) ? 4096 : (i % 3 == 1) ? 24 : 100000;
        char *p = malloc(size);
        CHECK(p != NULL);
        p[0] = p[size - 1] = 1;
        CHECK(realloc(p, hak_opaque(0)) == NULL);
    }
    size_t rss_after = hak_rss_bytes();
    size_t grown = rss_after > rss_before ? rss_after - rss_before : 0;
    CHECKF(grown < 128 * MiB, "RSS grew by %zu MiB: realloc(p, 0) leaks?", grown / MiB);
}

/* A large or huge block realloc shrinks, by less than half, gives back
 * what falls off (glibc and jemalloc do; a buffer grown by doubling and
 * then cut to its length would keep up to twice that resident). The
 * default variant cuts it in place; the secure one moves it (secure.c). */
static void shrunk_blocks_give_back_their_tail(void)
{
    const size_t sizes[] = {8 * MiB, 24 * MiB, 96 * MiB};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t size = sizes[i], cut = size / 8 * 5;
        char *p = malloc(size);
        CHECK(p != NULL);
        hak_fill(p, size, SEED);
        size_t rss_full = hak_rss_bytes();
        char *q = resize_checked(p, size, cut);
#ifndef HAK_TEST_SECURE
        CHECKF(q == p, "a %zu MiB block shrunk to %zu MiB moved", size / MiB, cut / MiB);
        CHECKF(malloc_usable_size(q) < cut + 64 * KiB, "a %zu MiB block shrunk to %zu MiB still holds %zu bytes",
               size / MiB, cut / MiB, malloc_usable_size(q));
#endif
        malloc_trim(0);   /* (a large block's tail is purged after the delay) */
        size_t rss_cut = hak_rss_bytes(), given = rss_full > rss_cut ? rss_full - rss_cut : 0;
        CHECKF(given >= (size - cut) / 10 * 9, "a %zu MiB block shrunk to %zu MiB gave back %zu KiB of %zu",
               size / MiB, cut / MiB, given / KiB, (size - cut) / KiB);
        q = resize_checked(q, cut, size);   /* and grows back */
        free(q);
    }
}

int main(void)
{
    hak_test_begin("test_realloc");
    RUN_CASE(grow_by_one_byte);
    RUN_CASE(double_up_then_shrink_down);
    RUN_CASE(boundary_sizes_with_neighbours);
    RUN_CASE(vectors_grow_into_huge_blocks);
    RUN_CASE(realloc_of_aligned_block);
    RUN_CASE(realloc_null_is_malloc);
    RUN_CASE(realloc_to_zero_frees);
    RUN_CASE(shrunk_blocks_give_back_their_tail);
    return 0;
}
