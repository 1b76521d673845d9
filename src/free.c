/* The free path, whole.
 *
 *   hak_free            validate the segment (one byte load), find the page
 *                       by masking; if this thread owns it: local free
 *   free_local          push on page->local_free, no atomics; a page whose
 *                       blocks are all free again is retired
 *   hak_free_generic    huge blocks, interior (aligned) pointers, and pages
 *                       of other threads or of nobody
 *   free_remote         lock-free push on page->xthread_free; the push that
 *                       finds the page ABANDONED publishes it for adoption
 *
 * A free of a block in a page never takes a lock (large and huge blocks go
 * back to their arena or cache, under its lock), and never touches a block
 * after publishing it (shared/LESSONS.md §3): once pushed, another thread
 * may already reuse it. */
#include "internal.h"

static HAK_NOINLINE HAK_NORETURN void report_double_free(const void *p) {
  hak_fatal("double free of %p", p);
}

static HAK_NOINLINE HAK_NORETURN void report_foreign(const void *p) {
  hak_fatal("free of %p, not allocated by hakmem", p);
}

/* A free block carries its tag (see hak_block_t): finding it on free means
 * the block is already free. Checked before the block is pushed anywhere,
 * so a double free never corrupts a free list. */
static inline void mark_free(hak_block_t *b) {
  uintptr_t tag = hak_free_tag(b);
  if (hak_unlikely(b->free_tag == tag)) report_double_free(b);
  b->free_tag = tag;
}

static inline void free_local(hak_heap_t *heap, hak_page_t *page, hak_block_t *b) {
  mark_free(b);
  b->next = page->local_free;
  page->local_free = b;
  if (hak_unlikely(--page->used == 0) && !hak_page_keep_when_empty(page)) hak_page_retire(heap, page);
}

static void free_remote(hak_page_t *page, hak_block_t *b) {
  mark_free(b);
  uintptr_t old = atomic_load_explicit(&page->xthread_free, memory_order_relaxed), state;
  do {
    state = old & HAK_XSTATE_MASK;
    if (state == HAK_XSTATE_ABANDONED) state = HAK_XSTATE_PUBLISHED;
    b->next = (hak_block_t *)(old & ~(uintptr_t)HAK_XSTATE_MASK);
  } while (!atomic_compare_exchange_weak_explicit(&page->xthread_free, &old, (uintptr_t)b | state,
                                                  memory_order_acq_rel, memory_order_relaxed));
  /* Edge-triggered: only the push that moved the page from ABANDONED to
   * PUBLISHED queues it, so a burst of frees costs one enqueue. (acq_rel:
   * that push must see the abandoning owner's writes to the page.) */
  if ((old & HAK_XSTATE_MASK) == HAK_XSTATE_ABANDONED) hak_page_publish(page);
  else if ((old & HAK_XSTATE_MASK) == HAK_XSTATE_PUBLISHED) hak_note_sweep_news();   /* it may be empty now */
  else hak_note_held_frees();   /* its owner may not collect it soon */
}

/* HAKMEM_STATS: every free comes here, and is counted on the freeing
 * thread's heap (which a thread that only frees may not have yet). */
static HAK_NOINLINE hak_heap_t *count_free(hak_heap_t *heap, size_t bin, bool remote) {
  if (heap == &hak_heap_empty && (heap = hak_heap_thread_init()) == NULL) return &hak_heap_empty;
  heap->stats[bin].frees++;
  if (remote) heap->stats[bin].remote_frees++;
  return heap;
}

void hak_free_generic(hak_heap_t *heap, hak_segment_t *seg, hak_page_t *page, void *p) {
  if (page->span_kind == HAK_SPAN_LARGE || page->span_kind == HAK_SPAN_HUGE) {
    if (hak_owner_counted) count_free(heap, 0, false);
    if (page->span_kind == HAK_SPAN_LARGE) hak_large_free(page, p);
    else hak_huge_free(seg, page, p);
    return;
  }
  uint8_t *area = hak_page_area(page);
  if (page->span_kind != HAK_SPAN_PAGE || (uint8_t *)p < area ||
      (uint8_t *)p >= area + (size_t)page->reserved * page->block_size)
    report_foreign(p);
  hak_block_t *b = hak_page_block_start(page, p);
  /* An interior pointer is only valid on a page that handed out aligned
   * blocks; the owner set that bit before the block left its hands. */
  uintptr_t owner = hak_page_owner(page);
  if ((void *)b != p && !(owner & HAK_OWNER_ALIGNED)) report_foreign(p);

  uintptr_t mine = (uintptr_t)heap, owner_heap = HAK_OWNER_HEAP(owner);
  bool local = owner_heap == mine ||
               (owner_heap == (mine | HAK_OWNER_ABANDONED) && heap != &hak_heap_empty &&
                hak_page_try_readopt(heap, page));   /* our own full page: take it back */
  if (hak_unlikely(hak_owner_counted)) heap = count_free(heap, page->bin, !local);
  if (local) free_local(heap, page, b);
  else free_remote(page, b);
}

/* NULL, a giant block, or a pointer that is not ours. */
static HAK_NOINLINE void free_unmapped(void *p) {
  if (p == NULL || hak_giant_free(p)) return;
  report_foreign(p);
}

void hak_free(void *p) {
  if (hak_unlikely(!hak_segment_is_mapped(p))) { free_unmapped(p); return; }
  hak_segment_t *seg = hak_segment_of(p);
  hak_page_t *page = hak_page_of(seg, p);
  hak_heap_t *heap = hak_heap_get();
  if (hak_likely(hak_page_owner(page) == (uintptr_t)heap)) {
    free_local(heap, page, (hak_block_t *)p);
    return;
  }
  hak_free_generic(heap, seg, page, p);
}

/* ------------------------------------------------------------ exported names */

#if !defined(HAKMEM_OVERRIDE) || HAKMEM_OVERRIDE
#define HAK_EXPORT_AS(target) __attribute__((alias(#target), visibility("default")))
void free(void *) HAK_EXPORT_AS(hak_free);
void cfree(void *) HAK_EXPORT_AS(hak_free);
/* C++ operator delete / delete[] in every form: the size and alignment
 * arguments are not needed, since the page knows both. They arrive in
 * registers hak_free ignores (x86-64 and AArch64 calling conventions), so
 * the differing prototypes are deliberate. */
#pragma GCC diagnostic ignored "-Wattribute-alias"
void _ZdlPv(void *) HAK_EXPORT_AS(hak_free);
void _ZdaPv(void *) HAK_EXPORT_AS(hak_free);
void _ZdlPvm(void *, size_t) HAK_EXPORT_AS(hak_free);
void _ZdaPvm(void *, size_t) HAK_EXPORT_AS(hak_free);
void _ZdlPvRKSt9nothrow_t(void *, const void *) HAK_EXPORT_AS(hak_free);
void _ZdaPvRKSt9nothrow_t(void *, const void *) HAK_EXPORT_AS(hak_free);
void _ZdlPvSt11align_val_t(void *, size_t) HAK_EXPORT_AS(hak_free);
void _ZdaPvSt11align_val_t(void *, size_t) HAK_EXPORT_AS(hak_free);
void _ZdlPvmSt11align_val_t(void *, size_t, size_t) HAK_EXPORT_AS(hak_free);
void _ZdaPvmSt11align_val_t(void *, size_t, size_t) HAK_EXPORT_AS(hak_free);
void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *, size_t, const void *) HAK_EXPORT_AS(hak_free);
void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *, size_t, const void *) HAK_EXPORT_AS(hak_free);
#endif
