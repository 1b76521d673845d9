/* Memory goes back to the OS: a program that drops a large working set and
 * keeps doing light work falls back near its live size once the purge
 * delay has passed; malloc_trim(0) returns it at once. Resident size is
 * read from /proc/self/statm.
 *
 * The delay starts at HAKMEM_PURGE_DELAY (10 ms by default) but adapts: an
 * arena that refaults memory it purged recently waits longer, up to 500 ms
 * (src/purge.c). One case here refaults what the case before purged, so
 * each case works until its memory is back, and fails past RETURN_WITHIN:
 * the bound with room for a loaded machine. */
#include "hak_test.h"

#define WORKING_SET (192 * MiB)
#define SLACK (24 * MiB)   /* what may stay: retained pages, metadata, the test itself */
#define RETURN_WITHIN 5000 /* ms */

static void **blocks;
static size_t nblocks;

/* Fill the working set with blocks of 16 B - 4 KiB, each written whole. */
static void allocate_working_set(hak_rng *rng)
{
    size_t total = 0;
    nblocks = 0;
    while (total < WORKING_SET) {
        size_t size = hak_rng_range(rng, 16, 4096);
        blocks[nblocks] = malloc(size);
        CHECK(blocks[nblocks] != NULL);
        memset(blocks[nblocks++], 0x5A, size);
        total += size;
    }
}

static void check_returned(size_t rss, size_t baseline, const char *what, double ms)
{
    printf("     %s: rss %zu MiB (baseline %zu MiB) after %.0f ms\n", what, rss / MiB, baseline / MiB, ms);
    if (rss >= baseline + SLACK) {   /* where the memory sits, for the failure's report */
        fflush(stdout);
        hak_stats_print();
    }
    CHECKF(rss < baseline + SLACK, "%s: rss %zu MiB, baseline %zu MiB", what, rss / MiB, baseline / MiB);
}

/* Light work after the drop, until resident memory is back under
 * baseline + SLACK or RETURN_WITHIN has passed: rounds of short-lived
 * blocks with pauses, as a program that goes on running does. */
static void work_until_returned(hak_rng *rng, size_t baseline, const char *what)
{
    double t0 = hak_now_ms();
    size_t rss;
    while ((rss = hak_rss_bytes()) >= baseline + SLACK && hak_now_ms() - t0 < RETURN_WITHIN) {
        for (int i = 0; i < 1000; i++) {
            size_t size = hak_rng_range(rng, 16, 16 * KiB);
            char *p = malloc(size);
            CHECK(p != NULL);
            p[0] = p[size - 1] = 1;
            free(p);
        }
        usleep(5 * 1000);
    }
    check_returned(rss, baseline, what, hak_now_ms() - t0);
}

static void freed_by_owner(void)
{
    hak_rng rng = hak_rng_seed(1);
    size_t baseline = hak_rss_bytes();
    allocate_working_set(&rng);
    CHECKF(hak_rss_bytes() > baseline + WORKING_SET / 2, "rss %zu MiB while full", hak_rss_bytes() / MiB);
    for (size_t i = 0; i < nblocks; i++) free(blocks[i]);
    work_until_returned(&rng, baseline, "after the owner freed everything");
}

/* Threads fill the working set and exit; main frees it all (remote frees
 * into pages of dead threads, in classes main never allocates again). */
static void *fill_and_exit(void *arg)
{
    hak_rng rng = hak_rng_seed((uintptr_t)arg);
    allocate_working_set(&rng);
    return NULL;
}

static void freed_after_threads_exit(void)
{
    size_t baseline = hak_rss_bytes();
    pthread_t t = hak_thread_start(fill_and_exit, (void *)2);
    pthread_join(t, NULL);
    for (size_t i = 0; i < nblocks; i++) free(blocks[i]);
    hak_rng rng = hak_rng_seed(3);
    work_until_returned(&rng, baseline, "after freeing an exited thread's blocks");
}

static void huge_blocks_are_returned(void)
{
    size_t baseline = hak_rss_bytes();
    /* Beyond a segment's capacity (~32 MiB): each in a segment of its own,
     * kept mapped in the huge-block cache (128 MiB) for a while. */
    for (int i = 0; i < 4; i++) {
        size_t size = (size_t)(40 + 10 * i) * MiB;
        char *p = malloc(size);
        CHECK(p != NULL);
        memset(p, 0x33, size);
        free(p);
    }
    hak_rng rng = hak_rng_seed(4);
    work_until_returned(&rng, baseline, "after freeing huge blocks");
}

static void malloc_trim_returns_at_once(void)
{
    hak_rng rng = hak_rng_seed(5);
    size_t baseline = hak_rss_bytes();
    allocate_working_set(&rng);
    for (size_t i = 0; i < nblocks; i++) free(blocks[i]);
    malloc_trim(0);
    check_returned(hak_rss_bytes(), baseline, "right after malloc_trim(0)", 0);
}

/* The flags of the mapping that holds p, from /proc/self/smaps. */
static void mapping_flags(const void *p, char *flags, size_t size)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    CHECK(f != NULL);
    char line[512];
    bool inside = false;
    flags[0] = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned long from, to;
        if (sscanf(line, "%lx-%lx ", &from, &to) == 2)   /* a mapping's first line */
            inside = (uintptr_t)p >= from && (uintptr_t)p < to;
        else if (inside && strncmp(line, "VmFlags:", 8) == 0) {
            snprintf(flags, size, "%s", line + 8);
            break;
        }
    }
    fclose(f);
}

/* The arena's memory opts out of transparent huge pages (src/os.c,
 * hak_os_no_huge_pages): under THP "always" the kernel would otherwise
 * decide what stays resident. The mapping's flags say so ("nh"), whatever
 * this machine's THP setting. */
static void arena_memory_has_no_huge_pages(void)
{
    char *small = malloc(100), *large = malloc(4 * MiB), flags[512];
    CHECK(small != NULL && large != NULL);
    mapping_flags(small, flags, sizeof flags);
    CHECKF(strstr(flags, " nh") != NULL, "a small block's mapping has flags%s", flags);
    mapping_flags(large, flags, sizeof flags);
    CHECKF(strstr(flags, " nh") != NULL, "a large block's mapping has flags%s", flags);
    free(small);
    free(large);
}

int main(void)
{
    hak_test_begin("test_memory_return");
    blocks = mmap(NULL, WORKING_SET / 16 * sizeof(void *), PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(blocks != MAP_FAILED);
    RUN_CASE(arena_memory_has_no_huge_pages);
    RUN_CASE(freed_by_owner);
    RUN_CASE(freed_after_threads_exit);
    RUN_CASE(huge_blocks_are_returned);
#ifdef HAK_TEST_STANDARD_NAMES
    RUN_CASE(malloc_trim_returns_at_once);
#endif
    return 0;
}
