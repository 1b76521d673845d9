/* Pages: a span holding blocks of one size class, as its owner sees it.
 *
 * A page has three free lists:
 *   free         blocks to allocate from, which the owner's frees join (LIFO;
 *                owner only, no atomics)
 *   xthread_free blocks other threads freed (lock-free push, owner takes all)
 *   gathered     those the owner took while `free` was not empty (owner only)
 * When `free` runs dry the owner gathers the other two into it. Blocks are
 * carved from the page's unused area a little at a time; the free fast
 * path's exact block check follows the carving (hak_slice_t).
 *
 * How pages move between threads: owner.c. Which page a heap allocates
 * from: heap.c. */
#include <string.h>
#include "internal.h"

hak_page_t hak_page_empty;   /* free == NULL: the fast path falls through */
/* Bytes of a page's span of `slices` slices that blocks may take: all of
 * it, but in the secure variant its last OS page, the page's guard page
 * (secure.c). reserved follows, and with it the carving and the free fast
 * path's check (hak_slice_t), which never count a block past reserved. */
static size_t page_room(size_t slices) { return slices * HAK_SLICE_SIZE - HAK_PAGE_GUARD; }

/* Small classes: one slice (so the free fast path's one-multiply check
 * covers the page). The shared heap's own classes (hak_shared_bin_of),
 * which only it allocates from: the span of up to 4 slices whose tail
 * wastes least, since the OS page that holds a full page's last block
 * holds its tail too (a tail of 1 KiB per 64 KiB was 1.5% of the
 * 1,000-thread footprint). Larger: up to 16 blocks in about
 * HAK_PAGE_TARGET_BYTES, at least one block, with blocks added until the
 * page's tail (slices are 64 KiB) wastes at most an eighth of it.
 *
 * Why so few bytes: a page's free blocks stay resident while its owner
 * keeps the page (nothing purges a block on an owner's free list), and an
 * owner keeps a page per class it allocates. With pages of up to 4 MiB, a
 * producer whose blocks others free held up to 16 big blocks' worth per
 * class, ratcheting up to each class's most concurrent blocks ever: in
 * producer/consumer rounds (test_producer_consumer) resident memory crept
 * from 75 to 100 MiB over 100 rounds with every block freed. With pages of
 * 256 KiB it stays at 60 (blocks of 256 KiB and more get a page each, which
 * goes back to its arena, and is purged, when its block is freed). */
size_t hak_page_slices_for(size_t bin) {
  size_t block_size = hak_bin_size(bin);
  if (bin >= HAK_CLASS_BINS) {
    size_t best = 1;
    for (size_t slices = 2; slices <= 4; slices++)
      if (page_room(slices) % block_size * best < page_room(best) % block_size * slices) best = slices;
    return best;
  }
  if (block_size <= HAK_SMALL_MAX) return 1;
  size_t blocks = HAK_PAGE_TARGET_BYTES / block_size, slices;
  if (blocks > 16) blocks = 16;
  if (blocks < 1) blocks = 1;
  for (;; blocks++) {
    slices = (blocks * block_size + HAK_SLICE_SIZE - 1) / HAK_SLICE_SIZE;
    size_t span = slices * HAK_SLICE_SIZE;
    if ((span - span / block_size * block_size) * 8 <= span) break;
  }
  /* The secure variant's guard page takes the span's last OS page: the
   * span stays if what is left still wastes at most an eighth of it, else
   * it takes one slice more (a 1 MiB block: 17). */
  size_t room = page_room(slices);
  if (HAK_PAGE_GUARD > 0 && (room < block_size || room % block_size * 8 > slices * HAK_SLICE_SIZE)) slices++;
  return slices;
}

/* ------------------------------------------------------------ free lists */

/* The free fast path's block check of the page's slice (hak_slice_t),
 * and in the secure variant the page's copy of it for the link checks. */
static void page_store_check(hak_page_t *page, uint32_t recip, uint32_t bound) {
  hak_slice_t *check = hak_page_slice(page);
  __atomic_store_n(&check->recip, recip, __ATOMIC_RELAXED);
  __atomic_store_n(&check->bound, bound, __ATOMIC_RELAXED);
#if HAKMEM_SECURE
  __atomic_store_n(&page->check_recip, recip, __ATOMIC_RELAXED);
  __atomic_store_n(&page->check_bound, bound, __ATOMIC_RELAXED);
#endif
}

/* Keep the check in step with the carved blocks. Pages of several slices
 * keep it 0: their frees take the generic path, which checks with
 * hak_page_is_block_start. */
static void page_update_check(hak_page_t *page) {
  if (page->slice_count != 1) return;
  hak_slice_t want = hak_slice_check_for(page->block_size, page->capacity);
  page_store_check(page, want.recip, want.bound);
}

/* No block passes the check: a page with nothing carved yet, or freed. */
static void page_clear_check(hak_page_t *page) { page_store_check(page, 0, 0); }

void hak_page_init(hak_heap_t *heap, hak_page_t *page, size_t bin) {
  size_t bs = hak_bin_size(bin);
  page->free = NULL;
  page->gathered = NULL;
  hak_page_used_set(page, 0);
  __atomic_store_n(&page->capacity, 0, __ATOMIC_RELAXED);
  page_clear_check(page);   /* nothing carved yet */
  page->reserved = (uint16_t)(page_room(page->slice_count) / bs);
  atomic_store_explicit(&page->bin, (uint8_t)bin, memory_order_relaxed);
  page->block_size = (uint32_t)bs;
  page->block_magic = hak_block_magic(bs);
  page->area_neg = hak_leak_hidden((uintptr_t)hak_page_area(page));
  page->alone = false;   /* until it is queued */
  page->kept = page->took_remote = false;
  page->beat_mark = 0;
  atomic_store_explicit(&page->xthread_free, HAK_XSTATE_ACTIVE, memory_order_relaxed);
  hak_page_set_owner(page, (uintptr_t)heap | hak_owner_counted);
#if HAKMEM_SECURE
  hak_secure_page_init(page);   /* a fresh secret for its links */
#endif
}

/* Carve more blocks from the page's never-used area onto its free list.
 * Carving writes each block's link and free tag (it is free, so freeing it
 * before malloc handed it out is caught like any double free), so it makes
 * the OS pages under the blocks' starts resident: the first carve covers one
 * OS page, and each next one as much as is carved already, up to
 * HAK_EXTEND_BYTES. A thread that takes a few blocks of a class then pays
 * 4 KiB for them, not 16 (1,000 threads with 10 blocks each: 152 MB
 * resident, 16 MB live). `sparing` (the shared heap's pages, which threads
 * fill a few blocks at a time, under its lock) carves only the blocks that
 * start in the carving front's OS page: in those 1,000 threads each class's
 * last page otherwise held 2-16 KiB carved ahead, 220 KiB in all. */
void hak_page_extend(hak_page_t *page, bool sparing) {
  size_t bs = page->block_size;
  size_t n = (size_t)(page->reserved - page->capacity);
  size_t carved = (size_t)page->capacity * bs;
  size_t bytes = sparing ? HAK_OS_PAGE - (carved & (HAK_OS_PAGE - 1))
               : carved == 0 ? HAK_OS_PAGE : carved < HAK_EXTEND_BYTES ? carved : HAK_EXTEND_BYTES;
  size_t most = (bytes + bs - 1) / bs;   /* the blocks that start in the next `bytes` */
  if (n > most) n = most;
  uint8_t *first = hak_page_area(page) + (size_t)page->capacity * bs;
  if (hak_unlikely(hak_tracking)) hak_track_carve(first, n * bs, false);
#if HAKMEM_SECURE
  hak_secure_carve(page, first, n);   /* in random order */
#else
  hak_block_t *b = (hak_block_t *)first;
  for (size_t i = 1; i < n; i++, b = b->next) {
    b->next = (hak_block_t *)((uint8_t *)b + bs);
    b->free_tag = hak_free_tag(page);
  }
  b->next = page->free;
  b->free_tag = hak_free_tag(page);
  page->free = (hak_block_t *)first;
#endif
  if (hak_unlikely(hak_tracking)) hak_track_carve(first, n * bs, true);
  /* Relaxed atomic: a freeing thread may read it (hak_page_is_block_start). */
  __atomic_store_n(&page->capacity, (uint16_t)(page->capacity + n), __ATOMIC_RELAXED);
  page_update_check(page);
}

/* Take a list taken from xthread_free in, and stop counting its blocks as
 * used. The word says how many there are, so the list is not walked when
 * the free list or gathered is empty: it becomes that list as it is (each
 * block is touched once, by the malloc that hands it out; walking it to
 * append it cost larson with 16 threads 8% of its time). Else (and under a
 * tool, which must see each block closed) it goes in front of gathered. */
void hak_page_take_remote(hak_page_t *page, uintptr_t xfree) {
  hak_block_t *list = hak_xlist_first(xfree);
  if (list == NULL) return;
  size_t count = hak_xlist_count(xfree), used = hak_page_used(page);
  if (count == 0 || count > used) hak_fatal("heap corruption: %zu remote frees in a page with %zu blocks in use", count, used);
  page->took_remote = true;
  if (page->free == NULL && hak_likely(!hak_tracking)) {
    page->free = list;
  } else if (page->gathered == NULL && hak_likely(!hak_tracking)) {
    page->gathered = list;
  } else {
    hak_block_t *tail = list;
    for (hak_block_t *next; (next = hak_block_next(page, tail)) != NULL;) tail = next;
    hak_block_set_next(page, tail, page->gathered);
    if (hak_unlikely(hak_tracking)) hak_track_close_list(page, list, tail);
    page->gathered = list;
  }
  hak_page_used_set(page, (uint16_t)(used - count));
}

/* An empty free list takes the remote frees gathered before. */
void hak_page_use_gathered(hak_page_t *page) {
  if (page->free == NULL) {
    page->free = page->gathered;
    page->gathered = NULL;
  }
}

/* Gather the blocks other threads freed; an empty `free` takes them. Owner only. */
void hak_page_gather_frees(hak_page_t *page) {
  if (hak_xlist_first(atomic_load_explicit(&page->xthread_free, memory_order_relaxed)) != NULL)
    hak_page_take_remote(page, atomic_exchange_explicit(&page->xthread_free, HAK_XSTATE_ACTIVE, memory_order_acquire));
  hak_page_use_gathered(page);
  hak_assert(hak_page_is_valid(page));
}

/* ------------------------------------------------------------ validation */

/* A page as its owner sees it (debug build; see the invariants of
 * hak_page_t): its size fields agree, every block on free and gathered
 * is a carved block start carrying its free tag, those lists end, and with
 * the blocks in use (remote frees not yet gathered count as used) they
 * make up every carved block; the free fast path's check matches. */
static bool page_list_is_valid(const hak_page_t *page, const hak_block_t *b, size_t *count) {
  const uint8_t *area = hak_page_area(page);
  for (const hak_block_t *next; b != NULL; b = next) {
    size_t offset = (size_t)((const uint8_t *)b - area);
    if ((const uint8_t *)b < area || offset % page->block_size != 0 || offset / page->block_size >= page->capacity)
      return false;
    if (hak_tracking) hak_track_open((void *)b);   /* a free block: closed to tools */
    bool tagged = b->free_tag == hak_free_tag(page);
    next = hak_block_next(page, b);
    if (hak_tracking) hak_track_close((void *)b);
    if (!tagged) return false;
    if (++*count > page->capacity) return false;   /* a cycle */
  }
  return true;
}

bool hak_page_is_valid(const hak_page_t *page) {
  if (page->span_kind != HAK_SPAN_PAGE || page->block_size != hak_bin_size(page->bin)) return false;
  if (page->reserved != page_room(page->slice_count) / page->block_size) return false;
  if (page->capacity > page->reserved || hak_page_used(page) > page->capacity) return false;
  if (page->alone && (page->next != NULL || page->prev != NULL || page->slice_count != 1)) return false;
#if HAKMEM_SECURE
  for (size_t i = 0; i + 1 < page->slice_count; i++)   /* a guard at the span's end only */
    if (page[i].guarded) return false;
#endif
  size_t count = 0;
  if (!page_list_is_valid(page, page->free, &count) || !page_list_is_valid(page, page->gathered, &count))
    return false;
  if (count + hak_page_used(page) != page->capacity) return false;
  const hak_slice_t *check = hak_page_slice(page);
  for (size_t i = 1; i < page->slice_count; i++)   /* (the owner or adopter asks, the one that writes them) */
    if (hak_slice_owner(&check[i]) != hak_slice_owner(check)) return false;
  if (page->area_neg != hak_leak_hidden((uintptr_t)hak_page_area(page)) ||
      page->block_magic != hak_block_magic(page->block_size))
    return false;
#if HAKMEM_SECURE
  if (page->check_recip != check->recip || page->check_bound != check->bound) return false;   /* the link checks' copy */
  if (page->remote_secret != page->secret) return false;
  if (page->remote_block_size != page->block_size) return false;
#endif
  if (page->slice_count != 1) return check->recip == 0 && check->bound == 0;
  hak_slice_t want = hak_slice_check_for(page->block_size, page->capacity);
  return check->recip == want.recip && check->bound == want.bound;
}

/* ------------------------------------------------------------ back to the arena */

/* Every carved block of a page going back to its arena loses its free tag
 * (all of them hold it: carved, or freed). The page's descriptor names the
 * next page that starts on the same slice, so the tag would be that page's
 * too; one of another class has its blocks elsewhere, and a block of it
 * could hold the old tag in a later word: a program that moved that word,
 * never written, over the block's second word (a memmove of a buffer it
 * wrote in part) was stopped as a double free at its free. */
static HAK_NO_ASAN void page_clear_tags(hak_page_t *page) {
  uint8_t *area = hak_page_area(page);
  size_t bs = page->block_size, capacity = __atomic_load_n(&page->capacity, __ATOMIC_RELAXED);
  for (size_t k = 0; k < capacity; k++) {
    hak_block_t *b = (hak_block_t *)(area + k * bs);
    if (hak_unlikely(hak_tracking)) hak_track_open(b);
    b->free_tag = 0;
    if (hak_unlikely(hak_tracking)) hak_track_close(b);
  }
}

/* A page with no live block goes back to its arena. */
void hak_page_free_span(hak_page_t *page) {
  /* Every block is free (a block another thread freed counts in `used`
   * until it is gathered), so from here any free into the page is a double
   * free. One that has read the slice's check but not yet the tag would
   * miss the tag cleared below: its push finds the page FREED instead, or
   * one pushed already is found here. */
  uintptr_t xfree = atomic_exchange_explicit(&page->xthread_free, HAK_XSTATE_FREED, memory_order_acq_rel);
  if (hak_unlikely(hak_xlist_first(xfree) != NULL)) hak_report_freed(HAK_OP_FREE, hak_xlist_first(xfree), "its page was being freed");
  page_clear_tags(page);
  /* (After the tags, whose clearing closes each block again: a header left
   * poisoned outlived the segment under ASan, and a thread's heap mapped
   * there later failed its first write.) */
  if (hak_unlikely(hak_tracking)) hak_track_page_freed(hak_page_area(page), (size_t)page->slice_count * HAK_SLICE_SIZE);
  page_clear_check(page);
  hak_page_set_owner(page, 0);   /* (0 outside pages: hak_slice_t) */
  hak_page_stat_inc(&hak_page_stats[page->bin].pages_freed);
  bool given_back = hak_span_free(page, HAK_SPAN_PAGE);
  hak_assert(given_back);   /* (its state, FREED above, lets one thread only here) */
  (void)given_back;
}
