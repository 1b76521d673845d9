/* Who owns a page: the cross-thread ownership protocol, whole (docs/design.md
 * §5, and the rules it keeps with their reasons, §5.1-5.4).
 *
 *   hak_page_free_remote   a free from another thread: lock-free push on
 *                          page->xthread_free, which also reads the page's
 *                          state; the push into an ABANDONED page publishes it
 *   hak_page_abandon       the owner abandons a page (it found it full, or it
 *                          exits): ABANDONED, or PUBLISHED if it has room
 *   reclaim queues         published pages per size class
 *   hak_reclaim_adopt      a thread that needs a page of a class takes one
 *                          (the shared heap, only one it abandoned itself)
 *   hak_page_try_readopt   the last owner of a full page takes it back when
 *                          it frees into it
 *   hak_reclaim_sweep      published pages nobody adopts go back if empty
 *   hak_page_purge_held    remote frees into a page its owner keeps give
 *                          their memory back meanwhile
 *
 * A page's state lives in the low bits of xthread_free (HAK_XSTATE_*), so one
 * CAS both pushes a block and reads the state. No block is read after it is
 * pushed: another thread may already reuse it. */
#include "internal.h"

/* ------------------------------------------------------------ reclaim queues */

/* Pages abandoned with free blocks in them, per size class. Publishers (any
 * thread, on the free path) push lock-free onto `pushed`; adopters (threads
 * allocating in the slow path) are serialised by reclaim_lock, which moves
 * the whole pushed stack behind the queued pages at once, so there is no
 * ABA. Pages are handed out oldest first, when they have gathered the most
 * remote frees. Adoptions are rare (only after pages were published), so
 * one lock serves every class. */
typedef struct reclaim_s {
  _Atomic(hak_page_t *) pushed;          /* newest first */
  hak_page_t *queued, *queued_last;      /* oldest first (reclaim_lock) */
  _Atomic(bool) has_queued;
  bool popped;                           /* a page taken since the last sweep (reclaim_lock) */
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

static void page_publish(hak_page_t *page) {
  reclaim_push(page);
  hak_note_sweep_news();
}

static bool reclaim_is_empty(reclaim_t *r) {
  return atomic_load_explicit(&r->pushed, memory_order_relaxed) == NULL &&
         !atomic_load_explicit(&r->has_queued, memory_order_relaxed);
}

/* Under reclaim_lock: page at the back of the queued pages. */
static void reclaim_append(reclaim_t *r, hak_page_t *page) {
  page->next = NULL;
  if (r->queued == NULL) r->queued = page;
  else r->queued_last->next = page;
  r->queued_last = page;
}

/* Under reclaim_lock: the pushed pages behind the queued ones, oldest
 * first (the stack reversed, then joined on at the back). */
static void reclaim_gather(reclaim_t *r) {
  hak_page_t *list = atomic_exchange_explicit(&r->pushed, NULL, memory_order_acquire);
  if (list == NULL) return;
  hak_page_t *newest = list, *oldest_first = NULL;
  while (list != NULL) {
    hak_page_t *next = list->next;
    list->next = oldest_first;
    oldest_first = list;
    list = next;
  }
  if (r->queued == NULL) r->queued = oldest_first;
  else r->queued_last->next = oldest_first;
  r->queued_last = newest;   /* (its next is NULL: it was reversed first) */
}

/* Under reclaim_lock: the oldest queued page, or NULL. */
static hak_page_t *reclaim_take_first(reclaim_t *r) {
  hak_page_t *page = r->queued;
  if (page != NULL) r->queued = page->next;
  return page;
}

void hak_reclaim_fork_prepare(void) { pthread_mutex_lock(&reclaim_lock); }
void hak_reclaim_fork_parent(void) { pthread_mutex_unlock(&reclaim_lock); }
void hak_reclaim_fork_child(void) { pthread_mutex_init(&reclaim_lock, NULL); }

/* ------------------------------------------------------------ remote frees */

/* Push the list first..last (`count` blocks) onto a page's xthread_free;
 * returns the page's state before. Edge-triggered: only the push that moves
 * the page from ABANDONED to PUBLISHED queues it, so a burst of frees costs
 * one enqueue. (acq_rel: that push must see the abandoning owner's writes
 * to the page.) Nothing of the list is read after the push. */
static uintptr_t xthread_push(hak_page_t *page, hak_block_t *first, hak_block_t *last, size_t count) {
  uintptr_t old = atomic_load_explicit(&page->xthread_free, memory_order_relaxed), state;
  do {
    state = old & HAK_XSTATE_MASK;
    if (hak_unlikely(state == HAK_XSTATE_FREED)) hak_report_freed(HAK_OP_FREE, first, "its page was freed meanwhile");
    if (state == HAK_XSTATE_ABANDONED) state = HAK_XSTATE_PUBLISHED;
    hak_block_set_next_remote(page, last, hak_xlist_first(old));
  } while (!atomic_compare_exchange_weak_explicit(&page->xthread_free, &old,
                                                  (old & ~(HAK_XCOUNT_ONE - 1)) + count * HAK_XCOUNT_ONE +
                                                      (uintptr_t)first + state,
                                                  memory_order_acq_rel, memory_order_relaxed));
  if ((old & HAK_XSTATE_MASK) == HAK_XSTATE_ABANDONED) page_publish(page);
  return old & HAK_XSTATE_MASK;
}

/* A free of a block whose page this thread does not own (the block was
 * checked and tagged free by the caller, free.c). */
void hak_page_free_remote(hak_page_t *page, hak_block_t *b) {
  uintptr_t was = xthread_push(page, b, b, 1);
  if (was == HAK_XSTATE_PUBLISHED) hak_note_sweep_news();   /* it may be empty now */
  else if (was == HAK_XSTATE_ACTIVE) hak_note_held_frees();   /* its owner may not gather it soon */
}

/* ------------------------------------------------------------ abandoning and adopting */

/* Abandon a page (caller removed it from its queue). With free blocks in it,
 * it is published for adoption now; full, it waits for its first remote free
 * to be published. `last_owner` may take it back on free (NULL at exit).
 * `swept`: the reclaim sweep puts back a page it took, which is not news
 * (a free into it later is, see hak_note_sweep_news), nor an abandon to
 * count. */
void hak_page_abandon(hak_page_t *page, hak_heap_t *last_owner, bool swept) {
  if (!swept) hak_page_stat_inc(&hak_page_stats[page->bin].pages_abandoned);
  page->kept = page->took_remote = false;   /* (for its next owner) */
  page->beat_mark = 0;
  bool has_room = page->free != NULL || page->gathered != NULL || page->capacity < page->reserved;
  hak_page_set_owner(page, (uintptr_t)last_owner | HAK_OWNER_ABANDONED | hak_owner_counted);
  uintptr_t old = atomic_load_explicit(&page->xthread_free, memory_order_relaxed), state;
  do {
    bool publish = has_room || hak_xlist_first(old) != NULL;
    state = publish ? HAK_XSTATE_PUBLISHED : HAK_XSTATE_ABANDONED;
  } while (!atomic_compare_exchange_weak_explicit(&page->xthread_free, &old,
                                                  (old & ~(uintptr_t)HAK_XSTATE_MASK) | state,
                                                  memory_order_release, memory_order_relaxed));
  if (state == HAK_XSTATE_PUBLISHED) {
    if (swept) reclaim_push(page);   /* back where the sweep took it from */
    else page_publish(page);
  }
}

/* Thread exit (the caller took the page out of its queue): free the page if
 * nothing in it is live, else abandon it for other threads to adopt. */
void hak_page_abandon_at_exit(hak_page_t *page) {
  hak_page_gather_frees(page);
  if (hak_page_used(page) == 0) { hak_page_free_span(page); return; }
  hak_page_abandon(page, NULL, false);
}

/* Caller won the page through xthread_free: name itself as owner. */
static void page_take_ownership(hak_heap_t *heap, hak_page_t *page) {
  hak_page_set_owner(page, (uintptr_t)heap | hak_owner_counted);
}

/* Become the owner of a page popped from a reclaim queue. */
static void page_adopt(hak_heap_t *heap, hak_page_t *page) {
  uintptr_t xfree = atomic_exchange_explicit(&page->xthread_free, HAK_XSTATE_ACTIVE, memory_order_acquire);
  page_take_ownership(heap, page);
  hak_page_take_remote(page, xfree);
  hak_page_use_gathered(page);
  hak_page_stat_inc(&hak_page_stats[page->bin].pages_adopted);
  hak_assert(hak_page_is_valid(page));
}

/* The last owner of a full page frees into it: take it back (if nobody has
 * published it meanwhile), so that its further frees are local again. The
 * caller puts it back in its queue. */
bool hak_page_try_readopt(hak_heap_t *heap, hak_page_t *page) {
  uintptr_t old = atomic_load_explicit(&page->xthread_free, memory_order_relaxed);
  while ((old & HAK_XSTATE_MASK) == HAK_XSTATE_ABANDONED) {
    if (atomic_compare_exchange_weak_explicit(&page->xthread_free, &old, HAK_XSTATE_ACTIVE,
                                              memory_order_acquire, memory_order_relaxed)) {
      page_take_ownership(heap, page);
      hak_page_take_remote(page, old);
      hak_assert(hak_page_is_valid(page));
      return true;
    }
  }
  return false;
}

/* Pages of a class tried per adoption, and which one is kept:
 * - the fullest, of the full pages living threads abandoned: adopting the
 *   fullest lets sparse pages drain (left alone, their blocks only get
 *   freed, until they are empty and go back to the arena), where adopting
 *   in queue order keeps every page of a producer/consumer pattern equally
 *   half full for ever (16 producers whose blocks one thread frees: 1.8x
 *   the live set). Only a page with a sixteenth of its blocks free is
 *   worth it: the fullest of all has one or two, and its adopter was back
 *   for another after as many mallocs (that workerpool adopted 5 times as
 *   often and took 1.5 times as long); with none worth it, a fresh page is
 *   carved while those gather more frees (with an eighth, workerpool's
 *   peak RSS was 14% higher; with a sixteenth, time and RSS as before);
 * - the emptiest, of exited threads' pages: those are emptied by whoever
 *   frees their blocks (a respawned worker, its predecessor's), not by
 *   being left alone, so the ones emptied already are refilled, and pages
 *   still full of live blocks wait for their frees (respawn's peak RSS:
 *   18.8 MiB with the fullest, 14.3 with the first, 13.2 with the emptiest);
 * - the first, of pages of fewer than HAK_ADOPT_FULLEST_BLOCKS blocks: the
 *   fullest of those has one or two blocks free, so its adopter was back
 *   for another after as many mallocs (larson with 8-32 KiB blocks spent
 *   6% of its time so, and carved 1.5 times as many fresh pages).
 * The first page popped tells which kind the queue holds now. */
#define HAK_ADOPT_CANDIDATES 4
#define HAK_ADOPT_FULLEST_BLOCKS 32

typedef enum { ADOPT_FULLEST, ADOPT_EMPTIEST, ADOPT_FIRST } adopt_rule_t;

/* The heap that abandoned a page nobody owns, or NULL (its thread exited). */
static hak_heap_t *last_owner(const hak_page_t *page) {
  return (hak_heap_t *)(HAK_OWNER_UNCOUNTED(hak_page_owner(page)) & ~(uintptr_t)HAK_OWNER_ABANDONED);
}

static adopt_rule_t adopt_rule(const hak_page_t *first) {
  if (first->reserved < HAK_ADOPT_FULLEST_BLOCKS) return ADOPT_FIRST;
  if (last_owner(first) == NULL) return ADOPT_EMPTIEST;
  return ADOPT_FULLEST;
}

/* Blocks still live in a published page, read without adopting it (so
 * the pages not kept are not touched): its `used` is settled, written by
 * its last owner before it was published; remote frees may still arrive,
 * so this can only fall. */
static size_t published_live(const hak_page_t *page) {
  size_t remote = hak_xlist_count(atomic_load_explicit(&page->xthread_free, memory_order_acquire));
  size_t used = hak_page_used(page);
  return remote < used ? used - remote : 0;
}

/* Under ADOPT_FULLEST: a sixteenth of the page's blocks free. */
static bool worth_adopting(const hak_page_t *page, size_t live) { return page->reserved - live >= page->reserved / 16u; }

/* A candidate with no live block goes back to its arena. */
static void free_published_empty(hak_heap_t *heap, hak_page_t *page) {
  page_adopt(heap, page);
  hak_assert(hak_page_used(page) == 0);
  hak_page_free_span(page);
}

/* Adopt a published page of `bin`: of the up to HAK_ADOPT_CANDIDATES
 * oldest, the one the rule keeps; the others go to the back of the queue.
 * Taking the fullest, an empty candidate goes back to its arena (unless it
 * is all there is); taking the emptiest, it is the one kept. `own_only`
 * (the shared heap, heap.c): only pages `heap` abandoned itself are
 * candidates; another's goes to the back, or to its arena if empty.
 * The candidates are chosen under reclaim_lock, so the pages passed over
 * never leave the queue: another thread adopting meanwhile finds them
 * there, where it would map a fresh page if they were out being looked at
 * (with 8 threads churning, each class's pages then only grew: secure's
 * 64-320 B classes held 2.5-3.4 times the pages after 60,000 threads).
 * A page taken (adopted or freed) keeps the sweep off the class until the
 * next one; pages only looked at do not: passed over, they may wait long
 * for frees, and a class in use with pages queued leaves the sweep
 * incomplete, retried every few milliseconds, each time taking and giving
 * up again every page of the idle classes. NULL if none. */
hak_page_t *hak_reclaim_adopt(hak_heap_t *heap, size_t bin, bool own_only) {
  reclaim_t *r = &reclaims[bin];
  if (reclaim_is_empty(r)) return NULL;
  hak_page_t *best = NULL, *empty = NULL, *page;
  hak_page_t *passed[HAK_ADOPT_CANDIDATES], *emptied[HAK_ADOPT_CANDIDATES];
  size_t best_live = 0, n_passed = 0, n_emptied = 0;
  adopt_rule_t rule = ADOPT_FULLEST;
  bool ruled = false;
  hak_lock(&reclaim_lock);
  reclaim_gather(r);
  for (int i = 0; i < HAK_ADOPT_CANDIDATES && (page = reclaim_take_first(r)) != NULL; i++) {
    size_t live = published_live(page);
    if (own_only && last_owner(page) != heap) {
      if (live == 0) emptied[n_emptied++] = page;
      else passed[n_passed++] = page;
      continue;
    }
    if (!ruled) rule = adopt_rule(page), ruled = true;
    if (rule == ADOPT_FULLEST && live == 0) {
      if (empty == NULL) empty = page;
      else emptied[n_emptied++] = page;
      continue;
    }
    if (rule == ADOPT_FULLEST && !worth_adopting(page, live)) {
      passed[n_passed++] = page;
      continue;
    }
    if (best == NULL || (rule == ADOPT_FULLEST ? live > best_live : live < best_live)) {
      if (best != NULL) passed[n_passed++] = best;
      best = page;
      best_live = live;
    } else {
      passed[n_passed++] = page;
    }
    if (rule == ADOPT_FIRST || (rule == ADOPT_EMPTIEST && live == 0)) break;
    if (rule == ADOPT_FULLEST && best_live >= (size_t)(best->reserved - best->reserved / 4)) break;   /* full enough */
  }
  if (best == NULL) best = empty;
  else if (empty != NULL) emptied[n_emptied++] = empty;
  for (size_t i = 0; i < n_passed; i++) reclaim_append(r, passed[i]);
  r->popped |= best != NULL || n_emptied > 0;
  atomic_store_explicit(&r->has_queued, r->queued != NULL, memory_order_relaxed);
  hak_unlock(&reclaim_lock);
  for (size_t i = 0; i < n_emptied; i++) free_published_empty(heap, emptied[i]);
  if (best != NULL) page_adopt(heap, best);
  return best;
}

/* Pages published for a class that nobody allocates any more would keep
 * their memory for ever, even once every block in them is freed. So the
 * sweep (when: purge.c) takes the published pages of every class nobody
 * adopted from since the last sweep (of every class if `all`), frees those
 * with no live block and publishes the rest again, with the last owner
 * they had (the shared heap adopts only its own). (Classes in use are left
 * alone: their allocators adopt those pages, and would map new ones while
 * the sweep held them.) `wait`: even if an adopter holds the queues (else the
 * sweep is skipped). False if pages were left for a later sweep. */
bool hak_reclaim_sweep(hak_heap_t *heap, bool wait, bool all) {
  if (!hak_lock_or_try(&reclaim_lock, wait)) return false;
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
    hak_heap_t *last = last_owner(page);
    page_adopt(heap, page);
    if (hak_page_used(page) == 0) hak_page_free_span(page);
    else hak_page_abandon(page, last, true);
  }
  return complete;
}

/* Blocks freed by other threads wait in page->xthread_free until the owner
 * gathers them, which an owner that stopped allocating never does (and an
 * owner that allocates from other pages not soon). In an owned page their
 * interiors can go back to the OS meanwhile: the list is taken off the page
 * with a CAS (the owner then just sees fewer remote frees, as if those were
 * still to come), each block's whole OS pages past its header are purged,
 * and the list is pushed back as a remote free would, publishing the page
 * if its owner abandoned it meanwhile. `used` counts these blocks all along,
 * so the page cannot be freed under us. Called with the page's arena lock
 * held (the span stays a page). Returns the bytes purged. */
size_t hak_page_purge_held(hak_page_t *page) {
  if (page->span_kind != HAK_SPAN_PAGE) return 0;
  const hak_segment_t *seg = hak_segment_of(page);
  /* (A page in a huge-page stretch: a purge would split the huge page.) */
  if (hak_slices_in_huge_stretch(seg, (size_t)(page - seg->pages), page->slice_count)) return 0;
  uintptr_t old = atomic_load_explicit(&page->xthread_free, memory_order_acquire);
  do {   /* owned pages only: a published page must keep its room for its adopter */
    if ((old & HAK_XSTATE_MASK) != HAK_XSTATE_ACTIVE || hak_xlist_first(old) == NULL) return 0;
  } while (!atomic_compare_exchange_weak_explicit(&page->xthread_free, &old, old & HAK_XSTATE_MASK,
                                                  memory_order_acquire, memory_order_relaxed));
  /* The list was pushed after its blocks left page_init's hands: block_size is settled. */
  hak_block_t *list = hak_xlist_first(old), *tail = list;
  size_t bs = page->block_size, purged = 0;
  for (hak_block_t *b = list; b != NULL; b = hak_block_next(page, b)) {
    uintptr_t from = hak_align_up((uintptr_t)b + sizeof(hak_block_t), HAK_OS_PAGE);
    uintptr_t to = hak_align_down((uintptr_t)b + bs, HAK_OS_PAGE);
    if (to > from && hak_os_purge((void *)from, to - from) != HAK_PURGE_FAILED) purged += to - from;
    tail = b;
  }
  xthread_push(page, list, tail, hak_xlist_count(old));
  return purged;
}
