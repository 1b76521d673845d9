/* Pages: a span holding blocks of one size class.
 *
 * A page has three free lists (sharded, as in mimalloc):
 *   free         blocks to allocate from (owner only)
 *   local_free   blocks the owner freed (owner only, no atomics)
 *   xthread_free blocks other threads freed (lock-free push, owner takes all)
 * When `free` runs dry the owner collects the other two into it.
 *
 * Ownership moves between threads without locks (see shared/LESSONS.md §4-8):
 * a page its owner finds full is given up (state ABANDONED, no owner). The
 * first remote free into it flips it to PUBLISHED and pushes it on its size
 * class's reclaim queue; a thread that needs a page of that class pulls it
 * from there, adopts it and allocates from it at once. So freed memory is
 * reused by threads that allocate, never parked with an owner that has
 * stopped. Thread exit gives up every page the same way. */
#include <string.h>
#include "internal.h"

hak_page_t hak_page_empty;   /* free == NULL: the fast path falls through */

/* Most bytes carved from a page's unused area per extension: enough to
 * amortise the slow path, few enough not to touch memory the program may
 * never use. */
#define HAK_EXTEND_BYTES (16 * 1024)

/* Small classes: one slice. Larger: room for up to 16 blocks, rounded up to
 * whole slices, so a page wastes less than one slice. */
size_t hak_page_slices_for(size_t block_size) {
  if (block_size <= 8 * 1024) return 1;
  size_t blocks = HAK_PAGE_MAX_SLICES * HAK_SLICE_SIZE / block_size;
  if (blocks > 16) blocks = 16;
  return (blocks * block_size + HAK_SLICE_SIZE - 1) / HAK_SLICE_SIZE;
}

/* ------------------------------------------------------------ queues */

void hak_page_queue_push_front(hak_heap_t *heap, hak_page_t *page) {
  hak_page_queue_t *q = &heap->queues[page->bin];
  page->prev = NULL;
  page->next = q->first;
  if (q->first) q->first->prev = page; else q->last = page;
  q->first = page;
  hak_heap_update_direct(heap, page->bin);
}

static void queue_push_back(hak_heap_t *heap, hak_page_t *page) {
  hak_page_queue_t *q = &heap->queues[page->bin];
  if (q->first == NULL) { hak_page_queue_push_front(heap, page); return; }
  page->next = NULL;
  page->prev = q->last;
  q->last->next = page;
  q->last = page;
}

void hak_page_queue_remove(hak_heap_t *heap, hak_page_t *page) {
  hak_page_queue_t *q = &heap->queues[page->bin];
  bool was_first = q->first == page;
  if (page->prev) page->prev->next = page->next; else q->first = page->next;
  if (page->next) page->next->prev = page->prev; else q->last = page->prev;
  page->next = page->prev = NULL;
  if (was_first) hak_heap_update_direct(heap, page->bin);
}

/* ------------------------------------------------------------ free lists */

static hak_slice_t *page_check(hak_page_t *page) {
  hak_segment_t *seg = hak_segment_of(page);
  return &seg->slices[page - seg->pages];
}

/* Keep the free fast path's block check (hak_slice_t) in step with
 * the carved blocks. Pages of several slices keep it 0: their frees take
 * the generic path, which checks with a division. */
static void page_update_check(hak_page_t *page) {
  if (page->slice_count != 1) return;
  hak_slice_t *check = page_check(page);
  uint64_t recip = ((uint64_t)1 << 32) / page->block_size + 1;
  uint64_t e = recip * page->block_size - ((uint64_t)1 << 32);
  check->recip = (uint32_t)recip;
  check->bound = (uint32_t)(page->capacity * e);
}

static void page_clear_check(hak_page_t *page) {
  hak_slice_t *check = page_check(page);
  check->recip = check->bound = 0;
}

static void page_init(hak_heap_t *heap, hak_page_t *page, size_t bin) {
  size_t bs = hak_bin_size(bin);
  page->free = NULL;
  page->local_free = NULL;
  hak_page_used_set(page, 0);
  __atomic_store_n(&page->capacity, 0, __ATOMIC_RELAXED);
  page->reserved = (uint16_t)(((size_t)page->slice_count * HAK_SLICE_SIZE) / bs);
  atomic_store_explicit(&page->bin, (uint8_t)bin, memory_order_relaxed);
  page->block_size = (uint32_t)bs;
  atomic_store_explicit(&page->xthread_free, HAK_XSTATE_ACTIVE, memory_order_relaxed);
  atomic_store_explicit(&page->owner, (uintptr_t)heap | hak_owner_counted, memory_order_relaxed);
}

/* Carve more blocks from the page's never-used area onto its free list.
 * Carving writes each block's link and free tag (it is free, so freeing it
 * before malloc handed it out is caught like any double free), so it makes
 * the OS pages under the blocks' starts resident: the first carve covers one
 * OS page, and each next one as much as is carved already, up to
 * HAK_EXTEND_BYTES. A thread that takes a few blocks of a class then pays
 * 4 KiB for them, not 16 (1,000 threads with 10 blocks each: 152 MB
 * resident, 16 MB live). */
static void page_extend(hak_page_t *page) {
  size_t bs = page->block_size;
  size_t n = (size_t)(page->reserved - page->capacity);
  size_t carved = (size_t)page->capacity * bs;
  size_t bytes = carved == 0 ? HAK_OS_PAGE : carved < HAK_EXTEND_BYTES ? carved : HAK_EXTEND_BYTES;
  size_t most = (bytes + bs - 1) / bs;   /* the blocks that start in the next `bytes` */
  if (n > most) n = most;
  uint8_t *first = hak_page_area(page) + (size_t)page->capacity * bs;
  hak_block_t *b = (hak_block_t *)first;
  for (size_t i = 1; i < n; i++, b = b->next) {
    b->next = (hak_block_t *)((uint8_t *)b + bs);
    b->free_tag = hak_free_tag(b, page);
  }
  b->next = page->free;
  b->free_tag = hak_free_tag(b, page);
  page->free = (hak_block_t *)first;
  /* Relaxed atomic: a freeing thread may read it (hak_page_block_of). */
  __atomic_store_n(&page->capacity, (uint16_t)(page->capacity + n), __ATOMIC_RELAXED);
  page_update_check(page);
}

/* Move a list taken from xthread_free onto local_free, and stop counting
 * its blocks as used. */
static void page_take_remote(hak_page_t *page, uintptr_t xfree) {
  hak_block_t *list = (hak_block_t *)(xfree & ~(uintptr_t)HAK_XSTATE_MASK);
  if (list == NULL) return;
  size_t count = 1;
  hak_block_t *tail = list;
  while (tail->next != NULL) { tail = tail->next; count++; }
  size_t used = hak_page_used(page);
  if (count > used) hak_fatal("heap corruption: %zu remote frees in a page with %zu blocks in use", count, used);
  tail->next = page->local_free;
  page->local_free = list;
  hak_page_used_set(page, (uint16_t)(used - count));
}

/* An empty free list takes the blocks freed locally (and collected). */
static void page_use_local_frees(hak_page_t *page) {
  if (page->free == NULL) {
    page->free = page->local_free;
    page->local_free = NULL;
  }
}

/* Gather the blocks freed since `free` was filled. Owner only. */
void hak_page_collect(hak_page_t *page) {
  if (atomic_load_explicit(&page->xthread_free, memory_order_relaxed) & ~(uintptr_t)HAK_XSTATE_MASK)
    page_take_remote(page, atomic_exchange_explicit(&page->xthread_free, HAK_XSTATE_ACTIVE, memory_order_acquire));
  page_use_local_frees(page);
  hak_assert(hak_page_is_valid(page));
}

/* The carved block of a page that holds p, or NULL if p lies outside
 * every carved block (before the area, in the tail, never carved). */
hak_block_t *hak_page_block_of(const hak_page_t *page, const void *p) {
  uint8_t *start = hak_page_area(page);
  if ((const uint8_t *)p < start) return NULL;
  size_t offset = (size_t)((const uint8_t *)p - start);
  size_t index = offset / page->block_size;
  if (index >= __atomic_load_n(&page->capacity, __ATOMIC_RELAXED)) return NULL;   /* the owner may be carving */
  return (hak_block_t *)(start + index * page->block_size);
}

/* ------------------------------------------------------------ validation */

/* A page as its owner sees it (debug build; see the invariants of
 * hak_page_t): its size fields agree, every block on free and local_free
 * is a carved block start carrying its free tag, those lists end, and with
 * the blocks in use (remote frees not yet collected count as used) they
 * make up every carved block; the free fast path's check matches. */
static bool page_list_is_valid(const hak_page_t *page, const hak_block_t *b, size_t *count) {
  const uint8_t *area = hak_page_area(page);
  for (; b != NULL; b = b->next) {
    size_t offset = (size_t)((const uint8_t *)b - area);
    if ((const uint8_t *)b < area || offset % page->block_size != 0 ||
        offset / page->block_size >= page->capacity || b->free_tag != hak_free_tag(b, page))
      return false;
    if (++*count > page->capacity) return false;   /* a cycle */
  }
  return true;
}

bool hak_page_is_valid(const hak_page_t *page) {
  if (page->span_kind != HAK_SPAN_PAGE || page->block_size != hak_bin_size(page->bin)) return false;
  if (page->reserved != page->slice_count * HAK_SLICE_SIZE / page->block_size) return false;
  if (page->capacity > page->reserved || hak_page_used(page) > page->capacity) return false;
  size_t count = 0;
  if (!page_list_is_valid(page, page->free, &count) || !page_list_is_valid(page, page->local_free, &count))
    return false;
  if (count + hak_page_used(page) != page->capacity) return false;
  const hak_segment_t *seg = hak_segment_of(page);
  const hak_slice_t *check = &seg->slices[page - seg->pages];
  if (page->slice_count != 1) return check->recip == 0 && check->bound == 0;
  uint64_t recip = ((uint64_t)1 << 32) / page->block_size + 1;
  return check->recip == recip && check->bound == page->capacity * (recip * page->block_size - ((uint64_t)1 << 32));
}

/* ------------------------------------------------------------ reclaim queues */

/* Pages given up with free blocks in them, per size class. Publishers (any
 * thread, on the free path) push lock-free; poppers (threads allocating in
 * the slow path) are serialised by reclaim_lock, and take the whole pushed
 * stack at once, so there is no ABA. Pages are handed out oldest first,
 * when they have gathered the most remote frees. Pops are rare (only after
 * pages were published), so one lock serves every class. */
typedef struct reclaim_s {
  _Atomic(hak_page_t *) pushed;          /* newest first */
  hak_page_t *queued;                    /* oldest first (reclaim_lock) */
  _Atomic(bool) has_queued;
  bool popped;                           /* since the last sweep (reclaim_lock) */
} reclaim_t;

static reclaim_t reclaims[HAK_BINS];
static pthread_mutex_t reclaim_lock = PTHREAD_MUTEX_INITIALIZER;

static void reclaim_push(hak_page_t *page) {
  reclaim_t *r = &reclaims[page->bin];
  hak_page_t *head = atomic_load_explicit(&r->pushed, memory_order_relaxed);
  do {
    page->next = head;
  } while (!atomic_compare_exchange_weak_explicit(&r->pushed, &head, page, memory_order_release, memory_order_relaxed));
}

void hak_page_publish(hak_page_t *page) {
  reclaim_push(page);
  hak_note_sweep_news();
}

static hak_page_t *reclaim_pop(size_t bin) {
  reclaim_t *r = &reclaims[bin];
  if (atomic_load_explicit(&r->pushed, memory_order_relaxed) == NULL &&
      !atomic_load_explicit(&r->has_queued, memory_order_relaxed))
    return NULL;
  hak_lock(&reclaim_lock);
  if (r->queued == NULL) {
    hak_page_t *list = atomic_exchange_explicit(&r->pushed, NULL, memory_order_acquire);
    while (list != NULL) {               /* reverse: oldest first */
      hak_page_t *next = list->next;
      list->next = r->queued;
      r->queued = list;
      list = next;
    }
  }
  hak_page_t *page = r->queued;
  if (page != NULL) r->queued = page->next;
  r->popped |= page != NULL;
  atomic_store_explicit(&r->has_queued, r->queued != NULL, memory_order_relaxed);
  hak_unlock(&reclaim_lock);
  return page;
}

void hak_reclaim_fork_prepare(void) { pthread_mutex_lock(&reclaim_lock); }
void hak_reclaim_fork_parent(void) { pthread_mutex_unlock(&reclaim_lock); }
void hak_reclaim_fork_child(void) { pthread_mutex_init(&reclaim_lock, NULL); }

/* ------------------------------------------------------------ ownership */

static void page_free_span(hak_heap_t *heap, hak_page_t *page) {
  page_clear_check(page);
  atomic_store_explicit(&page->owner, 0, memory_order_relaxed);
  hak_counter_inc(&heap->stats[page->bin].pages_freed);
  hak_span_free(page);
}

/* Give up a page (caller removed it from its queue). With free blocks in it,
 * it is published for adoption now; full, it waits for its first remote free
 * to be published. `last_owner` may take it back on free (NULL at exit).
 * `swept`: the reclaim sweep puts back a page it took, which is not news
 * (a free into it later is, see hak_note_sweep_news). */
static void page_abandon(hak_page_t *page, hak_heap_t *last_owner, bool swept) {
  bool has_room = page->free != NULL || page->local_free != NULL || page->capacity < page->reserved;
  atomic_store_explicit(&page->owner, (uintptr_t)last_owner | HAK_OWNER_ABANDONED | hak_owner_counted |
                        (hak_page_owner(page) & HAK_OWNER_ALIGNED), memory_order_relaxed);
  uintptr_t old = atomic_load_explicit(&page->xthread_free, memory_order_relaxed), state;
  do {
    bool publish = has_room || (old & ~(uintptr_t)HAK_XSTATE_MASK) != 0;
    state = publish ? HAK_XSTATE_PUBLISHED : HAK_XSTATE_ABANDONED;
  } while (!atomic_compare_exchange_weak_explicit(&page->xthread_free, &old,
                                                  (old & ~(uintptr_t)HAK_XSTATE_MASK) | state,
                                                  memory_order_release, memory_order_relaxed));
  if (state == HAK_XSTATE_PUBLISHED) {
    if (swept) reclaim_push(page);   /* back where the sweep took it from */
    else hak_page_publish(page);
  }
}

/* Thread exit: free the page if nothing in it is live, else give it up
 * for other threads to adopt. */
void hak_page_give_up(hak_heap_t *heap, hak_page_t *page) {
  hak_page_queue_remove(heap, page);
  hak_page_collect(page);
  if (hak_page_used(page) == 0) { page_free_span(heap, page); return; }
  hak_counter_inc(&heap->stats[page->bin].pages_abandoned);
  page_abandon(page, NULL, false);
}

/* Caller won the page through xthread_free: name itself as owner, keeping
 * the aligned-blocks bit, which belongs to the page's blocks. */
static void page_take_ownership(hak_heap_t *heap, hak_page_t *page) {
  uintptr_t aligned = hak_page_owner(page) & HAK_OWNER_ALIGNED;
  atomic_store_explicit(&page->owner, (uintptr_t)heap | aligned | hak_owner_counted, memory_order_relaxed);
}

/* Become the owner of a page popped from a reclaim queue. */
static void page_adopt(hak_heap_t *heap, hak_page_t *page) {
  uintptr_t xfree = atomic_exchange_explicit(&page->xthread_free, HAK_XSTATE_ACTIVE, memory_order_acquire);
  page_take_ownership(heap, page);
  page_take_remote(page, xfree);
  page_use_local_frees(page);
  hak_counter_inc(&heap->stats[page->bin].pages_adopted);
  hak_assert(hak_page_is_valid(page));
}

/* The last owner of a full page frees into it: take it back (if nobody has
 * published it meanwhile), so that its further frees are local again. */
bool hak_page_try_readopt(hak_heap_t *heap, hak_page_t *page) {
  uintptr_t old = atomic_load_explicit(&page->xthread_free, memory_order_relaxed);
  while ((old & HAK_XSTATE_MASK) == HAK_XSTATE_ABANDONED) {
    if (atomic_compare_exchange_weak_explicit(&page->xthread_free, &old, HAK_XSTATE_ACTIVE,
                                              memory_order_acquire, memory_order_relaxed)) {
      page_take_ownership(heap, page);
      page_take_remote(page, old);
      queue_push_back(heap, page);
      hak_assert(hak_page_is_valid(page));
      return true;
    }
  }
  return false;
}

/* Pages of a class tried per adoption, the fullest kept. Adopting the
 * fullest lets sparse pages drain: left alone, their blocks only get freed,
 * until they are empty and go back to the arena. Adopting in queue order
 * keeps every page of a producer/consumer pattern equally half full for
 * ever (16 producers whose blocks one thread frees: 1.8x the live set). */
#define HAK_ADOPT_CANDIDATES 4

/* Adopt a published page of `bin`: of up to HAK_ADOPT_CANDIDATES, the one
 * with the most live blocks; the others go back to the queue, and an empty
 * one back to its arena (unless it is all there is). NULL if none. */
static hak_page_t *reclaim_adopt(hak_heap_t *heap, size_t bin) {
  hak_page_t *best = NULL, *empty = NULL, *page;
  for (int i = 0; i < HAK_ADOPT_CANDIDATES && (page = reclaim_pop(bin)) != NULL; i++) {
    page_adopt(heap, page);
    if (hak_page_used(page) == 0 && empty == NULL) {
      empty = page;
    } else if (hak_page_used(page) == 0) {
      page_free_span(heap, page);
    } else if (best == NULL || hak_page_used(page) > hak_page_used(best)) {
      if (best != NULL) page_abandon(best, NULL, true);
      best = page;
    } else {
      page_abandon(page, NULL, true);
    }
    if (best != NULL && hak_page_used(best) >= best->reserved - best->reserved / 4) break;   /* full enough */
  }
  if (best == NULL) return empty;
  if (empty != NULL) page_free_span(heap, empty);
  return best;
}

/* A page of `bin` whose free list is not empty, owned by `heap`, first in
 * its queue. Slow path of malloc: own pages first, then pages others gave
 * up, then a fresh span. NULL when out of memory. */
hak_page_t *hak_page_for_bin(hak_heap_t *heap, size_t bin) {
  hak_page_queue_t *q = &heap->queues[bin];
  hak_page_t *page = q->first;
  while (page != NULL) {
    hak_page_t *next = page->next;
    hak_page_collect(page);
    if (page->free == NULL && page->capacity < page->reserved) page_extend(page);
    if (page->free != NULL) {
      if (page != q->first) { hak_page_queue_remove(heap, page); hak_page_queue_push_front(heap, page); }
      return page;
    }
    /* Full: give it up, so that whoever allocates next reuses what is freed into it. */
    hak_page_queue_remove(heap, page);
    hak_counter_inc(&heap->stats[bin].pages_abandoned);
    page_abandon(page, heap, false);
    page = next;
  }

  /* A published page always has room: a remote free put a block in it, or
   * its owner gave it up with free blocks. */
  if ((page = reclaim_adopt(heap, bin)) != NULL) {
    if (page->free == NULL && page->capacity == page->reserved)
      hak_fatal("internal error: adopted page %p has no free block", (void *)page);
    if (page->free == NULL) page_extend(page);
    hak_page_queue_push_front(heap, page);
    return page;
  }

  page = hak_span_alloc(heap->arena, hak_page_slices_for(hak_bin_size(bin)), HAK_SPAN_PAGE, NULL);
  if (page == NULL) return NULL;
  page_init(heap, page, bin);
  page_extend(page);
  hak_page_queue_push_front(heap, page);
  hak_counter_inc(&heap->stats[bin].pages_new);
  return page;
}

/* Pages published for a class that nobody allocates any more would keep
 * their memory for ever, even once every block in them is freed. So the
 * sweep (when: purge.c) takes the published pages of every class nobody
 * adopted from since the last sweep (of every class if `all`), frees those
 * with no live block and publishes the rest again. (Classes in use are left
 * alone: their allocators adopt those pages, and would map new ones while
 * the sweep held them.) `wait`: even if a popper holds the queues (else the
 * sweep is skipped). False if pages were left for a later sweep. */
bool hak_reclaim_sweep(hak_heap_t *heap, bool wait, bool all) {
  if (wait) hak_lock(&reclaim_lock);
  else if (hak_trylock(&reclaim_lock) != 0) return false;
  hak_page_t *taken = NULL;
  bool complete = true;
  for (size_t bin = 1; bin < HAK_BINS; bin++) {
    reclaim_t *r = &reclaims[bin];
    bool in_use = r->popped;
    r->popped = false;
    if (in_use && !all) {
      complete &= r->queued == NULL && atomic_load_explicit(&r->pushed, memory_order_relaxed) == NULL;
      continue;
    }
    hak_page_t *list = atomic_exchange_explicit(&r->pushed, NULL, memory_order_acquire);
    while (list != NULL) { hak_page_t *next = list->next; list->next = taken; taken = list; list = next; }
    while (r->queued != NULL) { hak_page_t *next = r->queued->next; r->queued->next = taken; taken = r->queued; r->queued = next; }
    atomic_store_explicit(&r->has_queued, false, memory_order_relaxed);
  }
  hak_unlock(&reclaim_lock);
  while (taken != NULL) {
    hak_page_t *page = taken;
    taken = page->next;
    page_adopt(heap, page);
    if (hak_page_used(page) == 0) page_free_span(heap, page);
    else page_abandon(page, NULL, true);
  }
  return complete;
}

/* Blocks freed by other threads wait in page->xthread_free until the owner
 * collects them, which an owner that stopped allocating never does (and an
 * owner that allocates from other pages not soon). In an owned page their
 * interiors can go back to the OS meanwhile: the list is taken off the page
 * with a CAS (the owner then just sees fewer remote frees, as if those were
 * still to come), each block's whole OS pages past its header are purged,
 * and the list is pushed back as a remote free would, publishing the page
 * if its owner gave it up meanwhile. `used` counts these blocks all along,
 * so the page cannot be freed under us. Called with the page's arena lock
 * held (the span stays a page). Returns the bytes purged. */
size_t hak_page_purge_held(hak_page_t *page) {
  if (page->span_kind != HAK_SPAN_PAGE) return 0;
  uintptr_t old = atomic_load_explicit(&page->xthread_free, memory_order_acquire);
  do {   /* owned pages only: a published page must keep its room for its adopter */
    if ((old & HAK_XSTATE_MASK) != HAK_XSTATE_ACTIVE || (old & ~(uintptr_t)HAK_XSTATE_MASK) == 0) return 0;
  } while (!atomic_compare_exchange_weak_explicit(&page->xthread_free, &old, old & HAK_XSTATE_MASK,
                                                  memory_order_acquire, memory_order_relaxed));
  /* The list was pushed after its blocks left page_init's hands: block_size is settled. */
  hak_block_t *list = (hak_block_t *)(old & ~(uintptr_t)HAK_XSTATE_MASK), *tail = list;
  size_t bs = page->block_size, purged = 0;
  for (hak_block_t *b = list;; b = b->next) {
    uintptr_t from = hak_align_up((uintptr_t)b + sizeof(hak_block_t), HAK_OS_PAGE);
    uintptr_t to = ((uintptr_t)b + bs) & ~(uintptr_t)(HAK_OS_PAGE - 1);
    if (to > from && hak_os_purge((void *)from, to - from) != HAK_PURGE_FAILED) purged += to - from;
    tail = b;
    if (b->next == NULL) break;
  }
  old = atomic_load_explicit(&page->xthread_free, memory_order_relaxed);
  uintptr_t state;
  do {
    state = old & HAK_XSTATE_MASK;
    if (state == HAK_XSTATE_ABANDONED) state = HAK_XSTATE_PUBLISHED;
    tail->next = (hak_block_t *)(old & ~(uintptr_t)HAK_XSTATE_MASK);
  } while (!atomic_compare_exchange_weak_explicit(&page->xthread_free, &old, (uintptr_t)list | state,
                                                  memory_order_acq_rel, memory_order_relaxed));
  if ((old & HAK_XSTATE_MASK) == HAK_XSTATE_ABANDONED) hak_page_publish(page);
  return purged;
}

/* Free every page of the heap that holds no live block (hak_collect). */
void hak_heap_free_empty_pages(hak_heap_t *heap) {
  for (size_t bin = 1; bin < HAK_BINS; bin++) {
    hak_page_t *page = heap->queues[bin].first;
    while (page != NULL) {
      hak_page_t *next = page->next;
      hak_page_collect(page);
      if (hak_page_used(page) == 0) {
        hak_page_queue_remove(heap, page);
        page_free_span(heap, page);
      }
      page = next;
    }
  }
}

/* All blocks of an owned page are free again, and it is not one to keep
 * (hak_page_keep_when_empty): return it to the arena. */
void hak_page_retire(hak_heap_t *heap, hak_page_t *page) {
  hak_assert(hak_page_used(page) == 0 && hak_page_is_valid(page));
  hak_page_queue_remove(heap, page);
  page_free_span(heap, page);
}
