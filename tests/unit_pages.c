/* Pages: the three free lists, the direct table, remote frees, and the way
 * a full page is given up and then pulled by another allocating thread. */
#include <string.h>
#include "unit.h"

enum { SIZE = 48 };   /* one small class; nothing else in this test uses it */

static hak_page_t *page_of(void *p) { return hak_page_of(hak_segment_of(p), p); }
static uintptr_t xstate(hak_page_t *page) { return atomic_load(&page->xthread_free) & HAK_XSTATE_MASK; }
static bool xlist_empty(hak_page_t *page) { return (atomic_load(&page->xthread_free) & ~(uintptr_t)HAK_XSTATE_MASK) == 0; }

static void blocks_come_from_the_direct_page(void) {
  void *p = hak_malloc(SIZE);
  hak_heap_t *heap = hak_heap_get();
  hak_page_t *page = page_of(p);
  size_t bin = hak_bin_of(SIZE);
  UCHECK(hak_page_owner(page) == (uintptr_t)heap, "owned by this thread's heap");
  UCHECK(heap->queues[bin].first == page && heap->direct[(SIZE + 15) / 16] == page, "first in queue and direct");
  UCHECK(page->block_size == hak_bin_size(bin) && page->used == 1, "block size %u used %u", page->block_size, page->used);
  uint8_t *area = hak_page_area(page);
  UCHECK(((uint8_t *)p - area) % page->block_size == 0, "block boundary");
  hak_free(p);
  UCHECK(page->used == 0 && page->local_free == p, "a local free goes to local_free");
  UCHECK(hak_page_owner(page) == (uintptr_t)heap, "the only page of its class is kept");
}

/* Fill a whole page; return its blocks in `out` (reserved of them). */
static hak_page_t *fill_page(void **out, size_t *count) {
  void *first = hak_malloc(SIZE);
  hak_page_t *page = page_of(first);
  size_t n = 0;
  out[n++] = first;
  while (page->used < page->reserved) {
    void *p = hak_malloc(SIZE);
    UCHECK(page_of(p) == page, "fills the current page first");
    out[n++] = p;
  }
  *count = n;
  return page;
}

static void *blocks[1 << 16];

static void *free_half_remotely(void *arg) {
  size_t n = *(size_t *)arg;
  for (size_t i = 0; i < n; i += 2) hak_free(blocks[i]);
  return NULL;
}

static void remote_frees_are_collected_by_the_owner(void) {
  size_t n;
  hak_page_t *page = fill_page(blocks, &n);
  pthread_t t;
  pthread_create(&t, NULL, free_half_remotely, &n);
  pthread_join(t, NULL);
  UCHECK(!xlist_empty(page) && page->used == n, "remote frees wait in xthread_free, still counted");
  /* The page is full and owned: the next malloc collects the remote frees. */
  void *p = hak_malloc(SIZE);
  UCHECK(page_of(p) == page, "the owner reuses remotely freed blocks");
  UCHECK(xlist_empty(page) && page->used == n - (n + 1) / 2 + 1, "collected: used %u", page->used);
  hak_free(p);
  for (size_t i = 1; i < n; i += 2) hak_free(blocks[i]);
}

/* A thread fills a page, moves on to a new one (so the full page is given
 * up), hands its blocks over and then stays idle: the case where pushing
 * frees to the owner would strand them (shared/LESSONS.md §4). */
static pthread_barrier_t filled, done;

static void *fill_and_idle(void *arg) {
  size_t *n = arg;
  fill_page(blocks, n);
  blocks[*n] = hak_malloc(SIZE);   /* needs a new page: the full one is given up */
  (*n)++;
  pthread_barrier_wait(&filled);
  pthread_barrier_wait(&done);
  return NULL;
}

typedef struct { void *block; bool owned; } adoption_t;

static void *allocate_one(void *arg) {
  adoption_t *a = arg;
  a->block = hak_malloc(SIZE);
  hak_page_t *page = page_of(a->block);
  a->owned = hak_page_owner(page) == (uintptr_t)hak_heap_get() && xstate(page) == HAK_XSTATE_ACTIVE;
  return NULL;   /* at exit this thread gives the page up again */
}

static void given_up_pages_are_pulled_by_allocating_threads(void) {
  size_t n = 0;
  pthread_t idle, t;
  pthread_barrier_init(&filled, NULL, 2);
  pthread_barrier_init(&done, NULL, 2);
  pthread_create(&idle, NULL, fill_and_idle, &n);
  pthread_barrier_wait(&filled);
  hak_page_t *full = page_of(blocks[0]);
  UCHECK(page_of(blocks[n - 1]) != full, "the last block came from a new page");
  UCHECK(xstate(full) == HAK_XSTATE_ABANDONED && (hak_page_owner(full) & HAK_OWNER_ABANDONED), "full page given up");

  hak_free(blocks[0]);   /* first free into it: publishes it */
  UCHECK(xstate(full) == HAK_XSTATE_PUBLISHED, "published on the first remote free");
  hak_free(blocks[1]);
  UCHECK(xstate(full) == HAK_XSTATE_PUBLISHED, "later frees just push");

  adoption_t got = { NULL, false };
  pthread_create(&t, NULL, allocate_one, &got);
  pthread_join(t, NULL);
  UCHECK(page_of(got.block) == full && got.owned, "an allocating thread adopted the published page");
  hak_free(got.block);
  for (size_t i = 2; i < n; i++) hak_free(blocks[i]);
  pthread_barrier_wait(&done);
  pthread_join(idle, NULL);
}

static void double_free_is_detected(void) {
  /* Checked in a child: the report aborts. */
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    struct rlimit no_core = {0, 0};   /* it aborts on purpose: no core file */
    setrlimit(RLIMIT_CORE, &no_core);
    void *p = hak_malloc(SIZE);
    hak_free(p);
    hak_free(p);
    _exit(0);
  }
  int status;
  waitpid(pid, &status, 0);
  UCHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "status %d", status);
}

/* The free fast path's block check (hak_slice_t in internal.h) accepts
 * exactly the starts of carved blocks, for every one-slice class and every
 * capacity, at every offset of the slice. */
static void block_check_is_exact(void) {
  for (size_t bin = 1; hak_bin_size(bin) <= 8 * 1024; bin++) {
    size_t bs = hak_bin_size(bin), reserved = HAK_SLICE_SIZE / bs;
    uint32_t recip = (uint32_t)(((uint64_t)1 << 32) / bs + 1);
    uint64_t e = (uint64_t)recip * bs - ((uint64_t)1 << 32);
    size_t capacities[] = { 0, 1, 2, reserved / 2, reserved - 1, reserved };
    for (size_t c = 0; c < sizeof capacities / sizeof capacities[0]; c++) {
      size_t capacity = capacities[c];
      hak_slice_t check = { NULL, recip, (uint32_t)(capacity * e) };
      for (uintptr_t offset = 0; offset < HAK_SLICE_SIZE; offset++) {
        bool start = offset % bs == 0 && offset / bs < capacity;
        UCHECK(hak_block_check(&check, (void *)(((uintptr_t)1 << 30) + offset)) == start,
               "block size %zu, capacity %zu, offset %zu", bs, capacity, (size_t)offset);
      }
    }
  }
}

/* The debug build's validators pass on pages and arenas in every state the
 * tests above leave them in, and fail on a broken page. */
static void validators_see_the_invariants(void) {
  void *p = hak_malloc(SIZE), *q = hak_malloc(SIZE);
  hak_page_t *page = page_of(p);
  hak_page_collect(page);
  UCHECK(hak_page_is_valid(page), "a page in use");
  hak_free(q);
  UCHECK(hak_page_is_valid(page), "after a local free");
  page->used++;   /* a count that no longer adds up */
  UCHECK(!hak_page_is_valid(page), "a wrong used count passes");
  page->used--;
  hak_free(p);
  UCHECK(hak_page_is_valid(page) && hak_arenas_are_valid(), "page and arenas at the end");
}

int main(void) {
  hak_free(hak_malloc(1));   /* this thread's heap exists from here on */
  UCASE(blocks_come_from_the_direct_page);
  UCASE(remote_frees_are_collected_by_the_owner);
  UCASE(given_up_pages_are_pulled_by_allocating_threads);
  UCASE(double_free_is_detected);
  UCASE(block_check_is_exact);
  UCASE(validators_see_the_invariants);
  return 0;
}
