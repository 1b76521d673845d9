/* The foreign cache (src/free.c, docs/design.md §5.5): a thread whose frees
 * are mostly of other threads' blocks keeps them for its own next mallocs;
 * one whose frees are mostly of its own sends the others' back. Checked
 * here: which of the two a thread does, that blocks handed around that way
 * keep their contents and are never handed out twice, and that a thread's
 * exit gives the blocks it kept back to their pages.
 *
 * Default variant only (the secure variant keeps no foreign block), and not
 * under ASan (its tracking takes every free through the counted path,
 * which keeps none). */
#include "hak_test.h"
#include "internal.h"   /* HAK_HEARTBEAT: how long a thread's window is */

#include <stdatomic.h>

#define SIZE ((size_t)48)
static const size_t one_size[] = {SIZE};
/* Three windows of the heartbeat, in mallocs (slow ones count for more),
 * so that at least one whole window lies inside the loop. */
#define LOOP (3 * HAK_HEARTBEAT)

/* A thread that allocates 2 x `count` blocks (of the sizes given in turn),
 * fills them, frees every other one and hands the rest over, then waits
 * until told to leave. Its pages stay its own meanwhile: full, they would
 * be abandoned, and the thread freeing their blocks would adopt them
 * (design.md §5.1) and take their blocks back through them, cache or not. */
typedef struct {
    size_t count, kinds;
    const size_t *sizes;   /* block i has sizes[i % kinds] bytes */
    void **blocks;
    pthread_barrier_t handed, done;
} producer_t;

static size_t size_of(const producer_t *p, size_t i) { return p->sizes[i % p->kinds]; }

static void *producer(void *arg)
{
    producer_t *p = arg;
    hak_thread_own_heap();
    void **others = calloc(p->count, sizeof *others);
    CHECK(others != NULL);
    for (size_t i = 0; i < p->count; i++) {
        size_t size = size_of(p, i);
        CHECK((others[i] = malloc(size)) != NULL && (p->blocks[i] = malloc(size)) != NULL);
        hak_fill(p->blocks[i], size, hak_seed_of(p->blocks[i], size));
    }
    for (size_t i = 0; i < p->count; i++) free(others[i]);   /* (the owner's free takes a full page back) */
    free(others);
    pthread_barrier_wait(&p->handed);
    pthread_barrier_wait(&p->done);
    return NULL;
}

static pthread_t producer_start(producer_t *p, size_t count, const size_t *sizes, size_t kinds)
{
    p->count = count;
    p->sizes = sizes;
    p->kinds = kinds;
    p->blocks = calloc(count, sizeof *p->blocks);
    CHECK(p->blocks != NULL);
    pthread_barrier_init(&p->handed, NULL, 2);
    pthread_barrier_init(&p->done, NULL, 2);
    pthread_t t = hak_thread_start(producer, p);
    pthread_barrier_wait(&p->handed);
    return t;
}

static void producer_finish(producer_t *p, pthread_t t)
{
    pthread_barrier_wait(&p->done);
    pthread_join(t, NULL);
    pthread_barrier_destroy(&p->handed);
    pthread_barrier_destroy(&p->done);
    free(p->blocks);
}

/* Whether q is one of the producer's first n blocks. */
static bool is_producers(const producer_t *p, size_t n, const void *q)
{
    for (size_t i = 0; i < n; i++)
        if (p->blocks[i] == q) return true;
    return false;
}

/* Each case's consumer is a new thread: a thread's heap starts out keeping
 * nothing, and a recycled one is cleared. */
typedef struct { void (*body)(void); } body_t;

static void *run_body(void *arg)
{
    ((body_t *)arg)->body();
    return NULL;
}

static void in_new_thread(void (*body)(void))
{
    body_t b = {body};
    pthread_join(hak_thread_start(run_body, &b), NULL);
}

/* This thread frees the producer's blocks one per malloc of its own (every
 * free is of another thread's block): from its second window on, its
 * mallocs get back blocks it freed of the producer's, contents intact. */
static void consumer_body(void)
{
    hak_thread_own_heap();
    producer_t p;
    pthread_t t = producer_start(&p, LOOP, one_size, 1);
    void **mine = calloc(LOOP, sizeof *mine);
    CHECK(mine != NULL);
    size_t reused = 0;
    for (size_t i = 0; i < LOOP; i++) {
        CHECK_PATTERN(p.blocks[i], SIZE, hak_seed_of(p.blocks[i], SIZE));
        free(p.blocks[i]);
        CHECK((mine[i] = malloc(SIZE)) != NULL);
        if (i >= LOOP / 2 && is_producers(&p, i + 1, mine[i])) reused++;
        hak_fill(mine[i], SIZE, hak_seed_of(mine[i], SIZE) + 1);
    }
    /* The last window: each malloc could take a block it just freed, but a
     * class's blocks are taken only once half the cache's bound is kept. */
    CHECKF(reused >= LOOP / 4, "%zu of the last %zu mallocs reused a block freed of the producer's",
           reused, (size_t)LOOP / 2);
    for (size_t i = 0; i < LOOP; i++) {
        CHECK_PATTERN(mine[i], SIZE, hak_seed_of(mine[i], SIZE) + 1);
        free(mine[i]);
    }
    free(mine);
    producer_finish(&p, t);
}

static void consumer_takes_the_blocks_it_freed(void) { in_new_thread(consumer_body); }

/* A thread keeping the producer's blocks (as above) frees one twice: the
 * first free keeps it, tagged free, and the second is reported, as a
 * second free of any block is. (In a child: the report ends it.) */
static void double_free_body(void)
{
    hak_thread_own_heap();
    producer_t p;
    pthread_t t = producer_start(&p, LOOP, one_size, 1);
    size_t taken_back = 0;   /* of the last 64 mallocs, those that took the block just freed */
    for (size_t i = 0; i + 1 < LOOP; i++) {
        free(p.blocks[i]);
        void *q = malloc(SIZE);
        CHECK(q != NULL);
        if (i + 65 >= LOOP) taken_back += q == p.blocks[i];
    }
    CHECKF(taken_back >= 32, "not keeping: %zu of the last 64 mallocs took the block just freed", taken_back);
    void *last = p.blocks[LOOP - 1];
    free(last);
    hak_announce(last);
    free(hak_opaque_ptr(last));
    producer_finish(&p, t);   /* (not reached) */
}

/* `body` in a new thread of a forked child (its double free ends the
 * child): the child's report in *r, or false where ThreadSanitizer refuses
 * threads after a fork (the case is skipped). */
#if defined(__SANITIZE_THREAD__)
static bool run_in_child_thread(void (*body)(void), hak_child_report *r)
{
    (void)body;
    (void)r;
    printf("     skipped: the child starts threads, which ThreadSanitizer refuses after a fork\n");
    return false;
}
#else
static void (*child_body)(void);
static void child_body_in_new_thread(void) { in_new_thread(child_body); }

static bool run_in_child_thread(void (*body)(void), hak_child_report *r)
{
    child_body = body;
    *r = hak_run_in_child(child_body_in_new_thread);
    return true;
}
#endif

static void double_free_of_a_kept_block(void)
{
    hak_child_report r;
    if (run_in_child_thread(double_free_body, &r)) hak_check_misuse_report(&r, "double free");
}

/* This thread frees mostly its own blocks, and one of the producer's in 64:
 * those go back to the producer's pages, and none of its mallocs gets one. */
static void owner_body(void)
{
    hak_thread_own_heap();
    producer_t p;
    size_t theirs = LOOP / 64;
    pthread_t t = producer_start(&p, theirs, one_size, 1);
    size_t freed = 0;
    for (size_t i = 0; i < LOOP; i++) {
        void *q = malloc(SIZE);
        CHECK(q != NULL);
        CHECKF(!is_producers(&p, freed, q), "malloc %zu took a block freed of the producer's", i);
        free(q);
        if (i % 64 == 63 && freed < theirs) free(p.blocks[freed++]);
    }
    producer_finish(&p, t);
}

static void owner_sends_them_back(void) { in_new_thread(owner_body); }

/* Threads exchanging blocks of every small and medium size in rounds, as
 * the lab's `exchange` does: each allocates a batch, fills it, and frees the
 * batch another thread filled in the round before, checking it. A block
 * handed out twice would show as a pattern overwritten. */
enum { EXCHANGERS = 4 };

static size_t exchange_rounds, exchange_batch;
static hak_item *outbox[EXCHANGERS][2];
static pthread_barrier_t round_end;

static void *exchanger(void *arg)
{
    size_t id = (size_t)arg;
    hak_rng rng = hak_rng_seed(77 + id);
    for (size_t r = 0; r < exchange_rounds; r++) {
        hak_item *mine = outbox[id][r % 2];
        hak_item *theirs = r > 0 ? outbox[(id + 1 + (r - 1) % (EXCHANGERS - 1)) % EXCHANGERS][(r - 1) % 2] : NULL;
        for (size_t i = 0; i < exchange_batch; i++) {
            size_t top = (size_t)16 << hak_rng_range(&rng, 0, 10);   /* log-uniform, 9 B to 16 KiB */
            mine[i] = hak_item_new(hak_rng_range(&rng, top / 2 + 1, top));
            if (theirs) hak_item_verify_free(theirs[i]);
        }
        pthread_barrier_wait(&round_end);
    }
    return NULL;
}

static void exchange_keeps_contents(void)
{
    exchange_rounds = hak_scale(40, 400);
    exchange_batch = 2000;
    for (size_t i = 0; i < EXCHANGERS; i++)
        for (size_t h = 0; h < 2; h++) CHECK((outbox[i][h] = calloc(exchange_batch, sizeof(hak_item))) != NULL);
    pthread_barrier_init(&round_end, NULL, EXCHANGERS);
    pthread_t t[EXCHANGERS];
    for (size_t i = 0; i < EXCHANGERS; i++) t[i] = hak_thread_start(exchanger, (void *)i);
    for (size_t i = 0; i < EXCHANGERS; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&round_end);
    for (size_t i = 0; i < EXCHANGERS; i++) {   /* the last round's batches */
        for (size_t b = 0; b < exchange_batch; b++) hak_item_verify_free(outbox[i][(exchange_rounds - 1) % 2][b]);
        for (size_t h = 0; h < 2; h++) free(outbox[i][h]);
    }
}

/* A consumer that keeps blocks of many classes exits: they go back to the
 * producer's pages, which are empty once the producer's own blocks are
 * freed too. The classes' live blocks in hakmem's report (what their pages
 * count used) are none then; kept for good, up to HAK_FOREIGN_BLOCKS of
 * each class would stay counted in pages nobody could free. */
enum { CLASSES = 12, PER_CLASS = LOOP / CLASSES };   /* the consumer frees LOOP of them */
/* (Not SIZE's, nor 64 and 128: a young thread's first blocks come from the
 * shared heap, a cache line or more each.) */
static const size_t class_size[CLASSES] = {80, 96, 112, 144, 176, 208, 240, 288, 352, 416, 480, 576};

static void *consumer_keeping(void *arg)
{
    producer_t *p = arg;
    hak_rng rng = hak_rng_seed(5);
    hak_thread_own_heap();
    for (size_t i = p->count - 1; i > 0; i--) {   /* random order: the blocks it keeps lie in many pages */
        size_t j = hak_rng_range(&rng, 0, i);
        void *x = p->blocks[i];
        p->blocks[i] = p->blocks[j];
        p->blocks[j] = x;
    }
    void **mine = calloc(p->count, sizeof *mine);
    CHECK(mine != NULL);
    for (size_t i = 0; i < p->count; i++) {
        size_t size = hak_malloc_usable_size(p->blocks[i]);
        free(p->blocks[i]);
        CHECK((mine[i] = malloc(size)) != NULL);
    }
    for (size_t i = 0; i < p->count; i++) free(mine[i]);   /* the producer's among them are kept again */
    free(mine);
    return NULL;
}

/* A class's live blocks in hakmem's report. */
static uint64_t class_live(size_t size)
{
    const char *json = hak_stats_json();
    char key[40];
    snprintf(key, sizeof key, "{\"size\":%zu,", size);
    const char *c = strstr(json, key);
    if (c == NULL) return 0;
    const char *f = strstr(c, "\"live\":");
    CHECK(f != NULL);
    return strtoull(f + strlen("\"live\":"), NULL, 10);
}

static void exit_gives_kept_blocks_back(void)
{
    uint64_t before[CLASSES];   /* (the C library's own blocks: a thread's, of 288 bytes) */
    hak_collect();
    for (size_t c = 0; c < CLASSES; c++) before[c] = class_live(class_size[c]);
    producer_t p;
    pthread_t t = producer_start(&p, CLASSES * PER_CLASS, class_size, CLASSES);
    pthread_join(hak_thread_start(consumer_keeping, &p), NULL);
    producer_finish(&p, t);
    hak_collect();   /* (pages published with none of their blocks live go back: the sweep) */
    for (size_t c = 0; c < CLASSES; c++) {
        uint64_t live = class_live(class_size[c]);
        CHECKF(live <= before[c], "%llu blocks of %zu bytes counted live, %llu before",
               (unsigned long long)live, class_size[c], (unsigned long long)before[c]);
    }
}

/* A kept block that would be its page's last in use but those the thread
 * keeps of its class is not kept: the class's kept blocks go back with it
 * (kept, they would pin the page for as long as the thread stays idle).
 * Here the page is a producer's, with LAST live blocks; a consumer that
 * keeps (as consumer_body's) frees them all, then idles while the
 * producer exits: the page, all of its blocks back, is freed with it, and
 * none of its blocks is counted live. */
#define LAST_SIZE ((size_t)1152)   /* (a class no other case uses, nor the C library) */
static const size_t last_size[] = {LAST_SIZE};
enum { LAST = 4 };

typedef struct {
    producer_t *keeping, *last;
    pthread_barrier_t freed, leave;
} idler_t;

static void *idler(void *arg)
{
    idler_t *c = arg;
    hak_thread_own_heap();
    size_t taken_back = 0;   /* of the last 64 mallocs, those that took the block just freed */
    void **mine = calloc(LOOP, sizeof *mine);
    CHECK(mine != NULL);
    for (size_t i = 0; i < LOOP; i++) {
        free(c->keeping->blocks[i]);
        CHECK((mine[i] = malloc(SIZE)) != NULL);
        if (i + 64 >= LOOP) taken_back += mine[i] == c->keeping->blocks[i];
    }
    CHECKF(taken_back >= 32, "not keeping: %zu of the last 64 mallocs took the block just freed", taken_back);
    for (size_t i = 0; i < LAST; i++) free(c->last->blocks[i]);
    pthread_barrier_wait(&c->freed);
    pthread_barrier_wait(&c->leave);   /* (idle meanwhile: no malloc, no heartbeat) */
    for (size_t i = 0; i < LOOP; i++) free(mine[i]);
    free(mine);
    return NULL;
}

static void last_block_takes_the_kept_ones_back(void)
{
    hak_collect();
    uint64_t before = class_live(LAST_SIZE);
    producer_t keeping, last;
    pthread_t tk = producer_start(&keeping, LOOP, one_size, 1);
    pthread_t tl = producer_start(&last, LAST, last_size, 1);
    idler_t c = {.keeping = &keeping, .last = &last};
    pthread_barrier_init(&c.freed, NULL, 2);
    pthread_barrier_init(&c.leave, NULL, 2);
    pthread_t tc = hak_thread_start(idler, &c);
    pthread_barrier_wait(&c.freed);
    producer_finish(&last, tl);   /* its exit gathers the page's blocks freed by the idler */
    hak_collect();
    uint64_t live = class_live(LAST_SIZE);
    CHECKF(live <= before, "%llu blocks of %zu bytes counted live, %llu before: the idler kept them",
           (unsigned long long)live, LAST_SIZE, (unsigned long long)before);
    pthread_barrier_wait(&c.leave);
    pthread_join(tc, NULL);
    pthread_barrier_destroy(&c.freed);
    pthread_barrier_destroy(&c.leave);
    producer_finish(&keeping, tk);
}

/* A block kept already, freed again when its page has no block in use but
 * those this thread keeps: that free sends the class's kept blocks back to
 * the page (free.c, keep_unless_last). It is reported before any block is
 * sent: sent first, the page's owner could hand them out, the freed block
 * among them, before the report (a review found the check after the
 * sending; the owner's malloc in between then took the block twice). The
 * child's SIGABRT handler looks at the page's remote-free list when the
 * report aborts. */
static hak_page_t *watched_page;

static void check_nothing_sent(int sig)
{
    static const char sent[] = "kept blocks were sent back before the report\n";
    if (hak_xlist_first(atomic_load(&watched_page->xthread_free)) != NULL) CHECK(write(2, sent, sizeof sent - 1) > 0);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void double_free_of_the_last_body(void)
{
    hak_thread_own_heap();
    producer_t keeping, last;
    pthread_t tk = producer_start(&keeping, LOOP, one_size, 1);
    pthread_t tl = producer_start(&last, LAST, last_size, 1);
    size_t taken_back = 0;   /* (as in idler) */
    for (size_t i = 0; i < LOOP; i++) {
        free(keeping.blocks[i]);
        void *q = malloc(SIZE);
        CHECK(q != NULL);
        if (i + 64 >= LOOP) taken_back += q == keeping.blocks[i];
    }
    CHECKF(taken_back >= 32, "not keeping: %zu of the last 64 mallocs took the block just freed", taken_back);
    for (size_t i = 0; i + 1 < LAST; i++) free(last.blocks[i]);   /* kept: the page's last block is still in use */
    void *again = last.blocks[0];
    watched_page = hak_page_of(hak_segment_of(again), again);
    CHECKF(hak_xlist_first(atomic_load(&watched_page->xthread_free)) == NULL, "set up: the blocks were sent, not kept");
    CHECK(signal(SIGABRT, check_nothing_sent) != SIG_ERR);
    hak_announce(again);
    free(hak_opaque_ptr(again));
    producer_finish(&last, tl);   /* (not reached) */
    producer_finish(&keeping, tk);
}

static void double_free_that_sends_kept_blocks_back(void)
{
    hak_child_report r;
    if (!run_in_child_thread(double_free_of_the_last_body, &r)) return;
    CHECKF(strstr(r.text, "sent back") == NULL, "the check came after the sending: %s", r.text);
    hak_check_misuse_report(&r, "double free");
}

int main(void)
{
    hak_test_begin("test_foreign_frees");
    RUN_CASE(consumer_takes_the_blocks_it_freed);
    RUN_CASE(owner_sends_them_back);
    RUN_CASE(double_free_of_a_kept_block);
    RUN_CASE(double_free_that_sends_kept_blocks_back);
    RUN_CASE(exit_gives_kept_blocks_back);   /* (before the exchange, which leaves blocks of every class) */
    RUN_CASE(last_block_takes_the_kept_ones_back);
    RUN_CASE(exchange_keeps_contents);
    return 0;
}
