/* Statistics taken while other threads allocate, free and exit: the
 * reports read per-heap counters and page fields their owners are writing
 * (ThreadSanitizer checks that every such read is race-free), and must
 * still count every thread exactly once. In the reports taken meanwhile,
 * the cumulative counters of the test's size class never go down from one
 * report to the next: a thread that exits while a report is taken is
 * counted once, through its heap or among the exited threads, never zero
 * times (the snapshot once read those two under separate locks) nor twice.
 * Once the threads are gone, the counts of the class must be exact.
 *
 * ctest runs it with HAKMEM_STATS=1 (calls counted) and without. */
#include "hak_test.h"

#include <stdatomic.h>

#define SIZE 5000   /* class 5120: nothing else here uses it */
enum { WORKERS = 4, GENERATIONS = 100, BLOCKS = 200, KEPT = BLOCKS / 4 };

static void *kept[WORKERS][KEPT];   /* a generation's blocks, freed by the next */
static atomic_bool stop;

/* A field of the test class in a report; 0 if the class is not there. */
static uint64_t class_field(const char *json, const char *field)
{
    char key[32];
    snprintf(key, sizeof key, "{\"size\":%d,", 5120);
    const char *c = strstr(json, key);
    if (c == NULL) return 0;
    char name[40];
    snprintf(name, sizeof name, "\"%s\":", field);
    const char *f = strstr(c, name);
    CHECKF(f != NULL, "no %s in %.200s", field, c);
    return strtoull(f + strlen(name), NULL, 10);
}

/* The class's counters that only ever grow (calls: with HAKMEM_STATS
 * only, else 0; pages: always). */
static const char *const cumulative[] = {
    "allocs", "frees", "remote_frees", "pages_new", "pages_freed", "pages_abandoned", "pages_adopted",
};
enum { CUMULATIVE = sizeof cumulative / sizeof cumulative[0] };

typedef struct {
    size_t reports;
    uint64_t last[CUMULATIVE];   /* in the last report */
} reporter_state;

static void check_not_below(const char *json, uint64_t last[CUMULATIVE], size_t report_no)
{
    for (size_t i = 0; i < CUMULATIVE; i++) {
        uint64_t now = class_field(json, cumulative[i]);
        CHECKF(now >= last[i], "report %zu: %s of class 5120 went down from %llu to %llu (a thread "
               "counted zero times, or twice in the report before)", report_no, cumulative[i],
               (unsigned long long)last[i], (unsigned long long)now);
        last[i] = now;
    }
}

static void *reporter(void *arg)
{
    reporter_state *r = arg;
    while (!atomic_load(&stop)) {
        check_not_below(hak_stats_json(), r->last, r->reports + 1);
        r->reports++;
    }
    return NULL;
}

static void *worker(void *arg)
{
    size_t w = (size_t)arg;
    for (size_t i = 0; i < KEPT; i++) free(kept[w][i]);   /* the last generation's: remote frees */
    void *blocks[BLOCKS];
    for (size_t i = 0; i < BLOCKS; i++) {
        blocks[i] = malloc(SIZE);
        CHECK(blocks[i] != NULL);
        memset(blocks[i], (int)w, 64);
    }
    for (size_t i = 0; i < KEPT; i++) kept[w][i] = blocks[i];
    for (size_t i = KEPT; i < BLOCKS; i++) free(blocks[i]);
    return NULL;
}

static void reports_while_threads_come_and_go(void)
{
    bool counted = getenv("HAKMEM_STATS") != NULL;
    const char *start = hak_stats_json();
    uint64_t allocs0 = class_field(start, "allocs"), frees0 = class_field(start, "frees");
    reporter_state reports = {0};
    check_not_below(start, reports.last, 0);
    pthread_t r = hak_thread_start(reporter, &reports);
    for (size_t g = 0; g < GENERATIONS; g++) {
        pthread_t t[WORKERS];
        for (size_t w = 0; w < WORKERS; w++) t[w] = hak_thread_start(worker, (void *)w);
        for (size_t w = 0; w < WORKERS; w++) pthread_join(t[w], NULL);
    }
    atomic_store(&stop, true);
    pthread_join(r, NULL);
    for (size_t w = 0; w < WORKERS; w++)
        for (size_t i = 0; i < KEPT; i++) free(kept[w][i]);
    hak_collect();   /* adopt the dead threads' pages and their remote frees */

    const char *end = hak_stats_json();
    check_not_below(end, reports.last, reports.reports + 1);
    uint64_t total = (uint64_t)GENERATIONS * WORKERS * BLOCKS;
    if (counted) {
        CHECKF(class_field(end, "allocs") - allocs0 == total, "allocs %llu, expected %llu",
               (unsigned long long)(class_field(end, "allocs") - allocs0), (unsigned long long)total);
        CHECKF(class_field(end, "frees") - frees0 == total, "frees %llu, expected %llu",
               (unsigned long long)(class_field(end, "frees") - frees0), (unsigned long long)total);
    }
    CHECKF(class_field(end, "live") == 0, "live %llu", (unsigned long long)class_field(end, "live"));
    CHECK(reports.reports > 0);
    printf("     %s, %zu reports meanwhile, none below the one before\n", counted ? "counted" : "not counted",
           reports.reports);
}

int main(void)
{
    hak_test_begin("test_stats_concurrent");
    RUN_CASE(reports_while_threads_come_and_go);
    return 0;
}
