/* Aligned allocation: posix_memalign, aligned_alloc and memalign for every
 * power of two from sizeof(void *) to 2 MiB and beyond, sizes around the
 * alignment, the whole usable size written, in the main thread and in
 * young threads (whose first blocks come from the shared heap, with classes
 * of its own); bad alignments rejected; valloc and pvalloc page-aligned and
 * page-rounded. */
#include "hak_test.h"

enum { API_POSIX_MEMALIGN, API_ALIGNED_ALLOC, API_MEMALIGN, API_COUNT };
static const char *const api_names[API_COUNT] = {"posix_memalign", "aligned_alloc", "memalign"};

static void *aligned_by(int api, size_t align, size_t size)
{
    void *p = NULL;
    switch (api) {
    case API_POSIX_MEMALIGN: {
        int rc = posix_memalign(&p, align, size);
        CHECKF(rc == 0, "posix_memalign(%zu, %zu) = %d", align, size, rc);
        break;
    }
    case API_ALIGNED_ALLOC: p = aligned_alloc(align, size); break;
    case API_MEMALIGN: p = memalign(align, size); break;
    }
    CHECKF(p != NULL, "%s(%zu, %zu) returned NULL", api_names[api], align, size);
    CHECKF(((uintptr_t)p & (align - 1)) == 0, "%s(%zu, %zu) = %p is misaligned", api_names[api],
           align, size, p);
    return p;
}

/* All blocks of one alignment are live at once and each is filled over its
 * whole usable size before any is checked: overlapping blocks, or a usable
 * size larger than what was really reserved, show up as corruption. */
static void sweep_alignment(int api, size_t align)
{
    /* 0: the aligned address must still lie inside its own block. */
    const size_t sizes[] = {0, 1, align - 1, align, align + 1, 3 * align + 7, 13, 1000 + 1, 4 * KiB + 3};
    enum { N = sizeof sizes / sizeof sizes[0] };
    void *blocks[N];
    size_t usable[N];
    for (size_t i = 0; i < N; i++) {
        size_t size = sizes[i];
        blocks[i] = aligned_by(api, align, size);
        usable[i] = malloc_usable_size(blocks[i]);
        CHECKF(usable[i] >= size, "%s(%zu, %zu): usable size %zu", api_names[api], align, size,
               usable[i]);
        hak_fill(blocks[i], usable[i], hak_seed_of(blocks[i], align));
    }
    for (size_t i = 0; i < N; i++) {
        CHECK_PATTERN(blocks[i], usable[i], hak_seed_of(blocks[i], align));
        free(blocks[i]);
    }
}

static void power_of_two_sweep(void)
{
    for (int api = 0; api < API_COUNT; api++)
        for (size_t align = sizeof(void *); align <= 2 * MiB; align *= 2) sweep_alignment(api, align);
}

/* A thread's first blocks come from the shared heap, whose classes from 1
 * to 4 KiB step by 64 bytes (1088, 1216, ...): an aligned request whose
 * thread-heap class is a multiple of the alignment may get one of those,
 * which is not. Each thread makes fewer than 64 blocks, so all of them are
 * young ones. */
static void *young_thread_aligned(void *arg)
{
    size_t align = *(const size_t *)arg;
    const size_t sizes[] = {1025, 1030, 1100, 1300, 2049, 2100, 2200, 3000, 3100, 4000};
    enum { N = sizeof sizes / sizeof sizes[0] };
    for (int api = 0; api < API_COUNT; api++) {
        void *blocks[N];
        for (size_t i = 0; i < N; i++) {
            blocks[i] = aligned_by(api, align, sizes[i]);
            hak_fill(blocks[i], sizes[i], hak_seed_of(blocks[i], align));
        }
        for (size_t i = 0; i < N; i++) {
            CHECK_PATTERN(blocks[i], sizes[i], hak_seed_of(blocks[i], align));
            free(blocks[i]);
        }
    }
    return NULL;
}

static void young_threads_aligned(void)
{
    for (size_t align = 32; align <= 8 * KiB; align *= 2) {
        pthread_t t;
        CHECK(pthread_create(&t, NULL, young_thread_aligned, &align) == 0);
        CHECK(pthread_join(t, NULL) == 0);
    }
}

/* Alignments far above any internal page or segment size. */
static void huge_alignment_small_size(void)
{
    const size_t aligns[] = {4 * MiB, 16 * MiB, 64 * MiB};
    for (int api = 0; api < API_COUNT; api++)
        for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
            void *p = aligned_by(api, aligns[i], 16);
            CHECK(malloc_usable_size(p) >= 16);
            memset(p, 0x5a, 16);
            free(p);
        }
}

/* The kernel mappings of the process, as /proc/self/maps lists them. */
static size_t mappings(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    CHECK(f != NULL);
    size_t n = 0;
    for (int c; (c = fgetc(f)) != EOF;) n += c == '\n';
    fclose(f);
    return n;
}

/* Blocks aligned beyond a slice (64 KiB) up to half a segment are large
 * blocks placed on their alignment, in the arenas' segments: 2,000 of them
 * add a few mappings, not one each (a mapping each, 80,000 blocks of 100
 * bytes aligned to 128 KiB hit the kernel's limit of 65,530, and then
 * every allocation left 32 MiB mapped). Every one is aligned and usable. */
static void aligned_beyond_a_slice_share_mappings(void)
{
    enum { BLOCKS = 2000 };
    static char *p[BLOCKS];
    const size_t aligns[] = {128 * KiB, 1 * MiB, 2 * MiB};
    for (size_t a = 0; a < sizeof aligns / sizeof aligns[0]; a++) {
        size_t before = mappings(), count = aligns[a] > MiB ? BLOCKS / 8 : BLOCKS;
        for (size_t i = 0; i < count; i++) {
            size_t size = i % 3 == 0 ? 100 : i % 3 == 1 ? 70 * KiB : 300 * KiB;
            p[i] = aligned_by((int)(i % API_COUNT), aligns[a], size);
            CHECK_ALIGNED(p[i], aligns[a]);
            CHECK(malloc_usable_size(p[i]) >= size);
            memset(p[i], 0x5a, 100);
        }
        size_t after = mappings(), grown = after > before ? after - before : 0;   /* (others may merge meanwhile) */
        for (size_t i = 0; i < count; i++) free(p[i]);
        printf("     %zu blocks aligned to %zu KiB: %zu more mappings\n", count, aligns[a] / KiB, grown);
#ifndef HAK_TEST_SECURE   /* (the secure variant's guard page after each large block splits its mapping) */
        CHECKF(grown < 64, "%zu blocks aligned to %zu KiB took %zu more mappings", count, aligns[a] / KiB, grown);
#endif
    }
}

/* Alignments beyond what a segment holds (giant blocks, a mapping each):
 * the block keeps only its own pages, not the slack its alignment took.
 * (It kept up to the alignment more, which was its usable size; the
 * secure variant's canary, which records at most 512 MiB of slack, then
 * lay far past the request, and free_aligned_sized of a block aligned to
 * 1 GiB aborted a correct program.) */
static void giant_blocks_keep_their_size(void)
{
    const size_t aligns[] = {32 * MiB, 256 * MiB, 1024 * MiB};
    const size_t sizes[] = {16, 4096, 5 * MiB + 3};
    for (size_t a = 0; a < sizeof aligns / sizeof aligns[0]; a++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            size_t align = aligns[a], size = sizes[s];
            void *p = aligned_alloc(align, size);
            CHECKF(p != NULL, "aligned_alloc(%zu, %zu)", align, size);
            CHECK_ALIGNED(p, align);
            size_t usable = malloc_usable_size(p);
            CHECKF(usable >= size && usable <= (size + 4095) / 4096 * 4096,
                   "aligned_alloc(%zu MiB, %zu): usable size %zu", align / MiB, size, usable);
            memset(p, 0x5a, usable);
            hak_free_aligned_sized(p, align, size);
        }
}

/* A giant block's descriptor is a page of its own, not the page just
 * below the block, where a write below the block (an underflow) rewrote
 * where free unmaps (an attack helper's program unmapped another mapping
 * so). Here that page is the program's own (mapped there, garbage written
 * over it whole): the free must neither stop nor touch it. (It is free:
 * the block's mapping starts at the block, but by a tiny chance, when the
 * mapping came aligned already; then another block is tried.) */
static void giant_metadata_is_out_of_the_blocks_reach(void)
{
    const size_t aligns[] = {32 * MiB, 64 * MiB};
    for (size_t a = 0; a < sizeof aligns / sizeof aligns[0]; a++) {
        char *p = NULL, *below = MAP_FAILED;
        for (int attempt = 0; attempt < 3 && below == MAP_FAILED; attempt++) {
            if (p != NULL) free(p);
            p = aligned_alloc(aligns[a], 100);
            CHECK(p != NULL);
            below = mmap(p - 4096, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        }
        CHECKF(below == p - 4096, "the page below a giant block is taken (%s)", strerror(errno));
        hak_fill(below, 4096, 77);
        memset(p, 1, 100);
        free(p);
        CHECK_PATTERN(below, 4096, 77);
        CHECK(munmap(below, 4096) == 0);
    }
}

/* Interleaved with plain mallocs, so aligned blocks come from pages that
 * also hold unaligned ones; all verified at the end. */
static void aligned_mixed_with_malloc(void)
{
    enum { N = 2000 };
    static hak_item items[N];
    hak_rng rng = hak_rng_seed(3);
    for (size_t i = 0; i < N; i++) {
        size_t size = hak_rng_size(&rng, 256 * KiB);
        if (i % 2) {
            items[i] = hak_item_new(size);
            continue;
        }
        size_t align = (size_t)1 << hak_rng_range(&rng, 3, 16);
        void *p = aligned_by((int)(i / 2 % API_COUNT), align, size);
        items[i] = (hak_item){p, size};
        hak_fill(p, size, hak_seed_of(p, size));
    }
    for (size_t i = 0; i < N; i++) hak_item_verify_free(items[i]);
}

/* A size whose class does not keep the alignment takes the class of the
 * size rounded up to the alignment, not of size + alignment: 4,200 B
 * aligned to 1 KiB takes a block of 5 KiB, not 5.5 (the class of 5,208 B).
 * (Not in the secure variant, whose blocks also hold a canary, and whose
 * hak_good_size and usable size are the size asked for.) */
#ifndef HAK_TEST_SECURE
/* The smallest class at or above max(size, align) whose blocks are
 * multiples of `align` (hak_good_size: the class a request gets). */
static size_t class_keeping(size_t size, size_t align)
{
    size_t c = hak_good_size(size > align ? size : align);
    while (c % align != 0) c = hak_good_size(c + 1);
    return c;
}
#endif

static void aligned_blocks_fit(void)
{
#ifndef HAK_TEST_SECURE
    const struct { size_t size, align; } cases[] = {
        {4200, 1024}, {600, 256}, {1100, 512}, {9000, 4096}, {200, 128}, {40, 64},
    };
    enum { N = 32 };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        void *p[N];
        size_t want = class_keeping(cases[c].size, cases[c].align);
        for (int i = 0; i < N; i++) {
            p[i] = aligned_by(API_POSIX_MEMALIGN, cases[c].align, cases[c].size);
            size_t usable = malloc_usable_size(p[i]);
            CHECKF(usable >= cases[c].size && usable <= want, "posix_memalign(%zu, %zu): usable size %zu, want %zu",
                   cases[c].align, cases[c].size, usable, want);
        }
        for (int i = 0; i < N; i++) free(p[i]);
    }
#endif
}

static void bad_alignments_rejected(void)
{
    const size_t bad[] = {0, 1, 2, 4, sizeof(void *) - 1, 3 * sizeof(void *), 24, 48, 100,
                          4097, ((size_t)1 << 20) + 1, SIZE_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        void *p = (void *)0x1; /* must not be modified on failure */
        int rc = posix_memalign(&p, bad[i], 64);
        CHECKF(rc == EINVAL, "posix_memalign(align %zu) = %d, want EINVAL", bad[i], rc);
        CHECK(p == (void *)0x1);
    }
#ifndef HAK_TEST_LIBC /* glibc before 2.38 rounds such alignments up */
    const size_t not_pow2[] = {3, 24, 48, 100, 4097, ((size_t)1 << 20) + 1};
    for (size_t i = 0; i < sizeof not_pow2 / sizeof not_pow2[0]; i++) {
        errno = 0;
        void *p = aligned_alloc(hak_opaque(not_pow2[i]), 64);
        CHECKF(p == NULL, "aligned_alloc(%zu, 64) = %p, want NULL", not_pow2[i], p);
        CHECKF(errno == EINVAL, "aligned_alloc(%zu, 64): errno %d, want EINVAL", not_pow2[i], errno);
    }
#endif
}

static void valloc_pvalloc_page_granular(void)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t sizes[] = {1, 100, page - 1, page, page + 1, 5 * page + 3, 3 * MiB + 1};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *v = valloc(sizes[i]);
        CHECKF(v != NULL, "valloc(%zu)", sizes[i]);
        CHECK_ALIGNED(v, page);
        CHECK(malloc_usable_size(v) >= sizes[i]);
        hak_fill(v, sizes[i], 9);

        size_t rounded = (sizes[i] + page - 1) / page * page;
        void *pv = pvalloc(sizes[i]);
        CHECKF(pv != NULL, "pvalloc(%zu)", sizes[i]);
        CHECK_ALIGNED(pv, page);
        CHECKF(malloc_usable_size(pv) >= rounded, "pvalloc(%zu): usable %zu < %zu", sizes[i],
               malloc_usable_size(pv), rounded);
        memset(pv, 0x77, rounded); /* the whole rounded size is the caller's */

        CHECK_PATTERN(v, sizes[i], 9);
        CHECK(hak_first_not(pv, rounded, 0x77) == SIZE_MAX);
        free(v);
        free(pv);
    }
}

int main(void)
{
    hak_test_begin("test_alignment");
    RUN_CASE(power_of_two_sweep);
    RUN_CASE(young_threads_aligned);
    RUN_CASE(huge_alignment_small_size);
    RUN_CASE(aligned_beyond_a_slice_share_mappings);
    RUN_CASE(giant_blocks_keep_their_size);
    RUN_CASE(giant_metadata_is_out_of_the_blocks_reach);
    RUN_CASE(aligned_mixed_with_malloc);
    RUN_CASE(aligned_blocks_fit);
    RUN_CASE(bad_alignments_rejected);
    RUN_CASE(valloc_pvalloc_page_granular);
    return 0;
}
