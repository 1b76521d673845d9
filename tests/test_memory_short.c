/* When the OS refuses a mapping, hakmem gives back what it keeps cached
 * before it fails the call: the huge blocks in its cache and every empty
 * segment (src/purge.c, hak_memory_short). A program that frees a big
 * block and then asks for a bigger one, under an address-space limit
 * (RLIMIT_AS, ulimit -v) or strict overcommit, gets it, as under glibc.
 * Each such case runs in a forked child, which sets the limit a little
 * above what it has mapped.
 *
 * And a call that succeeds leaves errno as it found it (glibc's tests check
 * it), though a system call inside failed on the way: the first refused
 * mapping above, a block that could not grow in place, a look at a block
 * whose segment was unmapped since. */
#include "hak_test.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#define SENTINEL 1789   /* not an errno any call here sets */

static int current_errno(void)
{
    int e = errno;
    __asm__ volatile("" : "+r"(e));
    return e;
}

/* The process's mapped size (statm's first field), read without stdio,
 * whose malloc could take a page in a segment the case just emptied. */
static size_t mapped_bytes(void)
{
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY);
    CHECK(fd >= 0);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    CHECK(n > 0);
    buf[n] = 0;
    return (size_t)strtoull(buf, NULL, 10) * (size_t)sysconf(_SC_PAGESIZE);
}

/* Address space limited to what is mapped now and `room` more. (A new
 * mapping may take its alignment more while it is made: 32 MiB for a
 * segment or a huge block, unmapped at once.) */
static void limit_address_space(size_t room)
{
    size_t limit = mapped_bytes() + room;
    struct rlimit rl = {limit, limit};
    CHECK(setrlimit(RLIMIT_AS, &rl) == 0);
}

static void check_in_child(void (*fn)(void), const char *what)
{
    hak_child_report r = hak_run_in_child(fn);
    CHECKF(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "%s: child status 0x%x; stderr: %s", what, r.status,
           r.text);
}

/* A freed huge block waits in the cache; a bigger one fits only once it
 * is unmapped. */
static void huge_cache_child(void)
{
    free(hak_opaque_ptr(malloc(120 * MiB)));
    limit_address_space(450 * MiB);   /* < 500 + 32, <= 500 + 32 - 120 */
    errno = SENTINEL;
    void *p = malloc(500 * MiB);
    CHECKF(p != NULL, "malloc(500 MiB) with the freed 120 MiB still cached: errno %d", errno);
    CHECKF(current_errno() == SENTINEL, "errno %d after the malloc that succeeded", current_errno());
    memset(p, 1, 4096);
    free(p);
}

static void huge_cache_goes_when_memory_is_short(void) { check_in_child(huge_cache_child, "huge cache"); }

/* Large blocks of 30 MiB take a segment each (but maybe the first, in
 * the segment of the program's small blocks); freed, the segments they
 * emptied, two at least, stay mapped (one kept, the others until their
 * purge delay runs out). */
static void empty_segments_child(void)
{
    void *a = hak_opaque_ptr(malloc(30 * MiB)), *b = hak_opaque_ptr(malloc(30 * MiB)), *c = hak_opaque_ptr(malloc(30 * MiB));
    CHECK(a != NULL && b != NULL && c != NULL);
    free(a);
    free(b);
    free(c);
    limit_address_space(60 * MiB);   /* < 80 + 32, <= 80 + 32 - 2 x 32 */
    errno = SENTINEL;
    void *p = malloc(80 * MiB);
    CHECKF(p != NULL, "malloc(80 MiB) with two empty segments mapped: errno %d", errno);
    CHECKF(current_errno() == SENTINEL, "errno %d after the malloc that succeeded", current_errno());
    free(p);
}

static void empty_segments_go_when_memory_is_short(void) { check_in_child(empty_segments_child, "empty segments"); }

/* An arena that needs a new segment (32 MiB) for small and large blocks,
 * with less room than that until the cached huge block goes. */
static void arena_growth_child(void)
{
    malloc_trim(0);   /* (nothing cached or empty but what follows) */
    free(hak_opaque_ptr(malloc(120 * MiB)));
    limit_address_space(16 * MiB);   /* < 32, <= 32 + 32 - 120 */
    enum { N = 48 };
    void *blocks[N];
    errno = SENTINEL;
    for (size_t i = 0; i < N; i++) {
        blocks[i] = malloc(1 * MiB);
        CHECKF(blocks[i] != NULL, "block %zu of 1 MiB, a huge block of 120 MiB still cached: errno %d", i, errno);
        memset(blocks[i], 1, 4096);
    }
    CHECKF(current_errno() == SENTINEL, "errno %d after the mallocs that succeeded", current_errno());
    for (size_t i = 0; i < N; i++) free(blocks[i]);
}

static void arena_grows_into_what_the_cache_held(void) { check_in_child(arena_growth_child, "arena growth"); }

/* realloc of a huge block whose next pages are taken (another huge block
 * mapped right after it, as hakmem places them): mremap cannot grow it in
 * place, so it moves, and the call succeeds. */
static void realloc_that_moves_keeps_errno(void)
{
    void *p = malloc(40 * MiB), *fence = hak_opaque_ptr(malloc(40 * MiB));
    CHECK(p != NULL && fence != NULL);
    memset(p, 7, 4096);
    errno = SENTINEL;
    void *q = realloc(p, 80 * MiB);
    CHECK(q != NULL);
    CHECKF(current_errno() == SENTINEL, "errno %d after a realloc that succeeded", current_errno());
    CHECK(((unsigned char *)q)[4095] == 7);
    free(q);
    free(fence);
}

/* The large blocks' density verdict looks (mincore) at the last plain one
 * handed out, whose segment malloc_trim has unmapped meanwhile. */
static void large_block_after_unmapped_probe_keeps_errno(void)
{
    void *a[4];
    for (size_t k = 0; k < 4; k++) CHECK((a[k] = hak_opaque_ptr(malloc(30 * MiB))) != NULL);
    for (size_t k = 0; k < 4; k++) free(a[k]);
    malloc_trim(0);
    errno = SENTINEL;
    void *p = malloc(3 * MiB);
    CHECK(p != NULL);
    CHECKF(current_errno() == SENTINEL, "errno %d after a malloc that succeeded", current_errno());
    free(p);
}

int main(void)
{
    hak_test_begin("test_memory_short");
    RUN_CASE(huge_cache_goes_when_memory_is_short);
    RUN_CASE(empty_segments_go_when_memory_is_short);
    RUN_CASE(arena_grows_into_what_the_cache_held);
    RUN_CASE(realloc_that_moves_keeps_errno);
    RUN_CASE(large_block_after_unmapped_probe_keeps_errno);
    return 0;
}
