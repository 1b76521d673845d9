/* The guard page at the end of every page's span (the secure variant;
 * src/secure.c, "page guards").
 *
 * - A linear overflow off the last block of a page (a small class, 48 B,
 *   and a medium one, 20 KiB), byte by byte from the end of its request
 *   to the end of the span, in a forked child: in the secure variant the
 *   child must die by SIGSEGV, its fault address exactly the first byte
 *   of the span's last OS page (every byte before it was writable, so no
 *   block overlaps the guard and the guard is where page.c leaves room for
 *   it); in the default variant the span is the child's own memory and
 *   the child must run to its end.
 * - Cycles of allocating blocks of many classes (small, medium, large),
 *   filling every byte handed out, verifying and freeing them all, so that
 *   spans are retired and taken again as pages of other sizes and as large
 *   blocks, through every way a page leaves (its owner retiring it,
 *   malloc_trim, a thread's exit, frees into abandoned pages, a forked
 *   child): no valid access may fault and every block keeps its contents;
 *   in the secure variant every page's span has its guard in place (the
 *   guard's byte is unreadable, write(2) from it fails with EFAULT) and no
 *   other slice of a page or a large block is guarded.
 * - Secure variant, HAKMEM_VERBOSE=1 (test_page_guards_secure_verbose,
 *   this case only): with the process's mappings used up
 *   (vm.max_map_count) in a forked child, new pages go unguarded with a
 *   warning, and work as any page.
 *
 * The page descriptors are read through src/internal.h (the variant's
 * layout: the secure build defines HAKMEM_SECURE). */
#include "hak_test.h"
#include "internal.h"

#ifdef HAK_TEST_SECURE
#define VARIANT_NAME "secure"
#else
#define VARIANT_NAME "default"
#endif

/* The bytes to request for a block of exactly `block_size` (the secure
 * variant's canary trailer takes HAK_REQUEST(0) of them). */
static size_t request_for(size_t block_size) { return block_size - HAK_REQUEST(0); }

static hak_page_t *page_of(const void *p) { return hak_page_of(hak_segment_of(p), p); }

static uint8_t *span_end(const hak_page_t *page) { return hak_page_area(page) + (size_t)page->slice_count * HAK_SLICE_SIZE; }

/* ---- an overflow off a page's last block ---------------------------------- */

/* Writes "<what> 0x<hex>\n" on stderr with write(2) only (a signal handler
 * calls it). */
static void say_address(const char *what, const void *p)
{
    char line[64];
    size_t n = strlen(what);
    memcpy(line, what, n);
    line[n++] = ' ';
    line[n++] = '0';
    line[n++] = 'x';
    uintptr_t v = (uintptr_t)p;
    int digits = 1;
    while (digits < 16 && (v >> (4 * digits)) != 0) digits++;
    for (int i = digits - 1; i >= 0; i--) line[n++] = "0123456789abcdef"[(v >> (4 * i)) & 15];
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, n);
    (void)w;
}

/* Says where the fault is, then returns with the default action back in
 * place: the write faults again and the child dies by SIGSEGV. */
static void on_fault(int sig, siginfo_t *info, void *context)
{
    (void)sig;
    (void)context;
    say_address("fault at", info->si_addr);
}

/* All `reserved` blocks of one page of blocks of `block_size`, handed to
 * this thread: allocates until a page whose blocks are all ours turns up
 * (the first page of the class may hold blocks allocated before). */
static hak_page_t *fill_a_page(size_t block_size)
{
    enum { MAX_PAGES = 8 };
    hak_page_t *pages[MAX_PAGES] = {0};
    size_t counts[MAX_PAGES] = {0}, seen = 0;
    for (size_t i = 0; i < 3 * HAK_SLICE_SIZE; i++) {
        void *p = malloc(request_for(block_size));
        CHECK(p != NULL);
        hak_page_t *page = page_of(p);
        CHECK(page->block_size == block_size);
        size_t k = 0;
        while (k < seen && pages[k] != page) k++;
        CHECKF(k < MAX_PAGES, "blocks of %zu bytes spread over more than %d pages", block_size, MAX_PAGES);
        if (k == seen) pages[seen++] = page;
        if (++counts[k] == page->reserved) return page;
    }
    hak_test_fail(__FILE__, __LINE__, "no page of %zu-byte blocks filled", block_size);
}

static void overflow_off_last_block_of(size_t block_size)
{
    hak_thread_own_heap();
    hak_page_t *page = fill_a_page(block_size);
    uint8_t *last = hak_page_area(page) + (size_t)(page->reserved - 1) * block_size;
    uint8_t *end = span_end(page);
    say_address("guard at", end - HAK_OS_PAGE);
#ifdef HAK_TEST_SECURE
    CHECK(page[page->slice_count - 1].guarded);
#endif
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
    CHECK(sigaction(SIGSEGV, &sa, NULL) == 0);
    volatile uint8_t *q = hak_opaque_ptr(last + request_for(block_size));
    for (; q < end; q++) *q = 'x';
    fprintf(stderr, "wrote up to the end of the span\n");
}

static void overflow_off_a_small_page(void) { overflow_off_last_block_of(48); }
static void overflow_off_a_medium_page(void) { overflow_off_last_block_of(20 * KiB); }

/* The address after `what` on the child's stderr (0 if absent). */
static uintptr_t reported(const hak_child_report *r, const char *what)
{
    const char *at = strstr(r->text, what);
    return at == NULL ? 0 : (uintptr_t)strtoull(at + strlen(what), NULL, 16);
}

static void check_overflow_stops_at_guard(void (*fn)(void))
{
    hak_child_report r = hak_run_in_child(fn);
    uintptr_t guard = reported(&r, "guard at "), fault = reported(&r, "fault at ");
    CHECKF(guard != 0, "the child did not get to its overflow: %s", r.text);
#ifdef HAK_TEST_SECURE
    CHECKF(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGSEGV, "child status 0x%x, want death by SIGSEGV",
           r.status);
    CHECKF(fault == guard, "fault at 0x%lx, the guard page is at 0x%lx", (unsigned long)fault,
           (unsigned long)guard);
#else
    CHECKF(fault == 0, "fault at 0x%lx, inside the child's own span", (unsigned long)fault);
    CHECK_CHILD_EXITED_0(r.status);
#endif
}

static void overflow_off_a_page_stops_at_its_guard(void)
{
    check_overflow_stops_at_guard(overflow_off_a_small_page);
    check_overflow_stops_at_guard(overflow_off_a_medium_page);
}

/* ---- valid accesses across page lives --------------------------------------- */

static int probe[2];   /* a pipe */

#ifdef HAK_TEST_SECURE
/* Can this process read the byte at p? write(2) from an inaccessible
 * address fails with EFAULT instead of faulting. */
static bool readable(const void *p)
{
    if (write(probe[1], p, 1) == 1) {
        char c;
        CHECK(read(probe[0], &c, 1) == 1);
        return true;
    }
    CHECKF(errno == EFAULT, "write from %p: %s", p, strerror(errno));
    return false;
}

/* The span holding block p: a page's ends in its guard and no other of
 * its slices is guarded; a large block's has no page guard. */
static void check_span_guards(const void *p)
{
    const hak_page_t *span = page_of(p);
    bool page = span->span_kind == HAK_SPAN_PAGE;
    size_t n = span->slice_count;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *guard = hak_page_area(&span[i]) + HAK_SLICE_SIZE - HAK_OS_PAGE;
        bool want = page && i == n - 1;
        CHECKF(span[i].guarded == want, "slice %zu of %zu of the %s span %p: guarded %d", i, n,
               page ? "page" : "large block", (void *)hak_page_area(span), span[i].guarded);
        if (page) CHECKF(readable(guard) != want, "slice %zu of %zu of page %p: guard %p readable %d", i, n,
                         (void *)hak_page_area(span), (const void *)guard, !want);
    }
}
#else
static void check_span_guards(const void *p) { (void)p; }   /* the default variant has none */
#endif

/* Requests of every tier: exact block sizes (the last block of a page then
 * ends where its room does) and sizes in between. */
static const size_t exact_blocks[] = { 16, 48, 128, 640, 3072, 8192, 10240, 20480, 65536, 98304, 262144, 1048576 };
static const size_t other_sizes[] = { 1, 100, 1000, 5000, 9000, 40000, 150000, 700000, 1500 * KiB, 3 * MiB };

typedef struct {
    void *p;
    size_t n;
} block_t;

enum { CLASSES_PER_CYCLE = 4, BYTES_PER_CLASS = 512 * 1024, MAX_BLOCKS = CLASSES_PER_CYCLE * BYTES_PER_CLASS / 16 };
static block_t blocks[MAX_BLOCKS];
static size_t block_count;

static size_t pick_size(hak_rng *rng)
{
    size_t exact = sizeof exact_blocks / sizeof exact_blocks[0], other = sizeof other_sizes / sizeof other_sizes[0];
    size_t i = (size_t)(hak_rng_next(rng) % (exact + other));
    return i < exact ? request_for(exact_blocks[i]) : other_sizes[i - exact];
}

/* A cycle's blocks: a few sizes, about BYTES_PER_CLASS of each (at least
 * two blocks), every byte handed out filled, each span's guards checked. */
static void allocate_cycle(uint64_t seed)
{
    hak_rng rng = hak_rng_seed(seed);
    block_count = 0;
    for (int c = 0; c < CLASSES_PER_CYCLE; c++) {
        size_t size = pick_size(&rng), count = BYTES_PER_CLASS / (size < 16 ? 16 : size);
        if (count < 2) count = 2;
        const hak_page_t *last_span = NULL;
        for (size_t i = 0; i < count; i++) {
            void *p = malloc(size);
            CHECKF(p != NULL, "malloc(%zu)", size);
            size_t n = malloc_usable_size(p);
            hak_fill(p, n, hak_seed_of(p, seed));
            blocks[block_count++] = (block_t){ p, n };
            if (page_of(p) != last_span) check_span_guards(p);   /* once per run of blocks of a span */
            last_span = page_of(p);
        }
    }
}

static void verify_and_free_cycle(uint64_t seed)
{
    for (size_t i = 0; i < block_count; i++) CHECK_PATTERN(blocks[i].p, blocks[i].n, hak_seed_of(blocks[i].p, seed));
    hak_rng rng = hak_rng_seed(~seed);
    for (size_t i = block_count; i > 1; i--) {   /* in random order */
        size_t j = (size_t)(hak_rng_next(&rng) % i);
        block_t b = blocks[j];
        blocks[j] = blocks[i - 1];
        blocks[i - 1] = b;
    }
    for (size_t i = 0; i < block_count; i++) free(blocks[i].p);
    block_count = 0;
}

static void *allocate_in_thread(void *seed)
{
    allocate_cycle((uint64_t)(uintptr_t)seed);
    return NULL;   /* exits with its blocks live: its pages are abandoned */
}

static void valid_accesses_never_fault(void)
{
    CHECK(pipe(probe) == 0);
    size_t cycles = hak_scale(40, 400);
    for (uint64_t cycle = 1; cycle <= cycles; cycle++) {
        if (cycle % 7 == 0) {   /* blocks of an exited thread, freed into its abandoned pages */
            pthread_join(hak_thread_start(allocate_in_thread, (void *)(uintptr_t)cycle), NULL);
        } else if (cycle % 11 == 0) {   /* a forked child's cycle (its pages are copies) */
            fflush(NULL);
            pid_t pid = fork();
            CHECK(pid >= 0);
            if (pid == 0) {
                allocate_cycle(cycle);
                verify_and_free_cycle(cycle);
                allocate_cycle(cycle + 1);
                verify_and_free_cycle(cycle + 1);
                _exit(0);
            }
            int status = hak_wait_child(pid, 60);
            CHECK_CHILD_EXITED_0(status);
            allocate_cycle(cycle);
        } else {
            allocate_cycle(cycle);
        }
        verify_and_free_cycle(cycle);
        if (cycle % 5 == 0) malloc_trim(0);   /* empty pages freed, free spans purged */
    }
    close(probe[0]);
    close(probe[1]);
}

/* ---- out of mappings ------------------------------------------------------ */

#ifdef HAK_TEST_SECURE
/* Uses up the process's mappings (every other page of a reservation made
 * inaccessible, each splitting one more) but a few, then takes 64 new
 * small pages: most cannot have their guard and must work without it. */
static void pages_go_unguarded_without_mappings(void)
{
    enum { PAGES = 64, SPARE = 8 };
    hak_thread_own_heap();
    /* Free slices that held no page (a large block's): the pages below
     * need guards of their own, not ones left by earlier pages. */
    void *room = malloc(PAGES * HAK_SLICE_SIZE);
    CHECK(room != NULL);
    free(room);
    size_t most = 70000;
    uint8_t *area = mmap(NULL, 2 * most * HAK_OS_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    CHECK(area != MAP_FAILED);
    size_t split = 0;
    while (split < most && mprotect(area + 2 * split * HAK_OS_PAGE, HAK_OS_PAGE, PROT_NONE) == 0) split++;
    CHECKF(split < most, "%zu mprotect calls and still no limit", split);
    for (size_t i = 1; i <= SPARE; i++)   /* merged back: two mappings each */
        CHECK(mprotect(area + 2 * (split - i) * HAK_OS_PAGE, HAK_OS_PAGE, PROT_READ | PROT_WRITE) == 0);
    fprintf(stderr, "%zu mappings split\n", split);

    size_t size = request_for(4096), per_page = (HAK_SLICE_SIZE - HAK_OS_PAGE) / 4096, n = PAGES * per_page;
    static void *small[PAGES * HAK_SLICE_SIZE / 4096];
    for (size_t i = 0; i < n; i++) {
        CHECK((small[i] = malloc(size)) != NULL);
        hak_fill(small[i], size, hak_seed_of(small[i], 1));
    }
    static const hak_page_t *pages[PAGES + 2];
    size_t page_count = 0, unguarded = 0;
    for (size_t i = 0; i < n; i++) {
        CHECK_PATTERN(small[i], size, hak_seed_of(small[i], 1));
        const hak_page_t *page = page_of(small[i]);
        size_t k = 0;
        while (k < page_count && pages[k] != page) k++;
        if (k < page_count) continue;
        CHECK(page_count < PAGES + 2);
        pages[page_count++] = page;
        unguarded += !page->guarded;
    }
    for (size_t i = 0; i < n; i++) free(small[i]);
    fprintf(stderr, "%zu pages unguarded\n", unguarded);
    CHECKF(unguarded >= PAGES / 2, "only %zu of %d pages unguarded", unguarded, PAGES);
    munmap(area, 2 * most * HAK_OS_PAGE);
}

static void pages_go_unguarded_when_mappings_run_out(void)
{
    hak_child_report r = hak_run_in_child(pages_go_unguarded_without_mappings);
    CHECK_CHILD_EXITED_0(r.status);
    CHECKF(strstr(r.text, "hakmem: warning: no guard page at") != NULL, "no warning: %s", r.text);
}
#endif

int main(void)
{
    hak_test_begin("test_page_guards (" VARIANT_NAME ")");
#ifdef HAK_TEST_SECURE
    /* Alone, in a process whose free slices hold no guard left by pages
     * before (each of its pages needs a guard of its own). */
    if (getenv("HAKMEM_VERBOSE") != NULL) {
        RUN_CASE(pages_go_unguarded_when_mappings_run_out);
        return 0;
    }
#endif
    RUN_CASE(overflow_off_a_page_stops_at_its_guard);
    RUN_CASE(valid_accesses_never_fault);
    return 0;
}
