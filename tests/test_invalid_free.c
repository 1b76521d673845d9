/* Invalid frees are reported in one line and abort the process. Each case
 * runs in a forked child whose stderr the parent reads through a pipe; the
 * child prints the bad pointer first ("bad pointer 0x...") so the parent can
 * check the message names that same address. Normal build only: under the
 * sanitizers such frees are the sanitizer's business. */
#include "hak_test.h"

#include <sys/mman.h>

#define MESSAGE_PREFIX "hakmem: error:"


static void announce(const void *p)
{
    fprintf(stderr, "bad pointer %p\n", p);
}

static void free_stack_pointer(void)
{
    char buffer[256];
    memset(buffer, 1, sizeof buffer);
    void *p = hak_opaque_ptr(buffer + 64); /* hidden from -Wfree-nonheap-object */
    announce(p);
    free(p);
}

static void free_mmap_pointer(void)
{
    size_t len = 4 * MiB;
    char *region = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(region != MAP_FAILED);
    memset(region, 1, len);
    void *p = region + 2 * MiB + 16; /* looks like a block in a page */
    announce(p);
    free(p);
}

static void double_free_small(void)
{
    void *p = malloc(32);
    CHECK(p != NULL);
    memset(p, 1, 32);
    announce(p);
    free(p);
    free(p);
}

/* Pointers inside a live block, freed by the thread that owns its page
 * (the fast path): p + 1 of an 8 B block, p + 16 of a 32 B one. */
static void free_interior_odd(void)
{
    char *p = malloc(8);
    CHECK(p != NULL);
    announce(p + 1);
    free(p + 1);
}

static void free_interior_aligned(void)
{
    char *p = malloc(32);
    CHECK(p != NULL);
    announce(p + 16);
    free(p + 16);
}

/* A fresh page of a class nothing else here uses: its first block is
 * handed out, the next ones are carved (on the free list), the ones past
 * the first extension never carved. */
static char *first_block_of_fresh_page(size_t *block_size)
{
    char *p = malloc(3000);
    CHECK(p != NULL);
    *block_size = malloc_usable_size(p);
    return p;
}

static void free_carved_never_handed_out(void)
{
    size_t bs;
    char *p = first_block_of_fresh_page(&bs);
    announce(p + bs);
    free(p + bs);
}

static void free_never_carved(void)
{
    size_t bs;
    char *p = first_block_of_fresh_page(&bs);
    announce(p + 12 * bs);
    free(p + 12 * bs);
}

static void realloc_freed_block_that_fits(void)
{
    char *p = malloc(100);
    CHECK(p != NULL);
    free(p);
    announce(p);
    hak_opaque_ptr(realloc(p, 50));
}

static void realloc_interior(void)
{
    char *p = malloc(100);
    CHECK(p != NULL);
    announce(p + 32);
    hak_opaque_ptr(realloc(p + 32, 10));
}

static void usable_size_interior(void)
{
    char *p = malloc(64);
    CHECK(p != NULL);
    announce(p + 16);
    printf("%zu\n", malloc_usable_size(p + 16));
}

/* An aligned request beyond a slice maps a small huge segment; the segment
 * map marks its whole 32 MiB, where the OS may later place other mappings.
 * A pointer into one of those is foreign, not a crash (issue #7.6). */
static void free_foreign_next_to_small_huge_segment(void)
{
    void *p = aligned_alloc(128 * KiB, 4096);
    CHECK(p != NULL);
    uintptr_t base = (uintptr_t)p & ~((uintptr_t)32 * MiB - 1);
    char *other = MAP_FAILED;
    for (uintptr_t at = base + 1 * MiB; other == MAP_FAILED && at < base + 32 * MiB; at += 1 * MiB)
        other = mmap((void *)at, 64 * KiB, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    CHECKF(other != MAP_FAILED, "no free 64 KiB in the 32 MiB at %#lx", (unsigned long)base);
    announce(other + 64);
    free(other + 64);
}

static void double_free_of_size(size_t size)
{
    char *p = malloc(size);
    CHECK(p != NULL);
    memset(p, 1, size);
    announce(p);
    free(p);
    free(p);
}

static void double_free_medium(void) { double_free_of_size(100 * KiB); }
static void double_free_large(void) { double_free_of_size(2 * MiB); }
static void double_free_huge(void) { double_free_of_size(40 * MiB); }

static void check_report(const hak_child_report *r, const char *words)
{
    CHECKF(WIFSIGNALED(r->status) && WTERMSIG(r->status) == SIGABRT,
           "child status 0x%x, want death by SIGABRT; stderr: %s", r->status, r->text);
#ifdef HAK_TEST_STANDARD_NAMES
    const char *bad = strstr(r->text, "bad pointer 0x");
    CHECK(bad != NULL);
    unsigned long long want = strtoull(bad + strlen("bad pointer "), NULL, 16);

    const char *msg = strstr(r->text, MESSAGE_PREFIX);
    CHECKF(msg != NULL, "no \"" MESSAGE_PREFIX "\" in stderr: %s", r->text);
    CHECKF(strstr(msg + 1, MESSAGE_PREFIX) == NULL, "more than one message: %s", r->text);
    const char *eol = strchr(msg, '\n');
    CHECKF(eol != NULL, "message not ended by a newline: %s", msg);
    CHECKF(eol[1] == '\0', "more output after the message line: %s", msg);
    size_t len = (size_t)(eol - msg);
    CHECKF(memmem(msg, len, words, strlen(words)) != NULL, "\"%s\" not in: %.*s", words, (int)len, msg);
    const char *hex = memmem(msg, len, "0x", 2);
    CHECKF(hex != NULL, "no address in: %.*s", (int)len, msg);
    unsigned long long named = strtoull(hex, NULL, 16);
    CHECKF(named == want, "message names 0x%llx, the bad pointer is 0x%llx", named, want);
#else
    (void)words; /* other allocators word their messages differently */
#endif
}

static const struct misuse {
    const char *name;
    void (*fn)(void);
    const char *words;   /* in hakmem's one-line message */
} misuses[] = {
    { "free of a stack pointer", free_stack_pointer, "not allocated by hakmem" },
    { "free of an mmap'd pointer", free_mmap_pointer, "not allocated by hakmem" },
    { "double free, small", double_free_small, "double free" },
    { "double free, medium", double_free_medium, "double free" },
    { "double free, large", double_free_large, "double free" },
    { "double free, huge", double_free_huge, "double free" },
    { "free of p + 1 of an 8 B block", free_interior_odd, "pointer inside" },
    { "free of p + 16 of a 32 B block", free_interior_aligned, "pointer inside" },
    { "free of a block carved but never handed out", free_carved_never_handed_out, "double free" },
    { "free of a block never carved", free_never_carved, "not allocated by hakmem" },
    { "realloc of a freed block that fits", realloc_freed_block_that_fits, "already freed" },
    { "realloc of p + 32", realloc_interior, "pointer inside" },
    { "malloc_usable_size of p + 16", usable_size_interior, "pointer inside" },
    { "free of a foreign mapping beside a small huge segment", free_foreign_next_to_small_huge_segment,
      "not allocated by hakmem" },
};

static void every_misuse_is_reported(void)
{
    for (size_t i = 0; i < sizeof misuses / sizeof misuses[0]; i++) {
        printf("   %s\n", misuses[i].name);
        hak_child_report r = hak_run_in_child(misuses[i].fn);
        check_report(&r, misuses[i].words);
    }
}

int main(void)
{
    hak_test_begin("test_invalid_free");
    RUN_CASE(every_misuse_is_reported);
    return 0;
}
