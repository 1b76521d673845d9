/* calloc never returns stale bytes when the OS refuses to take memory back.
 * Under mlockall, madvise fails on every page (EINVAL), so purged spans and
 * purged huge-cache entries still hold their old contents: hakmem must keep
 * them marked dirty and clear what calloc hands out (issue: a purge that
 * failed was counted as done, and calloc skipped the clearing). */
#include "hak_test.h"
#include <sys/mman.h>

static void check_zero(const char *what, const unsigned char *p, size_t size)
{
    CHECKF(p != NULL, "%s: calloc(1, %zu) failed", what, size);
    size_t off = hak_first_not(p, size, 0);
    CHECKF(off == SIZE_MAX, "%s: calloc(1, %zu) = %p: byte %zu is 0x%02x", what, size, (void *)p, off, p[off]);
}

/* A large block (a span of an arena) freed, malloc_trim, then calloc. */
static void large_after_trim(void)
{
    for (int round = 0; round < 4; round++) {
        size_t size = (3 + (size_t)round) * MiB;
        unsigned char *p = malloc(size);
        CHECK(p != NULL);
        memset(p, 0xAB, size);
        free(p);
        malloc_trim(0);
        unsigned char *q = calloc(1, size);
        check_zero("large block after malloc_trim", q, size);
        memset(q, 0xCD, size);
        free(q);
    }
}

/* Small work that reaches malloc's slow path (the purge fallback) while
 * time passes, so the purge delay runs out with or without the purger. */
static void let_purges_run(void)
{
    for (int round = 0; round < 20; round++) {
        void *keep[256];
        for (int i = 0; i < 256; i++) keep[i] = malloc(16 + (size_t)(i * 97) % 8000);
        for (int i = 0; i < 256; i++) free(keep[i]);
        usleep(10 * 1000);
    }
}

/* A block of `size` written, freed and left to its delay (no malloc_trim),
 * then calloc of the same size. */
static void calloc_after_delay(const char *what, size_t size)
{
    unsigned char *p = malloc(size);
    CHECK(p != NULL);
    memset(p, 0xAB, size);
    free(p);
    let_purges_run();
    unsigned char *q = calloc(1, size);
    check_zero(what, q, size);
    free(q);
}

/* A huge block: its own segment, cached when freed; the cache's delay runs
 * out (it tries to purge). */
static void huge_after_decay(void) { calloc_after_delay("huge block after the cache's delay", 40 * MiB); }

/* A large block: a span of an arena, freed and left to the purge delay. */
static void large_after_delay(void) { calloc_after_delay("large block after the purge delay", 5 * MiB); }

int main(void)
{
    hak_test_begin("test_purge_failure");
    if (mlockall(MCL_CURRENT | MCL_FUTURE) != 0) {
        printf("SKIP: mlockall not permitted here (%s): purges cannot be made to fail\n", strerror(errno));
        return 0;
    }
    RUN_CASE(large_after_trim);
    RUN_CASE(large_after_delay);
    RUN_CASE(huge_after_decay);
    munlockall();
    return 0;
}
