/* Work with a known count for the statistics to account for. Run by
 * tests/stats_report.py, which parses the JSON snapshots this prints
 * ("snapshot <name> <json>") and checks them.
 *
 * With HAKMEM_STATS set, in the class of SIZE: a thread allocates N blocks,
 * frees the quarter it allocated last itself (local frees: its first few
 * blocks come from the shared heap, whose frees are cross-thread) and
 * exits; main frees the rest (cross-thread frees). Two large blocks (spans
 * of an arena segment) and two huge blocks too, which the report counts
 * apart: a large block of malloc's, one aligned beyond a slice (a span
 * placed on its alignment, through the aligned path), a huge block of
 * malloc's (a segment of its own) and one aligned beyond a segment (a
 * giant block, a mapping of its own); each of the aligned two was once
 * left out of some count (their allocations, the giant's bytes). The text report is printed twice on stderr:
 * after "report held", while they are live, and at the end. */
#include "hak_test.h"

#define SIZE 6000   /* class 6144: nothing else here uses it */
#define N 3000
#define LARGE_SIZE (3 * MiB)    /* as in stats_report.py */
#define HUGE_SIZE (40 * MiB)
#define ALIGNED_SIZE 100        /* aligned to 1 MiB, then to 64 MiB */

static void *blocks[N];

static void snapshot(const char *name)
{
    printf("snapshot %s ", name);
    fflush(stdout);
    hak_stats_write_json(STDOUT_FILENO);   /* one line, newline-terminated */
}

static void *allocate_then_free_a_quarter(void *arg)
{
    (void)arg;
    for (int i = 0; i < N; i++) {
        blocks[i] = malloc(SIZE);
        CHECK(blocks[i] != NULL);
        hak_fill(blocks[i], SIZE, (uint64_t)i);
    }
    for (int i = N - N / 4; i < N; i++) free(blocks[i]);
    return NULL;
}

/* mallinfo2 and malloc_stats are hakmem's only under the standard names
 * (sanitizer builds reach hakmem as hak_*: the JSON snapshots still apply). */
#ifdef HAK_TEST_STANDARD_NAMES
#define print_report() malloc_stats()
#else
#define print_report() hak_stats_print()
#endif

int main(void)
{
    hak_test_begin("test_stats");
#ifdef HAK_TEST_STANDARD_NAMES
    struct mallinfo2 before = mallinfo2();
#endif
    /* main makes a few allocations only, so it stays on the shared heap: a
     * heap of its own made after the thread's exit would be the thread's,
     * recycled, which may take back its full pages (main's frees would be
     * local then). */
    free(malloc(16));
    snapshot("start");

    pthread_t t = hak_thread_start(allocate_then_free_a_quarter, NULL);
    pthread_join(t, NULL);
    char *large = malloc(LARGE_SIZE);
    CHECK(large != NULL);
    memset(large, 1, LARGE_SIZE);
    char *huge = malloc(HUGE_SIZE);
    CHECK(huge != NULL);
    memset(huge, 1, HUGE_SIZE);
    char *aligned_large = aligned_alloc(MiB, ALIGNED_SIZE), *giant = aligned_alloc(64 * MiB, ALIGNED_SIZE);
    CHECK(aligned_large != NULL && giant != NULL);
    /* Requests refused for their size count as no allocation (each once
     * counted one in class 0, so allocs - frees there was not live). */
    CHECK(malloc(hak_opaque(SIZE_MAX / 2)) == NULL);
    CHECK(aligned_alloc(64 * MiB, hak_opaque(SIZE_MAX / 2)) == NULL);
    CHECK(realloc(large, hak_opaque(SIZE_MAX / 2)) == NULL);   /* large stays */
    snapshot("held");
    fprintf(stderr, "report held\n");
    fflush(stderr);
    print_report();

#ifdef HAK_TEST_STANDARD_NAMES
    struct mallinfo2 held = mallinfo2();
    /* glibc's split: uordblks, the blocks of the size classes (the test
     * class's, and what else the program holds); hblks and hblkhd, the
     * blocks beyond them, large and huge; in use, the sum. */
    size_t in_classes = (size_t)(N - N / 4) * SIZE, beyond = LARGE_SIZE + HUGE_SIZE + 2 * ALIGNED_SIZE;
    CHECKF(held.uordblks >= before.uordblks + in_classes && held.uordblks < before.uordblks + in_classes + MiB,
           "mallinfo2 uordblks %zu -> %zu, expected +%zu (the blocks of the classes only)", before.uordblks,
           held.uordblks, in_classes);
    CHECKF(held.hblks >= before.hblks + 4 && held.hblkhd >= before.hblkhd + beyond,
           "large and huge blocks %zu, %zu bytes", held.hblks, held.hblkhd);
    CHECKF(held.arena >= held.uordblks && held.fordblks == held.arena - held.uordblks, "arena %zu, in use %zu, free %zu",
           held.arena, held.uordblks, held.fordblks);
#endif

    for (int i = 0; i < N - N / 4; i++) {
        CHECK_PATTERN(blocks[i], SIZE, (uint64_t)i);
        free(blocks[i]);
    }
    free(large);
    free(huge);
    free(aligned_large);
    free(giant);
    snapshot("freed");
    print_report();   /* the text report, on stderr */
    return 0;
}
