/* calloc never returns stale bytes when the OS refuses to take memory back.
 * When madvise fails, purged spans and purged huge-cache entries still hold
 * their old contents: hakmem must keep them marked dirty and clear what
 * calloc hands out (issue #7.10: a purge that failed was counted as done,
 * and calloc skipped the clearing).
 *
 * The cases run twice, each time in a fresh process (this program run again
 * with one argument) where madvise's purging advices fail:
 *   seccomp   a seccomp filter makes madvise(MADV_DONTNEED or MADV_FREE)
 *             fail with EINVAL in every thread; needs no privilege;
 *   mlockall  the real cause: on locked memory both advices fail with
 *             EINVAL; needs CAP_IPC_LOCK (root) or a large RLIMIT_MEMLOCK.
 * A process that cannot set its condition up exits with SKIPPED; the parent
 * requires that each process that ran passed and said hakmem's warning that
 * the memory stays resident (so purges did fail), and exits with SKIPPED,
 * which ctest reports as a skip (SKIP_RETURN_CODE), only when neither could
 * run. */
#include "hak_test.h"
#include <sys/mman.h>
#include "hak_seccomp.h"

enum { SKIPPED = 77 };   /* SKIP_RETURN_CODE in tests/CMakeLists.txt */

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

static void run_cases(void)
{
    RUN_CASE(large_after_trim);
    RUN_CASE(large_after_delay);
    RUN_CASE(huge_after_decay);
}

/* ---- the two ways to make purges fail ------------------------------------ */

/* madvise refused by a filter (hak_seccomp.h); munmap left alone. */
static bool refuse_purges_by_seccomp(void)
{
    const char *why;
    if (hak_refuse(HAK_REFUSE_PURGES, &why)) return true;
    printf("SKIP: %s\n", why);
    return false;
}

/* Where locked memory is limited (no CAP_IPC_LOCK, a finite
 * RLIMIT_MEMLOCK), mlockall may succeed and the test's mappings then fail:
 * not tried. */
static bool may_lock_everything(void)
{
    struct rlimit lim;
    if (getrlimit(RLIMIT_MEMLOCK, &lim) == 0 && lim.rlim_cur == RLIM_INFINITY) return true;
    unsigned long long caps = 0;
    char line[256];
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL) return false;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "CapEff: %llx", &caps) == 1) break;
    fclose(f);
    return (caps >> 14) & 1;   /* CAP_IPC_LOCK */
}

static bool refuse_purges_by_mlockall(void)
{
    if (!may_lock_everything()) {
        printf("SKIP: locked memory is limited here (no CAP_IPC_LOCK, RLIMIT_MEMLOCK finite)\n");
        return false;
    }
    if (mlockall(MCL_CURRENT | MCL_FUTURE) == 0) return true;
    printf("SKIP: mlockall not permitted here (%s)\n", strerror(errno));
    return false;
}

static const struct mode {
    const char *name;
    bool (*refuse_purges)(void);
} modes[] = {
    { "seccomp", refuse_purges_by_seccomp },
    { "mlockall", refuse_purges_by_mlockall },
};

static const struct mode *child_mode;
static char *self_argv0;

static void exec_child_mode(void)
{
    char *argv[] = { self_argv0, (char *)child_mode->name, NULL };
    execv("/proc/self/exe", argv);
    fprintf(stderr, "execv /proc/self/exe: %s\n", strerror(errno));
    _exit(2);
}

/* Runs each mode in its own process; see the comment at the top. */
static int run_modes(void)
{
    int ran = 0;
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        child_mode = &modes[i];
        printf("   purges refused by %s\n", child_mode->name);
        fflush(stdout);
        hak_child_report r = hak_run_in_child(exec_child_mode);
        if (WIFEXITED(r.status) && WEXITSTATUS(r.status) == SKIPPED) {
            printf("     %s: skipped\n", child_mode->name);
            continue;
        }
        CHECK_CHILD_EXITED_0(r.status);
#ifdef HAK_TEST_STANDARD_NAMES
        CHECKF(strstr(r.text, "cannot return memory to the OS") != NULL,
               "%s: no purge failed (no warning from hakmem); stderr: %s", child_mode->name, r.text);
#endif
        printf("     %s: passed\n", child_mode->name);
        ran++;
    }
    if (ran == 0) {
        printf("SKIP: purges could not be made to fail here\n");
        return SKIPPED;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 1) {
        hak_test_begin("test_purge_failure");
        self_argv0 = argv[0];
        return run_modes();
    }
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        if (strcmp(argv[1], modes[i].name) != 0) continue;
        hak_test_begin(modes[i].name);
        if (!modes[i].refuse_purges()) return SKIPPED;
        run_cases();
        return 0;
    }
    fprintf(stderr, "test_purge_failure: unknown mode %s\n", argv[1]);
    return 2;
}
