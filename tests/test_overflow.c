/* Size overflow and out-of-memory contracts: absurd sizes fail cleanly with
 * NULL (or an error code) and errno ENOMEM, never crash, never return a
 * block smaller than asked because a size computation wrapped around. */
#include "hak_test.h"

#include <sys/sysinfo.h>

/* Sizes that cannot be allocated on any 64-bit machine, several chosen so
 * that rounding up to a size class or page (size + 15, size + 4095, ...)
 * wraps around to a small number. */
static const size_t absurd_sizes[] = {
    SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - 15, SIZE_MAX - 4095, (size_t)-4096,
    (size_t)PTRDIFF_MAX + 1, (size_t)PTRDIFF_MAX, SIZE_MAX / 2 + 12345,
    SIZE_MAX - 2 * MiB, SIZE_MAX - 64 * MiB,
};
#define N_ABSURD (sizeof absurd_sizes / sizeof absurd_sizes[0])

static void malloc_absurd_sizes(void)
{
    for (size_t i = 0; i < N_ABSURD; i++) {
        errno = 0;
        void *p = malloc(hak_opaque(absurd_sizes[i]));
        CHECKF(p == NULL, "malloc(%zu) = %p", absurd_sizes[i], p);
        CHECKF(errno == ENOMEM, "malloc(%zu): errno %d", absurd_sizes[i], errno);
    }
    /* and the allocator still works afterwards */
    hak_item_verify_free(hak_item_new(100));
}

static void calloc_product_overflow(void)
{
    const size_t pairs[][2] = {
        {SIZE_MAX / 2 + 1, 2}, {2, SIZE_MAX / 2 + 1}, {SIZE_MAX, SIZE_MAX},
        {(size_t)1 << 32, (size_t)1 << 32}, {((size_t)1 << 33) + 1, (size_t)1 << 31},
        {SIZE_MAX / 16 + 1, 16}, {1, SIZE_MAX}, {SIZE_MAX, 1},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        errno = 0;
        void *p = calloc(hak_opaque(pairs[i][0]), hak_opaque(pairs[i][1]));
        CHECKF(p == NULL, "calloc(%zu, %zu) = %p", pairs[i][0], pairs[i][1], p);
        CHECKF(errno == ENOMEM, "calloc(%zu, %zu): errno %d", pairs[i][0], pairs[i][1], errno);
    }
}

static void reallocarray_overflow(void)
{
    errno = 0;
    CHECK(reallocarray(NULL, hak_opaque(SIZE_MAX / 2 + 1), 2) == NULL);
    CHECK(errno == ENOMEM);

    /* failure leaves the old block allocated and intact */
    hak_item it = hak_item_new(333);
    errno = 0;
    CHECK(reallocarray(it.ptr, hak_opaque((size_t)1 << 32), (size_t)1 << 32) == NULL);
    CHECK(errno == ENOMEM);
    hak_item_verify_free(it);

    /* and the non-overflowing case is a plain realloc */
    it = hak_item_new(100);
    uint64_t seed = hak_seed_of(it.ptr, it.size);
    void *q = reallocarray(it.ptr, 50, 40);
    CHECK(q != NULL);
    CHECK(malloc_usable_size(q) >= 2000);
    CHECK_PATTERN(q, 100, seed);
    free(q);
}

static void realloc_absurd_keeps_old_block(void)
{
    const size_t old_sizes[] = {24, 4000, 300 * KiB, 5 * MiB};
    for (size_t s = 0; s < sizeof old_sizes / sizeof old_sizes[0]; s++) {
        hak_item it = hak_item_new(old_sizes[s]);
        for (size_t i = 0; i < N_ABSURD; i++) {
            errno = 0;
            void *q = realloc(it.ptr, hak_opaque(absurd_sizes[i]));
            CHECKF(q == NULL, "realloc(%zu -> %zu) = %p", it.size, absurd_sizes[i], q);
            CHECKF(errno == ENOMEM, "realloc(-> %zu): errno %d", absurd_sizes[i], errno);
            CHECK_PATTERN(it.ptr, it.size, hak_seed_of(it.ptr, it.size));
        }
        hak_item_verify_free(it);
    }
}

static void aligned_absurd_sizes(void)
{
    const size_t aligns[] = {16, 64, 4096, 2 * MiB};
    for (size_t a = 0; a < sizeof aligns / sizeof aligns[0]; a++)
        for (size_t i = 0; i < N_ABSURD; i++) {
            size_t align = aligns[a], size = hak_opaque(absurd_sizes[i]);
            void *p = (void *)0x1;
            int rc = posix_memalign(&p, align, size);
            CHECKF(rc == ENOMEM, "posix_memalign(%zu, %zu) = %d", align, size, rc);
            CHECK(p == (void *)0x1); /* not modified on failure */

            errno = 0;
            p = aligned_alloc(align, size);
            CHECKF(p == NULL && errno == ENOMEM, "aligned_alloc(%zu, %zu) = %p, errno %d", align,
                   size, p, errno);
            errno = 0;
            p = memalign(align, size);
            CHECKF(p == NULL && errno == ENOMEM, "memalign(%zu, %zu) = %p, errno %d", align, size,
                   p, errno);
        }
    for (size_t i = 0; i < N_ABSURD; i++) {
        errno = 0;
        CHECKF(valloc(hak_opaque(absurd_sizes[i])) == NULL && errno == ENOMEM, "valloc(%zu)",
               absurd_sizes[i]);
        errno = 0;
        CHECKF(pvalloc(hak_opaque(absurd_sizes[i])) == NULL && errno == ENOMEM, "pvalloc(%zu)",
               absurd_sizes[i]);
    }
}

/* Sizes a 64-bit machine could map but this one has not the memory for:
 * under the kernel's default overcommit heuristic (vm.overcommit_memory
 * 0) such a request fails, and it must fail here too, with ENOMEM, as
 * under glibc (it succeeded, and a program that probes with a large
 * allocation learned only when its pages were touched). 4 times memory
 * and swap: malloc (a huge block), realloc of a huge block (mremap),
 * aligned_alloc beyond 16 MiB (a giant block), calloc. */
static void beyond_the_machines_memory(void)
{
    FILE *f = fopen("/proc/sys/vm/overcommit_memory", "r");
    int mode = -1;
    if (f != NULL) {
        if (fscanf(f, "%d", &mode) != 1) mode = -1;
        fclose(f);
    }
    struct sysinfo si;
    CHECK(sysinfo(&si) == 0);
    size_t memory = ((size_t)si.totalram + si.totalswap) * si.mem_unit, size = 4 * memory;
    if (mode != 0 || size / 4 != memory || size > ((size_t)1 << 46)) {
        printf("     vm.overcommit_memory %d, %zu MiB of memory and swap: skipped\n", mode, memory / MiB);
        return;
    }
    errno = 0;
    void *p = malloc(hak_opaque(size));
    CHECKF(p == NULL && errno == ENOMEM, "malloc(%zu) = %p, errno %d", size, p, errno);
    errno = 0;
    p = calloc(hak_opaque(size / 8), 8);
    CHECKF(p == NULL && errno == ENOMEM, "calloc(%zu, 8) = %p, errno %d", size / 8, p, errno);
    errno = 0;
    p = aligned_alloc(64 * MiB, hak_opaque(size));
    CHECKF(p == NULL && errno == ENOMEM, "aligned_alloc(64 MiB, %zu) = %p, errno %d", size, p, errno);
    hak_item it = hak_item_new(50 * MiB);
    errno = 0;
    void *q = realloc(it.ptr, hak_opaque(size));
    CHECKF(q == NULL && errno == ENOMEM, "realloc(50 MiB -> %zu) = %p, errno %d", size, q, errno);
    hak_item_verify_free(it);
}

int main(void)
{
    hak_test_begin("test_overflow");
    RUN_CASE(malloc_absurd_sizes);
    RUN_CASE(calloc_product_overflow);
    RUN_CASE(reallocarray_overflow);
    RUN_CASE(realloc_absurd_keeps_old_block);
    RUN_CASE(aligned_absurd_sizes);
    RUN_CASE(beyond_the_machines_memory);
    return 0;
}
