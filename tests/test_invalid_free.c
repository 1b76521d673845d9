/* Invalid frees are reported in one line and abort the process. Each case
 * runs in a forked child whose stderr the parent reads through a pipe; the
 * child prints the bad pointer first ("bad pointer 0x...") so the parent can
 * check the message names that same address. Normal build only: under the
 * sanitizers such frees are the sanitizer's business.
 *
 * The cases on small blocks first give the child's thread a heap of its own
 * (hak_thread_own_heap): a thread's first small blocks come from the shared
 * heap, whose frees all take the generic path, and the owner's fast path
 * (src/free.c, free_block) would go untested. */
#include "hak_test.h"

#include <stdatomic.h>
#include <sys/mman.h>

static void free_stack_pointer(void)
{
    char buffer[256];
    memset(buffer, 1, sizeof buffer);
    void *p = hak_opaque_ptr(buffer + 64); /* hidden from -Wfree-nonheap-object */
    hak_announce(p);
    free(p);
}

static void free_mmap_pointer(void)
{
    size_t len = 4 * MiB;
    char *region = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(region != MAP_FAILED);
    memset(region, 1, len);
    void *p = region + 2 * MiB + 16; /* looks like a block in a page */
    hak_announce(p);
    free(p);
}

static void double_free_small(void)
{
    hak_thread_own_heap();
    void *p = malloc(32);
    CHECK(p != NULL);
    memset(p, 1, 32);
    hak_announce(p);
    free(p);
    free(p);
}

/* A live block's address moved above the 48-bit address space (a
 * pointer the program mapped there, on a machine with 5-level paging, or
 * a corrupted one): it named the block's own segment, and the free went
 * on as the block's (here, with 4-level paging, it faulted at the tag). */
static void free_above_48_bits(void)
{
    hak_thread_own_heap();
    char *p = malloc(32);
    CHECK(p != NULL);
    void *high = (void *)((uintptr_t)p + ((uintptr_t)1 << 48));
    hak_announce(high);
    free(high);
}

/* Pointers inside a live block, freed by the thread that owns its page
 * (the fast path, whose exact check hak_block_check must send them to the
 * generic path): p + 1 of an 8 B block, p + 16 of a 32 B one. */
static void free_interior_odd(void)
{
    hak_thread_own_heap();
    char *p = malloc(8);
    CHECK(p != NULL);
    hak_announce(p + 1);
    free(p + 1);
}

static void free_interior_aligned(void)
{
    hak_thread_own_heap();
    char *p = malloc(32);
    CHECK(p != NULL);
    hak_announce(p + 16);
    free(p + 16);
}

/* A fresh page (one 64 KiB slice) of a class nothing else here uses: one
 * of its blocks is handed out (the first, or in the secure variant, which
 * carves in random order, any of the first extension's 5), the rest of the
 * extension is carved (on the free list), the blocks past it never carved.
 * Returns the page's start and the handed-out block. */
#define FRESH_CLASS 3072   /* a size class, so hak_good_size gives it in both variants */

static char *fresh_page(size_t *block_size, char **handed_out)
{
    hak_thread_own_heap();   /* the page is the thread's: its frees take the fast path */
    char *p = malloc(FRESH_CLASS - 64);   /* in that class, with the secure variant's canary too */
    CHECK(p != NULL);
    *block_size = hak_good_size(FRESH_CLASS);
    CHECK(*block_size == FRESH_CLASS);
    *handed_out = p;
    return (char *)((uintptr_t)p & ~(uintptr_t)(64 * KiB - 1));
}

static void free_carved_never_handed_out(void)
{
    size_t bs;
    char *p, *page = fresh_page(&bs, &p);
    char *carved = p == page ? page + bs : page;
    hak_announce(carved);
    free(carved);
}

static void free_never_carved(void)
{
    size_t bs;
    char *p, *page = fresh_page(&bs, &p);
    hak_announce(page + 12 * bs);
    free(page + 12 * bs);
}

static void realloc_freed_block_that_fits(void)
{
    hak_thread_own_heap();
    char *p = malloc(100);
    CHECK(p != NULL);
    free(p);
    hak_announce(p);
    hak_opaque_ptr(realloc(p, 50));
}

static void realloc_interior(void)
{
    hak_thread_own_heap();
    char *p = malloc(100);
    CHECK(p != NULL);
    hak_announce(p + 32);
    hak_opaque_ptr(realloc(p + 32, 10));
}

static void usable_size_interior(void)
{
    hak_thread_own_heap();
    char *p = malloc(64);
    CHECK(p != NULL);
    hak_announce(p + 16);
    printf("%zu\n", malloc_usable_size(p + 16));
}

/* A huge block shrunk by realloc keeps a small mapping (mremap in place);
 * the segment map marks its whole 32 MiB, where the OS may later place
 * other mappings. A pointer into one of those is foreign, not a crash
 * (issue #7.6). */
static void free_foreign_next_to_small_huge_segment(void)
{
    void *p = realloc(malloc(40 * MiB), 2 * MiB);
    CHECK(p != NULL);
    uintptr_t base = (uintptr_t)p & ~((uintptr_t)32 * MiB - 1);
    char *other = MAP_FAILED;
    for (uintptr_t at = base + 1 * MiB; other == MAP_FAILED && at < base + 32 * MiB; at += 1 * MiB)
        other = mmap((void *)at, 64 * KiB, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    CHECKF(other != MAP_FAILED, "no free 64 KiB in the 32 MiB at %#lx", (unsigned long)base);
    hak_announce(other + 64);
    free(other + 64);
}

static void double_free_of_size(size_t size)
{
    char *p = malloc(size);
    CHECK(p != NULL);
    memset(p, 1, size);
    hak_announce(p);
    free(p);
    free(p);
}

static void double_free_medium(void) { double_free_of_size(100 * KiB); }
static void double_free_large(void) { double_free_of_size(2 * MiB); }
static void double_free_huge(void) { double_free_of_size(40 * MiB); }
/* The same misuses by a thread that does not own the page: its frees take
 * the remote route (src/free.c, free_in_slice), whose exact check must
 * catch them as the owner's does: the slice's check for a one-slice page,
 * hak_page_is_block_start for a medium block's page of several slices. The
 * owner stays alive and keeps its heap, so the page stays owned. */
static struct { char *handed_out, *page; size_t block_size; } lent;
static pthread_barrier_t lent_ready;

/* The owner: takes its block (into `lent`), then waits for good. */
static void *lend(void *take_block)
{
    ((void (*)(void))take_block)();
    pthread_barrier_wait(&lent_ready);
    for (;;) pause();
    return NULL;
}

static void take_fresh_page(void) { lent.page = fresh_page(&lent.block_size, &lent.handed_out); }

static void take_medium_block(void)
{
    hak_thread_own_heap();
    lent.handed_out = malloc(12 * KiB);
    CHECK(lent.handed_out != NULL);
}

static void borrow(void (*take_block)(void))
{
    pthread_barrier_init(&lent_ready, NULL, 2);
    hak_thread_start(lend, (void *)take_block);
    pthread_barrier_wait(&lent_ready);
}

static void double_free_lent(void)
{
    hak_announce(lent.handed_out);
    free(lent.handed_out);
    free(lent.handed_out);
}

static void free_interior_lent(void)
{
    hak_announce(lent.handed_out + 16);
    free(lent.handed_out + 16);
}

static void double_free_remote(void) { borrow(take_fresh_page); double_free_lent(); }
static void free_interior_remote(void) { borrow(take_fresh_page); free_interior_lent(); }
static void double_free_medium_remote(void) { borrow(take_medium_block); double_free_lent(); }
static void free_interior_medium_remote(void) { borrow(take_medium_block); free_interior_lent(); }

static void free_carved_never_handed_out_remote(void)
{
    borrow(take_fresh_page);
    char *carved = lent.handed_out == lent.page ? lent.page + lent.block_size : lent.page;
    hak_announce(carved);
    free(carved);
}

static void free_never_carved_remote(void)
{
    borrow(take_fresh_page);
    hak_announce(lent.page + 12 * lent.block_size);
    free(lent.page + 12 * lent.block_size);
}

/* p + 16 of a medium block by its owner, whose free of a page of several
 * slices skips the fast path's check too. */
static void free_interior_medium(void)
{
    hak_thread_own_heap();
    char *p = malloc(12 * KiB);
    CHECK(p != NULL);
    hak_announce(p + 16);
    free(p + 16);
}

/* p + 16 of a large block (a span of its own) and of a huge one (a
 * segment of its own): as of any block, "a pointer inside". */
static void free_interior_of_size(size_t size)
{
    char *p = malloc(size);
    CHECK(p != NULL);
    hak_announce(p + 16);
    free(p + 16);
}
static void free_interior_large(void) { free_interior_of_size(2 * MiB); }
static void free_interior_huge(void) { free_interior_of_size(40 * MiB); }

/* A double free of a block whose owner has exited: its page is abandoned
 * (no owner), and the first free publishes it. */
static void *allocate_and_exit(void *arg)
{
    (void)arg;
    hak_thread_own_heap();
    return malloc(48);
}

static void double_free_after_owner_exit(void)
{
    void *p;
    pthread_t t = hak_thread_start(allocate_and_exit, NULL);
    CHECK(pthread_join(t, &p) == 0 && p != NULL);
    hak_announce(p);
    free(p);
    free(p);
}

/* A double free by a thread too young for a heap of its own: the block is
 * the shared heap's, and neither free is its owner's. */
static void *double_free_young(void *arg)
{
    (void)arg;
    void *p = malloc(48);
    CHECK(p != NULL);
    hak_announce(p);
    free(p);
    free(p);
    return NULL;
}

static void double_free_by_young_thread(void)
{
    pthread_join(hak_thread_start(double_free_young, NULL), NULL);
}

/* A double free racing the free of the block's page: the first free of the
 * last live block of an exited thread's page publishes the page, and
 * malloc_trim's sweep frees it while the second free runs. Whichever way
 * the race goes (the block's free tag still set, the page being freed, its
 * span free), the second free is reported. (It once slipped through when it
 * read the slice's block check before the page was freed and the tag after
 * the sweep had cleared it: 4% of trials returned normally.) The page has
 * many blocks carved, so that clearing their tags takes a while. */
static unsigned race_delay;   /* set by the parent before each child */
static atomic_bool trim_go;

static void *allocate_many_keep_one(void *arg)
{
    (void)arg;
    enum { N = 1000 };
    static void *blocks[N];
    hak_thread_own_heap();
    for (size_t i = 0; i < N; i++) CHECK((blocks[i] = malloc(48)) != NULL);
    for (size_t i = 1; i < N; i++) free(blocks[i]);
    return blocks[0];
}

static void *trim_when_told(void *arg)
{
    (void)arg;
    while (!atomic_load(&trim_go)) {}
    malloc_trim(0);
    return NULL;
}

static void double_free_racing_page_free(void)
{
    void *p;
    CHECK(pthread_join(hak_thread_start(allocate_many_keep_one, NULL), &p) == 0 && p != NULL);
    hak_announce(p);
    free(p);
    pthread_t trimmer = hak_thread_start(trim_when_told, NULL);
    atomic_store(&trim_go, true);
    for (volatile unsigned k = 0; k < race_delay; k++) {}
    free(p);
    pthread_join(trimmer, NULL);
}

static void a_double_free_racing_its_page_s_free_is_reported(void)
{
    for (race_delay = 0; race_delay < 20000; race_delay += 50) {
        hak_child_report r = hak_run_in_child(double_free_racing_page_free);
        hak_check_misuse_report(&r, "double free");
    }
}

/* Two threads letting go of one block at once, a misuse: both free it, or
 * one reallocs it as the other frees it. Of two frees, one gives the block
 * back and the other is reported (a block given back twice would sit twice
 * in its arena's free spans, the huge cache or the quarantine, and be
 * handed out twice). A realloc and a free may also run one after the
 * other (realloc in place first: the free then frees the block, as it
 * would have in that order). Either way the allocator goes on sound: the
 * child then takes two blocks of the size and checks they do not overlap.
 * The secure variant's quarantine may take both frees' copies of a block:
 * the second copy to leave it (at malloc_trim) is reported. The default
 * build's small and medium blocks are left out: two frees of one there can
 * both pass its plain test of the free tag, as the owner's free fast path
 * takes no atomic (README, Hardening). */
static struct { size_t size, align, resize; } race;   /* set by the parent before each child */
static void *race_block, *race_kept;
static atomic_int race_ready;

static void race_start(void)
{
    atomic_fetch_add(&race_ready, 1);
    while (atomic_load(&race_ready) < 2) {}
}

static void *free_in_race(void *arg)
{
    (void)arg;
    race_start();
    free(race_block);
    return NULL;
}

static void let_go_twice_at_once(void)
{
    race_block = race.align != 0 ? aligned_alloc(race.align, race.size) : malloc(race.size);
    CHECK(race_block != NULL);
    hak_announce(race_block);
    pthread_t other = hak_thread_start(free_in_race, NULL);
    race_start();
    if (race.resize != 0) race_kept = realloc(race_block, race.resize);   /* (kept, if it came first) */
    else free(race_block);
    pthread_join(other, NULL);
    malloc_trim(0);   /* (the secure variant's quarantines let their blocks go: both copies, if both frees got in) */
    unsigned char *a = malloc(race.size), *b = malloc(race.size);
    CHECK(a != NULL && b != NULL);
    memset(a, 0xa, race.size);
    memset(b, 0xb, race.size);
    CHECKF(a[0] == 0xa && a[race.size - 1] == 0xa, "two blocks overlap: %p and %p", (void *)a, (void *)b);
    free(a);
    free(b);
}

/* A huge or giant block's loser may touch its range (its descriptor, in
 * the secure variant its canary too) just as the winner unmaps it (free
 * out of the huge cache, realloc moving it by mremap): SIGSEGV, 1 run in
 * several hundred. The secure variant's loser reads a large block's canary
 * too, which the winner may have made inaccessible (SIGSEGV) or purged
 * (reported as an overflow). Stopped either way (README, Hardening). */
#ifdef HAK_TEST_SECURE
#define LOSER_READS true
#define LOSER_REPORT(words) "of 0x"
#else
#define LOSER_READS false
#define LOSER_REPORT(words) words
#endif

static void letting_go_of_a_block_twice_at_once_is_reported(void)
{
    /* words: in the report (a huge or giant block's loser may find it out
     * of the segment map and not yet in the huge cache: "not allocated by
     * hakmem (or freed already)"); ran_on: a realloc and a free may run
     * one after the other; faults: may stop by SIGSEGV instead. */
    static const struct { size_t size, align, resize; const char *words; bool ran_on, faults; } cases[] = {
#ifdef HAK_TEST_SECURE
        { 48, 0, 0, "double free", false, false }, { 12 * KiB, 0, 0, "double free", false, false },
#endif
        { 2 * MiB, 0, 0, LOSER_REPORT("double free"), false, LOSER_READS },
        { 40 * MiB, 0, 0, LOSER_REPORT("free of"), false, true },
        { 1 * MiB, 64 * MiB, 0, LOSER_REPORT("free of"), false, true },   /* giant: aligned past a segment */
        { 3 * MiB, 0, 2 * MiB, LOSER_REPORT("free"), true, LOSER_READS },   /* cut in place (the secure variant moves it) */
        { 40 * MiB, 0, 80 * MiB, LOSER_REPORT("free"), true, true },   /* grown in place or moved by mremap */
        { 40 * MiB, 0, 30 * MiB, LOSER_REPORT("free"), true, true },   /* a huge block cut in place */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        race.size = cases[c].size;
        race.align = cases[c].align;
        race.resize = cases[c].resize;
        for (int trial = 0; trial < 60; trial++) {
            hak_child_report r = hak_run_in_child(let_go_twice_at_once);
            if (cases[c].ran_on && WIFEXITED(r.status)) CHECK_CHILD_EXITED_0(r.status);
            else if (!(cases[c].faults && WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGSEGV))
                hak_check_misuse_report(&r, cases[c].words);
        }
    }
}

static const struct misuse {
    const char *name;
    void (*fn)(void);
    const char *words;   /* in hakmem's one-line message */
} misuses[] = {
    { "free of a stack pointer", free_stack_pointer, "not allocated by hakmem" },
    { "free of a block's address above the 48-bit space", free_above_48_bits, "not allocated by hakmem" },
    { "free of an mmap'd pointer", free_mmap_pointer, "not allocated by hakmem" },
    { "double free, small", double_free_small, "double free" },
    { "double free, medium", double_free_medium, "double free" },
    { "double free, large", double_free_large, "double free" },
    { "double free, huge", double_free_huge, "double free" },
    { "free of p + 1 of an 8 B block", free_interior_odd, "pointer inside" },
    { "free of p + 16 of a 32 B block", free_interior_aligned, "pointer inside" },
    { "free of a block carved but never handed out", free_carved_never_handed_out, "double free" },
    { "free of a block never carved", free_never_carved, "not allocated by hakmem" },
    { "double free by another thread", double_free_remote, "double free" },
    { "free of p + 16 by another thread", free_interior_remote, "pointer inside" },
    { "free of a block carved but never handed out, by another thread", free_carved_never_handed_out_remote,
      "double free" },
    { "free of a block never carved, by another thread", free_never_carved_remote, "not allocated by hakmem" },
    { "free of p + 16 of a 12 KiB block", free_interior_medium, "pointer inside" },
    { "free of p + 16 of a 2 MiB block", free_interior_large, "pointer inside" },
    { "free of p + 16 of a 40 MiB block", free_interior_huge, "pointer inside" },
    { "double free of a 12 KiB block by another thread", double_free_medium_remote, "double free" },
    { "free of p + 16 of a 12 KiB block by another thread", free_interior_medium_remote, "pointer inside" },
    { "double free after the owner exited", double_free_after_owner_exit, "double free" },
    { "double free by a thread without a heap of its own", double_free_by_young_thread, "double free" },
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
        hak_check_misuse_report(&r, misuses[i].words);
    }
}

int main(void)
{
    hak_test_begin("test_invalid_free");
    RUN_CASE(every_misuse_is_reported);
    RUN_CASE(a_double_free_racing_its_page_s_free_is_reported);
    RUN_CASE(letting_go_of_a_block_twice_at_once_is_reported);
    return 0;
}
