/* Pages: the three free lists, the direct table, remote frees, and the way
 * a full page is abandoned and then pulled by another allocating thread. */
#include <string.h>
#include "hak_test.h"
#include "internal.h"

enum { SIZE = 48 };   /* one small class; nothing else in this test uses it */

static hak_page_t *page_of(void *p) { return hak_page_of(hak_segment_of(p), p); }

/* A thread's first allocations come from the shared heap: the cases here
 * are about a heap of the thread's own, so each thread makes it first. */
static hak_heap_t *own_heap(void) {
  if (hak_heap_get() == &hak_heap_empty) hak_heap_release(hak_heap_thread_init());
  return hak_heap_get();
}
static uintptr_t xstate(hak_page_t *page) { return atomic_load(&page->xthread_free) & HAK_XSTATE_MASK; }
static bool xlist_empty(hak_page_t *page) { return hak_xlist_first(atomic_load(&page->xthread_free)) == NULL; }

/* The block heap->recent hands out next for class `bin`, or NULL. */
static void *recent_newest(hak_heap_t *heap, size_t bin) {
  if (!hak_bin_has_recent(bin)) return NULL;
  size_t i = bin - HAK_RECENT_FIRST, count = heap->recent_count[i];
  return count > 0 ? heap->recent[i].slot[count - 1] : NULL;
}

/* The page's owner word names this heap (with HAK_OWNER_COUNTED where every
 * call takes the generic paths: HAKMEM_STATS, or the ASan build's tracking). */
static bool owned_by(hak_page_t *page, hak_heap_t *heap) {
  return hak_page_owner(page) == ((uintptr_t)heap | hak_owner_counted);
}
static bool abandoned(hak_page_t *page) { return (hak_page_owner(page) & HAK_OWNER_ABANDONED) != 0; }

static void blocks_come_from_the_direct_page(void) {
  void *p = hak_malloc(SIZE);
  hak_heap_t *heap = hak_heap_get();
  hak_page_t *page = page_of(p);
  size_t bin = hak_bin_of(SIZE);
  CHECKF(owned_by(page, heap), "owned by this thread's heap");
  CHECKF(heap->queues[bin].first == page, "first in queue");
  CHECKF(heap->direct[(SIZE + 15) / 16] == (hak_owner_counted ? &hak_page_empty : page), "direct (unless every call is generic)");
  CHECKF(page->block_size == hak_bin_size(bin) && page->used == 1, "block size %u used %u", page->block_size, page->used);
  uint8_t *area = hak_page_area(page);
  CHECKF(((uint8_t *)p - area) % page->block_size == 0, "block boundary");
  hak_free(p);
  CHECKF(page->used == 0 && page->free == p, "a local free goes onto the free list");
  CHECKF(hak_malloc(SIZE) == p, "and the next malloc of the class takes it back (LIFO)");
  hak_free(p);
  CHECKF(owned_by(page, heap), "the only page of its class is kept");
}

/* Fill a whole page of `size` blocks; return its blocks in `out`
 * (reserved of them). */
static hak_page_t *fill_page_of(size_t size, void **out, size_t *count) {
  void *first = hak_malloc(size);
  hak_page_t *page = page_of(first);
  size_t n = 0;
  out[n++] = first;
  while (page->used < page->reserved) {
    void *p = hak_malloc(size);
    CHECKF(page_of(p) == page, "fills the current page first");
    out[n++] = p;
  }
  *count = n;
  return page;
}

static hak_page_t *fill_page(void **out, size_t *count) { return fill_page_of(SIZE, out, count); }

static void *blocks[1 << 16];

static void *free_half_remotely(void *arg) {
  size_t n = *(size_t *)arg;
  for (size_t i = 0; i < n; i += 2) hak_free(blocks[i]);
  return NULL;
}

static void remote_frees_are_gathered_by_the_owner(void) {
  size_t n;
  hak_page_t *page = fill_page(blocks, &n);
  pthread_t t;
  pthread_create(&t, NULL, free_half_remotely, &n);
  pthread_join(t, NULL);
  CHECKF(!xlist_empty(page) && page->used == n, "remote frees wait in xthread_free, still counted");
  /* The page is full and owned: the next malloc gathers the remote frees. */
  void *p = hak_malloc(SIZE);
  CHECKF(page_of(p) == page, "the owner reuses remotely freed blocks");
  CHECKF(xlist_empty(page) && page->used == n - (n + 1) / 2 + 1, "gathered: used %u", page->used);
  hak_free(p);
  for (size_t i = 1; i < n; i += 2) hak_free(blocks[i]);
}

/* A thread fills a page, moves on to a new one (so the full page is given
 * up), hands its blocks over and then stays idle: the case where pushing
 * frees to the owner would strand them (docs/design.md §5.1). */
static pthread_barrier_t filled, done;

static void *fill_and_idle(void *arg) {
  size_t *n = arg;
  own_heap();
  fill_page(blocks, n);
  blocks[*n] = hak_malloc(SIZE);   /* needs a new page: the full one is abandoned */
  (*n)++;
  pthread_barrier_wait(&filled);
  pthread_barrier_wait(&done);
  return NULL;
}

typedef struct { void *block; bool owned; } adoption_t;

static void *allocate_one(void *arg) {
  adoption_t *a = arg;
  own_heap();
  a->block = hak_malloc(SIZE);
  hak_page_t *page = page_of(a->block);
  a->owned = owned_by(page, hak_heap_get()) && xstate(page) == HAK_XSTATE_ACTIVE;
  return NULL;   /* at exit this thread gives the page up again */
}

static void abandoned_pages_are_pulled_by_allocating_threads(void) {
  size_t n = 0;
  pthread_t idle, t;
  pthread_barrier_init(&filled, NULL, 2);
  pthread_barrier_init(&done, NULL, 2);
  pthread_create(&idle, NULL, fill_and_idle, &n);
  pthread_barrier_wait(&filled);
  hak_page_t *full = page_of(blocks[0]);
  CHECKF(page_of(blocks[n - 1]) != full, "the last block came from a new page");
  CHECKF(xstate(full) == HAK_XSTATE_ABANDONED && abandoned(full), "full page abandoned");

  hak_free(blocks[0]);   /* first free into it: publishes it */
  CHECKF(xstate(full) == HAK_XSTATE_PUBLISHED, "published on the first remote free");
  hak_free(blocks[1]);
  CHECKF(xstate(full) == HAK_XSTATE_PUBLISHED, "later frees just push");

  /* Two blocks free of hundreds: not worth an adoption (its adopter would
   * be back after two mallocs), so a fresh page serves, and the published
   * page waits in the queue for more frees. */
  hak_heap_t *sweeper = own_heap();
  (void)hak_reclaim_sweep(sweeper, true, false);   /* (forgets the classes taken from so far) */
  adoption_t got = { NULL, false };
  pthread_create(&t, NULL, allocate_one, &got);
  pthread_join(t, NULL);
  CHECKF(page_of(got.block) != full && xstate(full) == HAK_XSTATE_PUBLISHED,
         "a page with 2 blocks free of %u is left to gather more", full->reserved);
  hak_free(got.block);
  /* Looked at and passed over, its class does not count as in use: the
   * sweep (which leaves classes in use for a later turn) takes the page
   * and publishes it again, and is complete, not retried while the page
   * waits for frees. */
  CHECKF(hak_reclaim_sweep(sweeper, true, false), "the sweep is complete");
  CHECKF(xstate(full) == HAK_XSTATE_PUBLISHED && abandoned(full), "the page is published again");

  size_t worth = full->reserved / 16;   /* owner.c: a sixteenth of its blocks free */
  for (size_t i = 2; i < worth; i++) hak_free(blocks[i]);
  got = (adoption_t){ NULL, false };
  pthread_create(&t, NULL, allocate_one, &got);
  pthread_join(t, NULL);
  CHECKF(page_of(got.block) == full && got.owned, "an allocating thread adopted the published page (%zu free)", worth);
  hak_free(got.block);
  for (size_t i = worth; i < n; i++) hak_free(blocks[i]);
  pthread_barrier_wait(&done);
  pthread_join(idle, NULL);
}

/* Which published page an allocating thread adopts (owner.c): of the full
 * pages a living thread gave up, the fullest of the first few with a
 * sixteenth of its blocks free (so sparse ones drain, and its adopter gets
 * more than a block or two); of pages of exited threads, the emptiest of
 * the first few (their blocks are freed by whoever holds them, and the
 * emptied pages are refilled first).
 * Classes nothing else here uses, so the queues hold only these pages. */
enum { LIVING_SIZE = 208, EXITED_SIZE = 240 };
enum { LIVING_PAGES = 4 };
static void *living[LIVING_PAGES][1024];
static size_t living_n[LIVING_PAGES];
static pthread_barrier_t pages_ready, may_exit;

static void *fill_pages_and_idle(void *arg) {
  (void)arg;
  own_heap();
  for (int i = 0; i < LIVING_PAGES; i++) fill_page_of(LIVING_SIZE, living[i], &living_n[i]);
  void *extra = hak_malloc(LIVING_SIZE);   /* a new page: the last full one is given up too */
  pthread_barrier_wait(&pages_ready);
  pthread_barrier_wait(&may_exit);
  hak_free(extra);
  return NULL;
}

typedef struct { size_t count; void *blocks[64]; pthread_barrier_t held, leave; } holder_t;

static void *hold_blocks_and_exit(void *arg) {
  holder_t *h = arg;
  own_heap();
  for (size_t i = 0; i < h->count; i++) h->blocks[i] = hak_malloc(EXITED_SIZE);
  pthread_barrier_wait(&h->held);
  pthread_barrier_wait(&h->leave);
  return NULL;   /* its page, with room, is published at exit */
}

static void *adopt_one(void *arg) {
  own_heap();
  *(void **)arg = hak_malloc(*(size_t *)arg);
  return NULL;
}

static hak_page_t *page_adopted_for(size_t size) {
  union { size_t size; void *block; } io = { .size = size };
  pthread_t t;
  pthread_create(&t, NULL, adopt_one, &io);
  pthread_join(t, NULL);
  hak_page_t *page = page_of(io.block);
  hak_free(io.block);
  return page;
}

static void adoption_takes_the_fullest_of_living_and_the_emptiest_of_exited(void) {
  /* A living thread's full pages, published sparse first, then with a
   * single block free (not worth an adoption), then nearly full (an eighth
   * free), then half full: the nearly full one is adopted. */
  pthread_t idle;
  pthread_barrier_init(&pages_ready, NULL, 2);
  pthread_barrier_init(&may_exit, NULL, 2);
  pthread_create(&idle, NULL, fill_pages_and_idle, NULL);
  pthread_barrier_wait(&pages_ready);
  size_t keep[LIVING_PAGES] = { 4, living_n[1] - 1, living_n[2] - living_n[2] / 8, living_n[3] / 2 };
  for (int i = 0; i < LIVING_PAGES; i++) {
    CHECKF(living_n[i] >= 32, "a page of many blocks (%zu)", living_n[i]);
    for (size_t j = keep[i]; j < living_n[i]; j++) hak_free(living[i][j]);
    CHECKF(xstate(page_of(living[i][0])) == HAK_XSTATE_PUBLISHED, "page %d published", i);
  }
  CHECKF(page_adopted_for(LIVING_SIZE) == page_of(living[2][0]), "the fullest candidate worth it is adopted");
  for (int i = 0; i < LIVING_PAGES; i++)
    for (size_t j = 0; j < keep[i]; j++) hak_free(living[i][j]);
  pthread_barrier_wait(&may_exit);
  pthread_join(idle, NULL);

  /* Two threads exit, the second with fewer blocks left in its page: its
   * page is adopted, though the other's is older. */
  static holder_t first = { .count = 40 }, second = { .count = 4 };
  holder_t *holders[] = { &first, &second };
  pthread_t threads[2];
  for (int i = 0; i < 2; i++) {   /* both hold their blocks at once: two pages */
    pthread_barrier_init(&holders[i]->held, NULL, 2);
    pthread_barrier_init(&holders[i]->leave, NULL, 2);
    pthread_create(&threads[i], NULL, hold_blocks_and_exit, holders[i]);
    pthread_barrier_wait(&holders[i]->held);
  }
  hak_page_t *older = page_of(first.blocks[0]), *emptier = page_of(second.blocks[0]);
  CHECKF(older != emptier, "two pages");
  for (int i = 0; i < 2; i++) {   /* the first exits first: its page is queued first */
    pthread_barrier_wait(&holders[i]->leave);
    pthread_join(threads[i], NULL);
  }
  CHECKF(xstate(older) == HAK_XSTATE_PUBLISHED && xstate(emptier) == HAK_XSTATE_PUBLISHED, "both published at exit");
  CHECKF(page_adopted_for(EXITED_SIZE) == emptier, "the emptiest is adopted, not the oldest or the fullest");
  for (int i = 0; i < 2; i++)
    for (size_t j = 0; j < holders[i]->count; j++) hak_free(holders[i]->blocks[j]);
}

static void free_block_twice(void) {
  void *p = hak_malloc(SIZE);
  hak_free(p);
  hak_free(p);
}

static void double_free_is_detected(void) {
  hak_child_report r = hak_run_in_child(free_block_twice);
  CHECKF(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGABRT, "status %d", r.status);
  CHECKF(strstr(r.text, "double free") != NULL, "no report in: %s", r.text);
}

/* A live block whose second word holds its page descriptor's address is
 * the program's data, not a free block. hakmem's slow paths leave such
 * addresses on the stack, where a local the program never set picks one up
 * (a struct copied whole, a member unused): the tag was the address itself,
 * and the block was stopped as freed at malloc_usable_size, realloc and
 * free. Small and medium (a ring class) blocks; in a child, which aborted
 * before. */
static void blocks_holding_their_descriptor(void) {
  static const size_t sizes[] = { SIZE, 20000 };
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    uintptr_t *p = hak_malloc(sizes[i]);
    p[1] = (uintptr_t)page_of(p);
    CHECKF(hak_malloc_usable_size(p) >= sizes[i], "size %zu", sizes[i]);
    uintptr_t *q = hak_realloc(p, sizes[i] * 2);
    CHECKF(q != NULL && q[1] == (uintptr_t)page_of(p), "size %zu: moved with its contents", sizes[i]);
    q[1] = (uintptr_t)page_of(q);
    hak_free(q);
  }
}

static void descriptor_address_is_data(void) {
  hak_child_report r = hak_run_in_child(blocks_holding_their_descriptor);
  CHECKF(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "status %d: %s", r.status, r.text);
}

/* The free fast path's block check (hak_slice_t in internal.h) accepts
 * exactly the starts of carved blocks, for every one-slice class and every
 * capacity, at every offset of the slice. */
static void block_check_is_exact(void) {
  for (size_t bin = 1; hak_bin_size(bin) <= HAK_SMALL_MAX; bin++) {
    size_t bs = hak_bin_size(bin), reserved = HAK_SLICE_SIZE / bs;
    size_t capacities[] = { 0, 1, 2, reserved / 2, reserved - 1, reserved };
    for (size_t c = 0; c < sizeof capacities / sizeof capacities[0]; c++) {
      size_t capacity = capacities[c];
      hak_slice_t check = hak_slice_check_for(bs, capacity);
      for (uintptr_t offset = 0; offset < HAK_SLICE_SIZE; offset++) {
        bool start = offset % bs == 0 && offset / bs < capacity;
        CHECKF(hak_block_check(&check, (void *)(((uintptr_t)1 << 30) + offset)) == start,
               "block size %zu, capacity %zu, offset %zu", bs, capacity, (size_t)offset);
      }
    }
  }
}

/* The check of a block of any page (hak_page_is_block_start: one
 * multiply, no division) accepts exactly the starts of carved blocks, for
 * every class, at and around every block start up to past the carved end,
 * below the page's area, and at a spread of offsets in between. */
static void page_block_start_is_exact(void) {
  uint8_t *area = (uint8_t *)((uintptr_t)1 << 30);
  hak_rng rng = hak_rng_seed(7);
  for (size_t bin = 1; bin < HAK_BINS; bin++) {
    size_t bs = hak_bin_size(bin);
    size_t capacity = hak_rng_range(&rng, 1, bs < 64 ? 4096 : 1024);
    hak_page_t page = { .area_neg = -(uintptr_t)area, .block_size = (uint32_t)bs, .capacity = (uint16_t)capacity,
                        .block_magic = hak_block_magic(bs) };
    for (size_t i = 0; i <= capacity + 1; i++) {
      for (int d = -1; d <= 1; d++) {
        uintptr_t offset = i * bs + (uintptr_t)(intptr_t)d;
        bool start = offset % bs == 0 && offset / bs < capacity;
        CHECKF(hak_page_is_block_start(&page, (void *)((uintptr_t)area + offset)) == start,
               "block size %zu, capacity %zu, offset %zd", bs, capacity, (ssize_t)offset);
      }
    }
    for (int i = 0; i < 4096; i++) {
      uintptr_t offset = hak_rng_range(&rng, 0, capacity * bs + bs);
      CHECKF(hak_page_is_block_start(&page, (void *)((uintptr_t)area + offset)) ==
                 (offset % bs == 0 && offset / bs < capacity),
             "block size %zu, capacity %zu, offset %zu", bs, capacity, (size_t)offset);
    }
    CHECK(!hak_page_is_block_start(&page, area - bs) && !hak_page_is_block_start(&page, area - 16));
  }
}

/* A page its owner abandoned full is taken back by the owner's next free
 * into it (free_in_slice's own-page branch): owned again, back in its
 * queue, the block on its local free list. A larger class than SIZE, in
 * pages of several slices, takes the same branch from its first free. */
static void own_abandoned_page_is_taken_back(void) {
  enum { MULTI = 12 * 1024 };   /* above HAK_SMALL_MAX: a page of several slices */
  void **more = blocks;
  size_t sizes[] = { SIZE, MULTI };
  for (size_t k = 0; k < 2; k++) {
    hak_heap_t *heap = hak_heap_get();
    size_t n = 0;
    more[n++] = hak_malloc(sizes[k]);
    hak_page_t *page = page_of(more[0]);
    void *next;
    while ((next = hak_malloc(sizes[k])) != NULL && page_of(next) == page) {
      CHECKF(n < sizeof blocks / sizeof blocks[0], "a page of %zu-byte blocks fits the array", sizes[k]);
      more[n++] = next;
    }
    CHECKF(!owned_by(page, heap) && abandoned(page), "the full page was abandoned");
    hak_free(more[0]);
    /* (A medium block waits in heap->recent first: see the next case.) */
    CHECKF(owned_by(page, heap) && (page->free == more[0] || recent_newest(heap, page->bin) == more[0]),
           "the owner's free takes it back");
    CHECKF(hak_page_is_valid(page), "valid once taken back");
    for (size_t i = 1; i < n; i++) hak_free(more[i]);
    hak_free(next);
  }
}

/* A page found full while its class has other pages is kept once, owned,
 * at the back of its queue (heap.c, docs/design.md §5.7): its owner's
 * frees go straight into it. Found full again, it is abandoned; and so is
 * one that took remote frees, as another thread's frees into it will
 * publish it. A kept page other threads free into is given up at the
 * owner's next heartbeat. A class nothing else here uses. */
enum { KEPT_SIZE = 144 };
static void *kept[3][1024];

static void *free_remotely(void *p) {
  hak_free(p);
  return NULL;
}

static void full_page_is_kept_once(void) {
  hak_heap_t *heap = hak_heap_get();
  hak_page_queue_t *q = &heap->queues[hak_bin_of(KEPT_SIZE)];
  size_t n[3];
  hak_page_t *a = fill_page_of(KEPT_SIZE, kept[0], &n[0]);
  hak_page_t *b = fill_page_of(KEPT_SIZE, kept[1], &n[1]);
  CHECKF(b != a && abandoned(a), "found full and alone, a page is abandoned");
  hak_free(kept[0][0]);
  CHECKF(owned_by(a, heap) && q->last == a, "its owner's free takes it back, to the back of the queue");
  CHECKF(hak_malloc(KEPT_SIZE) == kept[0][0], "the next page's free block is handed out");
  CHECKF(owned_by(b, heap) && xstate(b) == HAK_XSTATE_ACTIVE && b->kept && q->last == b,
         "found full with another page in the queue: kept, owned, at the back");
  hak_free(kept[1][5]);
  CHECKF(b->free == kept[1][5], "the owner's free goes straight onto the kept page's list");
  CHECKF(hak_malloc(KEPT_SIZE) == kept[1][5] && owned_by(a, heap) && a->kept && !b->kept,
         "the other page, full in turn, is kept; the one handed out from is not marked");
  void *c_first = hak_malloc(KEPT_SIZE);
  hak_page_t *c = page_of(c_first);
  CHECKF(abandoned(a) && abandoned(b) && c != a && c != b, "both found full again: abandoned, and a new page");

  hak_free(kept[0][1]);
  CHECKF(owned_by(a, heap) && q->last == a, "a taken back again: the queue holds c, a");
  pthread_t t;
  pthread_create(&t, NULL, free_remotely, c_first);
  pthread_join(t, NULL);
  fill_page_of(KEPT_SIZE, kept[2], &n[2]);
  bool again = false;
  for (size_t i = 0; i < n[2]; i++) again |= kept[2][i] == c_first;
  CHECKF(again && c->took_remote, "the remote free was gathered and handed out again");
  CHECKF(hak_malloc(KEPT_SIZE) == kept[0][1] && abandoned(c) && !c->took_remote,
         "a page that took remote frees is abandoned when found full, other pages or not");

  hak_free(kept[2][3]);
  CHECKF(owned_by(c, heap) && !c->kept && q->last == c, "c taken back: the queue holds a, c");
  CHECKF(hak_malloc(KEPT_SIZE) == kept[2][3] && a->kept && q->last == a, "a found full: kept");
  pthread_create(&t, NULL, free_remotely, kept[0][4]);
  pthread_join(t, NULL);
  kept[0][4] = NULL;
  CHECKF(owned_by(a, heap) && xstate(a) == HAK_XSTATE_ACTIVE, "another thread's free into a kept page only pushes");
  /* (Until the next heartbeat: HAK_HEARTBEAT fast mallocs at most, fewer
   * when every call takes the slow path.) */
  for (int i = 0; i < HAK_HEARTBEAT + HAK_HEARTBEAT_SLOW && a->kept; i++) hak_free(hak_malloc(SIZE));
  CHECKF(abandoned(a) && xstate(a) == HAK_XSTATE_PUBLISHED,
         "at the heartbeat, the kept page others freed into is given up, published");

  for (int k = 0; k < 3; k++)
    for (size_t i = 0; i < n[k]; i++) hak_free(kept[k][i]);
}

/* A medium block the owner frees is the next one its class hands out
 * (heap->recent, free.c), still counted used by its page and tagged free:
 * freeing it twice is reported like any double free; a free that leaves
 * nothing of its page in use but kept blocks lets them go, and so does a
 * thread that exits, so the page empties and goes back to the arena. */
enum { RECENT_SIZE = 12 * 1024 };

static void free_recent_block_twice(void) {
  void *p = hak_malloc(RECENT_SIZE);
  hak_free(p);
  hak_free(p);
}

/* Fills its ring past full (so its oldest blocks were pushed out), then exits. */
static void *free_some_and_exit(void *arg) {
  void **out = arg;
  for (size_t i = 0; i < 2 * HAK_RECENT_DEPTH + 1; i++) out[i] = hak_malloc(RECENT_SIZE);
  for (size_t i = 0; i < 2 * HAK_RECENT_DEPTH + 1; i++) hak_free(out[i]);
  return NULL;
}

/* Blocks in use in the pages of these blocks (each page counted once). */
static size_t used_of_pages(void *const *blocks, size_t n) {
  size_t used = 0;
  for (size_t i = 0; i < n; i++) {
    bool seen = false;
    for (size_t j = 0; j < i; j++) seen |= page_of(blocks[j]) == page_of(blocks[i]);
    if (!seen) used += hak_page_used(page_of(blocks[i]));
  }
  return used;
}

static void medium_frees_are_reused_first(void) {
  if (hak_owner_counted) {   /* counting or a tool (the ASan build): every free takes the counted path */
    printf("     (calls are counted here: no block is kept)\n");
    return;
  }
  hak_heap_t *heap = hak_heap_get();
  heap->heartbeat = HAK_HEARTBEAT;   /* no beat before the one this case asks for */
  enum { N = HAK_RECENT_DEPTH + 1 };
  void *keep = hak_malloc(RECENT_SIZE);   /* in use throughout: the page never holds kept blocks only */
  void *b[N];
  for (size_t i = 0; i < N; i++) {
    b[i] = hak_malloc(RECENT_SIZE);
    CHECKF(page_of(b[i]) == page_of(keep), "block %zu in the page of the others", i);
  }
  size_t used = used_of_pages(b, N);
  hak_free(b[0]);
  CHECKF(used_of_pages(b, N) == used && hak_page_is_valid(page_of(b[0])), "still counted used, page valid");
  CHECKF(hak_malloc(RECENT_SIZE) == b[0], "the block freed last comes back first");
  for (size_t i = 0; i < HAK_RECENT_DEPTH; i++) hak_free(b[i]);
  CHECKF(used_of_pages(b, N) == used, "%d kept, all still counted used", HAK_RECENT_DEPTH);
  hak_free(b[HAK_RECENT_DEPTH]);   /* pushes out b[0], the oldest, which goes back to its page */
  CHECKF(used_of_pages(b, N) == used - 1 && hak_page_is_valid(page_of(b[0])), "b[0] back in its page");
  for (size_t i = N; i-- > 1;)
    CHECKF(hak_malloc(RECENT_SIZE) == b[i], "kept blocks come back newest first (block %zu)", i);

  /* At the heartbeat, the ring keeps only its newest. */
  for (size_t i = 1; i < N; i++) hak_free(b[i]);
  CHECKF(used_of_pages(b, N) == used - 1, "b[1..%d] kept", HAK_RECENT_DEPTH);
  heap->heartbeat = 1;   /* the next malloc beats */
  hak_free(hak_malloc(64));
  CHECKF(used_of_pages(b, N) == used - HAK_RECENT_DEPTH && recent_newest(heap, page_of(b[N - 1])->bin) == b[N - 1],
         "only the newest kept after the heartbeat");
  CHECKF(hak_malloc(RECENT_SIZE) == b[N - 1], "and handed out first");
  hak_free(b[N - 1]);
  hak_page_t *page = page_of(keep);
  CHECKF(hak_page_used(page) == 2, "keep and the kept b[%d] counted used", N - 1);
  hak_free(keep);   /* nothing of the page in use but kept blocks: the ring lets them go */
  CHECKF(recent_newest(heap, page->bin) == NULL && page->span_kind == HAK_SPAN_FREE,
         "the ring emptied and the page went back to its arena");

  hak_child_report r = hak_run_in_child(free_recent_block_twice);
  CHECKF(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGABRT, "status %d", r.status);
  CHECKF(strstr(r.text, "double free") != NULL, "no report in: %s", r.text);

  void *left[2 * HAK_RECENT_DEPTH + 1];
  pthread_join(hak_thread_start(free_some_and_exit, left), NULL);
  for (size_t i = 0; i < 2 * HAK_RECENT_DEPTH + 1; i++)
    CHECKF(page_of(left[i])->span_kind == HAK_SPAN_FREE, "the exited thread's block %zu went back to its page, which went back", i);
}

/* The debug build's validators pass on pages and arenas in every state the
 * tests above leave them in, and fail on a broken page. */
static void validators_see_the_invariants(void) {
  void *p = hak_malloc(SIZE), *q = hak_malloc(SIZE);
  hak_page_t *page = page_of(p);
  hak_page_gather_frees(page);
  CHECKF(hak_page_is_valid(page), "a page in use");
  hak_free(q);
  CHECKF(hak_page_is_valid(page), "after a local free");
  page->used++;   /* a count that no longer adds up */
  CHECKF(!hak_page_is_valid(page), "a wrong used count passes");
  page->used--;
  hak_free(p);
  CHECKF(hak_page_is_valid(page) && hak_arenas_are_valid(), "page and arenas at the end");
}

/* A thread's first HAK_YOUNG_ALLOCS small blocks come from the shared heap
 * (several threads' blocks in one page; the thread itself has no heap, so
 * its frees go the cross-thread way), the next from a heap of its own, as
 * does a first medium block.
 * hak_collect gathers the shared heap's pages and frees the empty ones. */
enum { YOUNG_SIZE = 80 };   /* a class nothing else here uses */

static bool in_queue(hak_heap_t *heap, hak_page_t *page) {
  for (hak_page_t *q = heap->queues[page->bin].first; q != NULL; q = q->next)
    if (q == page) return true;
  return false;
}

typedef struct { hak_heap_t *shared; void *first; bool young_ok, own_ok; } young_t;

static void *allocate_young_then_own(void *arg) {
  young_t *y = arg;
  void *young[HAK_YOUNG_ALLOCS];
  y->young_ok = true;
  for (size_t i = 0; i < HAK_YOUNG_ALLOCS; i++) {
    young[i] = hak_malloc(YOUNG_SIZE);
    y->young_ok &= hak_heap_get() == &hak_heap_empty && owned_by(page_of(young[i]), y->shared);
  }
  y->first = young[0];
  void *own = hak_malloc(YOUNG_SIZE);
  hak_heap_t *heap = hak_heap_get();
  y->own_ok = heap != &hak_heap_empty && heap != y->shared && owned_by(page_of(own), heap);
  hak_free(own);
  for (size_t i = 1; i < HAK_YOUNG_ALLOCS; i++) hak_free(young[i]);   /* young[0] stays live */
  return NULL;
}

static void *allocate_medium(void *arg) {
  void *p = hak_malloc(HAK_SMALL_MAX + 1);
  *(bool *)arg = hak_heap_get() != &hak_heap_empty && owned_by(page_of(p), hak_heap_get());
  hak_free(p);
  return NULL;
}

static void young_threads_share_a_heap(void) {
  if (hak_tracking) {   /* under a tool (the ASan build) every thread gets its heap at once */
    printf("     under a tool: skipped\n");
    return;
  }
  hak_heap_t *shared = hak_heap_shared();
  hak_heap_release(shared);
  young_t a = { shared, NULL, false, false }, b = a;
  pthread_t t;
  pthread_create(&t, NULL, allocate_young_then_own, &a);
  pthread_join(t, NULL);
  pthread_create(&t, NULL, allocate_young_then_own, &b);
  pthread_join(t, NULL);
  CHECKF(a.young_ok && b.young_ok, "first allocations from the shared heap, with no heap of the thread's own");
  CHECKF(a.own_ok && b.own_ok, "the next allocation from a heap of the thread's own");
  hak_page_t *page = page_of(a.first);
  CHECKF(page_of(b.first) == page, "two threads' first blocks share a page");
  CHECKF(!xlist_empty(page), "a young thread's frees are cross-thread");
  hak_free(a.first);
  hak_free(b.first);
  bool medium_own = false;
  pthread_create(&t, NULL, allocate_medium, &medium_own);
  pthread_join(t, NULL);
  CHECKF(medium_own, "a medium block comes from the thread's own heap at once");
  hak_collect();
  hak_heap_release(hak_heap_shared());   /* the lock orders the reads below after the collection */
  CHECKF(!in_queue(shared, page), "hak_collect freed the shared heap's empty page");
}

/* Aligned blocks start their block and leave their page's owner word the
 * heap, so the owner's free of one takes the fast path: memalign(256, 100)
 * takes a block of the class of 256. */
static void aligned_blocks_start_their_block(void) {
  hak_heap_t *heap = own_heap();
  void *aligned[16];
  for (size_t i = 0; i < 16; i++) {
    aligned[i] = hak_memalign(256, 100);
    CHECK(aligned[i] != NULL && (uintptr_t)aligned[i] % 256 == 0);
    hak_page_t *page = page_of(aligned[i]);
    CHECKF(hak_page_block_of(page, aligned[i]) == aligned[i] && page->block_size == 256,
           "memalign(256, 100) = %p: a block of %u B", aligned[i], (unsigned)page->block_size);
    CHECKF(hak_page_owner(page) == ((uintptr_t)heap | hak_owner_counted), "its page's owner word is the heap");
  }
  for (size_t i = 0; i < 16; i++) hak_free(aligned[i]);
}

int main(void) {
  hak_test_begin("unit_pages");
  own_heap();
  RUN_CASE(blocks_come_from_the_direct_page);
  RUN_CASE(remote_frees_are_gathered_by_the_owner);
  RUN_CASE(abandoned_pages_are_pulled_by_allocating_threads);
  RUN_CASE(adoption_takes_the_fullest_of_living_and_the_emptiest_of_exited);
  RUN_CASE(double_free_is_detected);
  RUN_CASE(descriptor_address_is_data);
  RUN_CASE(block_check_is_exact);
  RUN_CASE(page_block_start_is_exact);
  RUN_CASE(own_abandoned_page_is_taken_back);
  RUN_CASE(full_page_is_kept_once);
  RUN_CASE(medium_frees_are_reused_first);
  RUN_CASE(validators_see_the_invariants);
  RUN_CASE(young_threads_share_a_heap);
  RUN_CASE(aligned_blocks_start_their_block);
  return 0;
}
