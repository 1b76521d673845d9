/* free() leaves errno as it found it (POSIX.1-2024 requires it; glibc has
 * done so since 2.33), for every kind of block and whatever free does
 * inside: hand memory back to the OS at once (HAKMEM_PURGE_DELAY=0, as
 * registered), unmap a huge block (HAKMEM_HUGE_CACHE=0), and above all when
 * the OS refuses either:
 *   - madvise fails with EINVAL on locked memory (mlock, mlockall);
 *   - munmap fails with ENOMEM when it would split a mapping and the
 *     process is at vm.max_map_count (neighbouring anonymous mappings of
 *     the same kind are merged by the kernel into one).
 * The refusals are made deterministic by a seccomp filter (madvise's
 * purging advices fail with EINVAL, munmap with ENOMEM) in a forked child;
 * the map-limit case is also run for real, as glibc's tst-free-errno does.
 * A program that reads errno after a failed call, with a free in between
 * (cleanup before reporting), must see the failed call's errno. */
#include "hak_test.h"

#include "hak_seccomp.h"

#define SENTINEL 1789   /* not an errno any call here sets */

/* errno read where the compiler cannot assume free left it alone. */
static int current_errno(void)
{
    int e = errno;
    __asm__ volatile("" : "+r"(e));
    return e;
}

#define SEGMENT (32 * MiB)   /* src/internal.h's HAK_SEGMENT_SIZE */

/* One block of each kind hakmem has: small, medium, large spans, huge
 * blocks in and past the huge cache, aligned ones (in a page, a large
 * span, a huge segment, a giant mapping), zeroed, and one grown by realloc
 * into a huge mapping. Each is written over its size. */
enum { KINDS = 16 };

static void *block_of_kind(int kind, size_t *size)
{
    void *p = NULL;
    switch (kind) {
    case 0: p = malloc(*size = 0); break;
    case 1: p = malloc(*size = 24); break;
    case 2: p = malloc(*size = 3000); break;
    case 3: p = malloc(*size = 100 * KiB); break;
    case 4: p = malloc(*size = 900 * KiB); break;
    case 5: p = malloc(*size = 2 * MiB); break;
    case 6: p = malloc(*size = 20 * MiB); break;
    case 7: p = malloc(*size = 40 * MiB); break;
    case 8: p = malloc(*size = 5 * SEGMENT); break;   /* past the default huge cache */
    case 9: p = calloc(1, *size = 3 * MiB); break;
    case 10: p = memalign(4096, *size = 100); break;
    case 11: CHECK(posix_memalign(&p, 256 * KiB, *size = 5000) == 0); break;
    case 12: p = aligned_alloc(4 * MiB, *size = 4 * MiB); break;
    case 13: p = aligned_alloc(64 * MiB, *size = 100); break;   /* beyond a segment: giant */
    case 14: p = valloc(*size = 70 * KiB); break;
    case 15: {
        p = malloc(*size = 2 * MiB);
        CHECK(p != NULL);
        p = realloc(p, *size = 6 * MiB);   /* a large block grown on: a mapping of its own */
        break;
    }
    }
    CHECKF(p != NULL, "block of kind %d (%zu bytes) not allocated", kind, *size);
    memset(p, 0x5a, *size);
    return p;
}

static void free_keeping_errno(void *p, size_t size, const char *how)
{
    errno = SENTINEL;
    free(p);
    int after = current_errno();
    CHECKF(after == SENTINEL, "free of a %zu-byte block (%s) changed errno from %d to %d (%s)", size, how,
           SENTINEL, after, strerror(after));
}

/* Every kind, freed by the thread that allocated it, twice in a row (the
 * second free may take the paths a reused span or cached segment takes). */
static void free_all_kinds(const char *how)
{
    for (int round = 0; round < 2; round++)
        for (int kind = 0; kind < KINDS; kind++) {
            size_t size;
            void *p = block_of_kind(kind, &size);
            free_keeping_errno(p, size, how);
        }
    errno = SENTINEL;
    free(NULL);
    CHECK(current_errno() == SENTINEL);
}

static void *blocks[KINDS];
static size_t sizes[KINDS];

static void *free_blocks_of_main(void *arg)
{
    for (int kind = 0; kind < KINDS; kind++) free_keeping_errno(blocks[kind], sizes[kind], (const char *)arg);
    return NULL;
}

/* Blocks of one thread freed by another (the cross-thread paths). */
static void free_all_kinds_from_another_thread(const char *how)
{
    for (int kind = 0; kind < KINDS; kind++) blocks[kind] = block_of_kind(kind, &sizes[kind]);
    pthread_join(hak_thread_start(free_blocks_of_main, (void *)how), NULL);
}

static void free_keeps_errno(void)
{
    free_all_kinds("the OS willing");
    free_all_kinds_from_another_thread("another thread's, the OS willing");
}

/* Whether any OS page of [p, p + size) is resident (false once unmapped). */
static bool any_resident(void *p, size_t size)
{
    uintptr_t start = (uintptr_t)p & ~(uintptr_t)4095;
    size_t pages = ((uintptr_t)p + size - start + 4095) / 4096;
    unsigned char *vec = malloc(pages);
    CHECK(vec != NULL);
    bool resident = false;
    if (mincore((void *)start, pages * 4096, vec) == 0)
        for (size_t i = 0; i < pages && !resident; i++) resident = vec[i] & 1;
    else
        CHECKF(errno == ENOMEM, "mincore: %s", strerror(errno));
    free(vec);
    return resident;
}

/* ---- the OS refusing, by a seccomp filter -------------------------------- */

enum { NO_FILTER = 77 };

static void refused_child(void)
{
    const char *why;
    if (!hak_refuse(HAK_REFUSE_PURGES | HAK_REFUSE_MUNMAP, &why)) _exit(NO_FILTER);
    free_all_kinds("madvise and munmap refused");
    free_all_kinds_from_another_thread("another thread's, madvise and munmap refused");
    _exit(0);
}

/* Runs a child that sets a filter first: false (said) if it could not. */
static bool run_filtered(void (*child)(void), hak_child_report *r)
{
    *r = hak_run_in_child(child);
    if (WIFEXITED(r->status) && WEXITSTATUS(r->status) == NO_FILTER) {
        printf("     not run: no seccomp filter can be set here\n");
        return false;
    }
    CHECK_CHILD_EXITED_0(r->status);
    return true;
}

static void free_keeps_errno_when_the_os_refuses(void)
{
    hak_child_report r;
    if (!run_filtered(refused_child, &r)) return;
#ifdef HAK_TEST_STANDARD_NAMES
    /* The refusals did reach hakmem, which warns once about each kind
     * (every giant block freed, by both threads, had its unmap refused). */
    CHECKF(strstr(r.text, "cannot return memory to the OS") != NULL, "no purge was refused; stderr: %s", r.text);
    const char *unmap = strstr(r.text, "munmap(");
    CHECKF(unmap != NULL, "no munmap was refused; stderr: %s", r.text);
    CHECKF(strstr(unmap + 1, "munmap(") == NULL, "more than one munmap warning; stderr: %s", r.text);
#endif
}

/* munmap alone refused: a huge block's memory goes back all the same (the
 * range stays mapped, and nothing tracks it once freed: it stayed resident
 * for good, malloc_trim or not). */
static void unmap_refused_child(void)
{
    const char *why;
    if (!hak_refuse(HAK_REFUSE_MUNMAP, &why)) _exit(NO_FILTER);
    char *p = malloc(5 * SEGMENT);   /* past the huge cache (and HAKMEM_HUGE_CACHE=0 here) */
    CHECK(p != NULL);
    memset(p, 0x33, 8 * MiB);
    CHECK(any_resident(p, 8 * MiB));
    free_keeping_errno(p, 5 * SEGMENT, "munmap refused");
    CHECKF(!any_resident(p, 8 * MiB), "the memory of a huge block whose munmap was refused stayed resident");
    _exit(0);
}

static void memory_goes_back_when_munmap_is_refused(void)
{
    hak_child_report r;
    run_filtered(unmap_refused_child, &r);
}

/* ---- the map limit, for real --------------------------------------------- */

/* Three huge blocks whose mappings are whole segments, so that the kernel
 * may merge them into one mapping; the process then fills its map count
 * with one-page mappings of a file, and the middle block is freed: its
 * munmap would split the merged mapping, which the kernel refuses. Its
 * memory must go back all the same (it stayed resident for good). */
static void map_limit_child(void)
{
    void *probe = malloc(2 * SEGMENT);
    CHECK(probe != NULL);
    size_t offset = (uintptr_t)probe & (SEGMENT - 1);   /* the block's offset in its segment */
    free(probe);
    size_t size = 5 * SEGMENT - offset;
    void *b[3];
    for (int i = 0; i < 3; i++) {
        b[i] = malloc(size);
        CHECK(b[i] != NULL);
        memset(b[i], 0x33, 8 * MiB);
    }
    int fd = memfd_create("test_free_errno", 0);
    CHECK(fd >= 0);
    CHECK(ftruncate(fd, 4096) == 0);
    for (int i = 0; i < 70000; i++)   /* (at most: a raised limit is left alone) */
        if (mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0) == MAP_FAILED) break;
    free_keeping_errno(b[1], size, "at the map limit");
    CHECKF(!any_resident(b[1], 8 * MiB), "the memory of a huge block freed at the map limit stayed resident");
    free_keeping_errno(b[2], size, "at the map limit");
    free_keeping_errno(b[0], size, "at the map limit");
    _exit(0);
}

static void free_keeps_errno_at_the_map_limit(void)
{
    hak_child_report r = hak_run_in_child(map_limit_child);
    CHECK_CHILD_EXITED_0(r.status);
}

int main(void)
{
    hak_test_begin("test_free_errno");
    RUN_CASE(free_keeps_errno);
    RUN_CASE(free_keeps_errno_when_the_os_refuses);
    RUN_CASE(memory_goes_back_when_munmap_is_refused);
    RUN_CASE(free_keeps_errno_at_the_map_limit);
    printf("all passed\n");
    return 0;
}
