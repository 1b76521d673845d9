/* Huge blocks moved by realloc while other threads map, check and unmap
 * huge segments (no cache: HAKMEM_HUGE_CACHE=0, set by ctest), every block
 * checked: the shape in which a mover once cleared the segment-map entry of
 * another thread's new segment at its old address (issue #7.1). The window
 * is a few instructions wide, so this rarely hits it; unit_huge_move makes
 * that race deterministic. This one keeps the concurrent paths honest
 * (and runs under TSan). */
#include <stdatomic.h>
#include "hak_test.h"

static double seconds;
static _Atomic int stop;

static void *grower(void *arg)
{
    hak_rng rng = hak_rng_seed((uintptr_t)arg);
    while (!atomic_load(&stop)) {
        size_t size = hak_rng_range(&rng, 33 * MiB, 34 * MiB);
        uint64_t seed = hak_rng_next(&rng);
        char *p = malloc(size);
        CHECK(p != NULL);
        hak_fill(p, size, seed);
        for (int step = 0; step < 4; step++) {
            size_t bigger = size + hak_rng_range(&rng, 1 * MiB, 5 * MiB);
            char *q = realloc(p, bigger);
            CHECK(q != NULL);
            CHECK_PATTERN(q, size, seed);
            p = q;
            size = bigger;
            hak_fill(p, size, seed);
        }
        CHECK(malloc_usable_size(p) >= size);
        free(p);
    }
    return NULL;
}

static void *mapper(void *arg)
{
    hak_rng rng = hak_rng_seed((uintptr_t)arg);
    while (!atomic_load(&stop)) {
        size_t size = hak_rng_range(&rng, 33 * MiB, 41 * MiB);
        char *p = malloc(size);
        CHECK(p != NULL);
        p[0] = 1;
        p[size - 1] = 2;
        for (int i = 0; i < 8; i++) CHECK(malloc_usable_size(p) >= size);
        CHECK(p[0] == 1 && p[size - 1] == 2);
        free(p);
    }
    return NULL;
}

static void moved_blocks_never_unmap_others(void)
{
    pthread_t threads[4];
    for (uintptr_t i = 0; i < 4; i++)
        CHECK(pthread_create(&threads[i], NULL, i < 2 ? grower : mapper, (void *)(i + 1)) == 0);
    struct timespec pause = { (time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9) };
    nanosleep(&pause, NULL);
    atomic_store(&stop, 1);
    for (int i = 0; i < 4; i++) CHECK(pthread_join(threads[i], NULL) == 0);
}

int main(void)
{
    hak_test_begin("test_huge_realloc_race");
    seconds = hak_test_long() ? 30.0 : 3.0;
    RUN_CASE(moved_blocks_never_unmap_others);
    return 0;
}
