/* The basic single-threaded contracts: malloc(0) returns distinct freeable
 * pointers, malloc_usable_size covers the request and all of it is writable
 * without touching a neighbour, free(NULL) is a no-op, a long random mix
 * of every call keeps every live block intact, and glibc's __libc_* names
 * are hakmem's calls too. */
#include "hak_test.h"

static void malloc_zero_unique(void)
{
    enum { N = 1000 };
    static void *p[N];
    for (size_t i = 0; i < N; i++) {
        p[i] = malloc(hak_opaque(0));
        CHECKF(p[i] != NULL, "malloc(0) #%zu returned NULL", i);
    }
    /* all distinct: sort by address, then compare neighbours */
    static void *sorted[N];
    memcpy(sorted, p, sizeof p);
    for (size_t i = 1; i < N; i++) /* insertion sort: N is small */
        for (size_t j = i; j > 0 && (uintptr_t)sorted[j - 1] > (uintptr_t)sorted[j]; j--) {
            void *t = sorted[j];
            sorted[j] = sorted[j - 1];
            sorted[j - 1] = t;
        }
    for (size_t i = 1; i < N; i++) CHECKF(sorted[i] != sorted[i - 1], "malloc(0) returned %p twice", sorted[i]);
    for (size_t i = 0; i < N; i++) free(p[i]);
}

static void free_null_and_usable_size_null(void)
{
    free(NULL);
    CHECK_EQ_SIZE(malloc_usable_size(NULL), 0);
}

/* Every block is filled over its whole usable size while all are live, then
 * all are checked: an over-reported usable size overlaps a neighbour. */
static void check_usable_sizes(const size_t *sizes, size_t n)
{
    static hak_item blocks[8192];
    CHECK(n <= 8192);
    for (size_t i = 0; i < n; i++) {
        void *p = malloc(sizes[i]);
        CHECKF(p != NULL, "malloc(%zu)", sizes[i]);
        size_t usable = malloc_usable_size(p);
        CHECKF(usable >= sizes[i], "malloc_usable_size(malloc(%zu)) = %zu", sizes[i], usable);
        CHECK_ALIGNED(p, sizes[i] >= 16 ? 16 : sizeof(void *));
        blocks[i] = (hak_item){p, usable};
        hak_fill(p, usable, hak_seed_of(p, usable));
    }
    for (size_t i = 0; i < n; i++) {
        CHECK_EQ_SIZE(malloc_usable_size(blocks[i].ptr), blocks[i].size);
        hak_item_verify_free(blocks[i]);
    }
}

static void usable_size_every_small_size(void)
{
    static size_t sizes[4096];
    for (size_t i = 0; i < 4096; i++) sizes[i] = i + 1;
    check_usable_sizes(sizes, 4096);
}

static void usable_size_powers_of_two_and_neighbours(void)
{
    size_t sizes[128], n = 0;
    for (size_t p = 4 * KiB; p <= 64 * MiB; p *= 2) {
        sizes[n++] = p - 1;
        sizes[n++] = p;
        sizes[n++] = p + 1;
        sizes[n++] = p + p / 2;
    }
    check_usable_sizes(sizes, n);
}

/* Blocks of the same size are spaced at least that size apart. */
static void same_size_blocks_do_not_overlap(void)
{
    const size_t sizes[] = {8, 16, 48, 96, 1000, 4096, 70000};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t want[512];
        for (size_t i = 0; i < 512; i++) want[i] = sizes[s];
        check_usable_sizes(want, 512);
    }
}

/* A long random mix of malloc, calloc, realloc, aligned calls and free over
 * a set of live blocks, every block verified whenever it is touched. */
static void random_operations(void)
{
    enum { LIVE = 1024 };
    static hak_item live[LIVE];
    hak_rng rng = hak_rng_seed(2024);
    const size_t ops = hak_scale(200000, 2000000);
    for (size_t op = 0; op < ops; op++) {
        hak_item *slot = &live[hak_rng_next(&rng) % LIVE];
        if (slot->ptr) {
            if (hak_rng_next(&rng) % 4 == 0) {
                size_t size = hak_rng_size(&rng, 2 * MiB);
                uint64_t old_seed = hak_seed_of(slot->ptr, slot->size);
                size_t keep = size < slot->size ? size : slot->size;
                void *q = realloc(slot->ptr, size);
                CHECK(q != NULL);
                CHECK_PATTERN(q, keep, old_seed);
                *slot = (hak_item){q, size};
                hak_fill(q, size, hak_seed_of(q, size));
            } else {
                hak_item_verify_free(*slot);
                slot->ptr = NULL;
            }
            continue;
        }
        size_t size = hak_rng_size(&rng, 2 * MiB);
        void *p = NULL;
        switch (hak_rng_next(&rng) % 4) {
        case 0: p = malloc(size); break;
        case 1:
            p = calloc(1, size);
            CHECK(p != NULL);
            CHECK(hak_first_not(p, size, 0) == SIZE_MAX);
            break;
        case 2: p = aligned_alloc((size_t)1 << hak_rng_range(&rng, 4, 12), size); break;
        case 3: CHECK(posix_memalign(&p, (size_t)1 << hak_rng_range(&rng, 3, 14), size) == 0); break;
        }
        CHECK(p != NULL);
        *slot = (hak_item){p, size};
        hak_fill(p, size, hak_seed_of(p, size));
    }
    for (size_t i = 0; i < LIVE; i++)
        if (live[i].ptr) hak_item_verify_free(live[i]);
}

#ifdef HAK_TEST_STANDARD_NAMES
/* glibc exports these; programs and preload tools call them to reach "the"
 * allocator and free the blocks with free (or the other way round), which
 * mixed two allocators and stopped at hakmem's foreign-block check. */
void *__libc_malloc(size_t);
void *__libc_calloc(size_t, size_t);
void *__libc_realloc(void *, size_t);
void *__libc_memalign(size_t, size_t);
void *__libc_valloc(size_t);
void *__libc_pvalloc(size_t);
void __libc_free(void *);

static void libc_names_are_hakmem(void)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char *p = __libc_malloc(100);
    CHECK(p != NULL && malloc_usable_size(p) >= 100);   /* hakmem's: it stops at a foreign block */
    memset(p, 7, 100);
    p = __libc_realloc(p, 5000);
    CHECK(p != NULL && p[0] == 7 && p[99] == 7);
    free(p);
    unsigned char *z = __libc_calloc(300, 10);
    CHECK(z != NULL && malloc_usable_size(z) >= 3000);
    for (size_t i = 0; i < 3000; i++) CHECKF(z[i] == 0, "__libc_calloc byte %zu is %d", i, z[i]);
    __libc_free(z);
    void *a = __libc_memalign(256, 1000), *v = __libc_valloc(10), *pv = __libc_pvalloc(page + 1);
    CHECK(a != NULL && (uintptr_t)a % 256 == 0 && malloc_usable_size(a) >= 1000);
    CHECK(v != NULL && (uintptr_t)v % page == 0 && malloc_usable_size(v) >= 10);
    CHECK(pv != NULL && (uintptr_t)pv % page == 0 && malloc_usable_size(pv) >= 2 * page);
    __libc_free(a);
    free(v);
    __libc_free(pv);
    __libc_free(malloc(40));
    __libc_free(NULL);
}
#endif

int main(void)
{
    hak_test_begin("test_malloc_basic");
    RUN_CASE(malloc_zero_unique);
    RUN_CASE(free_null_and_usable_size_null);
    RUN_CASE(usable_size_every_small_size);
    RUN_CASE(usable_size_powers_of_two_and_neighbours);
    RUN_CASE(same_size_blocks_do_not_overlap);
    RUN_CASE(random_operations);
#ifdef HAK_TEST_STANDARD_NAMES
    RUN_CASE(libc_names_are_hakmem);
#endif
    return 0;
}
