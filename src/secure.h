/* The hardened variant (HAKMEM_SECURE=1: libhakmem-secure.so / .a), and
 * the hooks the other layers call for it. Every hook is an inline function
 * or a macro that is the plain operation in the default build, so the
 * default build's code is unchanged; the defences themselves live in
 * secure.c. What each defence catches is in README.md ("Hardening").
 *
 *   free-list links   encoded with a random per-page secret and the
 *                     link's own address; a decoded link that is not a
 *                     carved block of the page is reported (a use-after-
 *                     free or overflow write cannot steer malloc)
 *   fresh blocks      carved onto the free list in random order
 *   canary            an 8-byte trailer at the end of every block (the
 *                     count of bytes between the request and it, twice,
 *                     masked with a keyed hash), plus up to 16 pattern
 *                     bytes right after the request: checked on free,
 *                     realloc and malloc_usable_size
 *   quarantine        freed blocks wait in a per-thread FIFO (one for
 *                     small blocks, one for larger ones) before they
 *                     are reused, their first 64 bytes filled with a
 *                     pattern that is checked when they leave it
 *   guard page        the last OS page of a segment's metadata is
 *                     inaccessible: an underflow from the first data
 *                     slice faults instead of rewriting page descriptors
 *   block guards      the OS page right after each large and huge block
 *                     is inaccessible while the block lives: a linear
 *                     overflow (or read) past it faults at once
 *   page guards       the last OS page of each page's span is inaccessible
 *                     and holds no block: an overflow off the page's last
 *                     block faults there instead of reaching the next span
 *   families          the canary trailer also records which function
 *                     family allocated the block (malloc, new, new[],
 *                     and the aligned new forms): free, realloc and
 *                     each form of delete check it
 *
 * Included at the end of internal.h. */
#ifndef HAKMEM_SECURE_H
#define HAKMEM_SECURE_H

#if HAKMEM_SECURE

/* A link as stored: the next block, xor the page's secret (`secret`, or
 * its copy `remote_secret`), xor the address of the link itself (so a
 * link copied elsewhere decodes wrong). Its own inverse: applied to the
 * stored link, it gives the next block back. */
static inline uintptr_t hak_link_encode(uintptr_t secret, const hak_block_t *b, const hak_block_t *next) {
  return (uintptr_t)next ^ secret ^ (uintptr_t)&b->next;
}

HAK_INTERNAL HAK_NORETURN void hak_secure_bad_link(const hak_page_t *page, const hak_block_t *b);

/* The usual case of hak_block_next, alone: whether b's link, decoded into
 * *next, is NULL or a carved block of b's slice (so exactly right in a
 * one-slice page). */
static inline bool hak_block_next_quick(const hak_page_t *page, const hak_block_t *b, hak_block_t **next) {
  *next = (hak_block_t *)hak_link_encode(page->secret, b, b->next);
  return hak_likely((((uintptr_t)*next ^ (uintptr_t)b) >> HAK_SLICE_SHIFT) == 0 &&
                    hak_block_check_with(__atomic_load_n(&page->check_recip, __ATOMIC_RELAXED),
                                         __atomic_load_n(&page->check_bound, __ATOMIC_RELAXED), *next)) ||
         *next == NULL;   /* (the end of the list: tested second, as it is never in b's slice) */
}

/* The next block of a free list, checked: NULL or a carved block of the
 * page (exact for one-slice pages, through the page's copy of its slice's
 * hak_block_check data, which is 0 in a page of several slices). b is a
 * block of the page (a list's head is in the page descriptor, and each
 * link after it was checked), so in a one-slice page next must lie in b's
 * slice. */
static inline hak_block_t *hak_block_next(const hak_page_t *page, const hak_block_t *b) {
  hak_block_t *next;
  if (hak_likely(hak_block_next_quick(page, b, &next))) return next;
  /* (The purger walks held lists while the owner carves: see
   * hak_page_is_block_start.) */
  if (hak_unlikely(page->slice_count == 1 || !hak_page_is_block_start(page, next))) hak_secure_bad_link(page, b);
  return next;
}

static inline void hak_block_set_next(const hak_page_t *page, hak_block_t *b, hak_block_t *next) {
  b->next = (hak_block_t *)hak_link_encode(page->secret, b, next);
}

/* The same, by a thread pushing onto the page's xthread_free: with the
 * copy of the secret on that word's line. */
static inline void hak_block_set_next_remote(const hak_page_t *page, hak_block_t *b, hak_block_t *next) {
  b->next = (hak_block_t *)hak_link_encode(page->remote_secret, b, next);
}

/* The request as the pages see it: room for the canary trailer (a size
 * that would wrap stays too large, so it still fails with ENOMEM). */
#define HAK_CANARY_SIZE 8
static inline size_t hak_secure_request(size_t size) {
  return size > SIZE_MAX - HAK_CANARY_SIZE ? SIZE_MAX : size + HAK_CANARY_SIZE;
}

/* Allocation families, kept in the canary trailer: a block goes back
 * through its family's deallocation, as glibc's and ASan's
 * "alloc-dealloc-mismatch" (and, for the alignment, ASan's
 * "new-delete-type-mismatch") define it: malloc & co. (calloc, realloc,
 * the aligned functions) with free or realloc; new with delete; new[]
 * with delete[]; the align_val_t forms with their own. The nothrow forms
 * are their family's. malloc_usable_size reads any block (as ASan's). */
enum {
  HAK_FAMILY_MALLOC = 0,
  HAK_FAMILY_NEW = 1,
  HAK_FAMILY_NEW_ARRAY = 2,
  HAK_FAMILY_ALIGNED = 4,                /* flag: the align_val_t forms of new and new[] */
};

HAK_INTERNAL void *hak_secure_handout(void *p, size_t size);
HAK_INTERNAL void *hak_secure_set_family(void *p, unsigned family);
HAK_INTERNAL void *hak_secure_malloc(size_t size);
HAK_INTERNAL void *hak_secure_new(size_t size, unsigned family);            /* the nothrow forms */
HAK_INTERNAL void *hak_secure_new_throwing(size_t size, unsigned family);   /* the others */
HAK_INTERNAL void *hak_new_failed(size_t size, unsigned family);            /* alloc.c: new handler, bad_alloc */
/* alloc.c: a malloc whose own fast path took the heap's heartbeat to 0:
 * the slow path, which does the heartbeat's work. (Through
 * hak_malloc_generic, a second beat would take the counter past 0.) */
HAK_INTERNAL void *hak_malloc_at_heartbeat(size_t size, hak_heap_t *heap);
HAK_INTERNAL void  hak_secure_free_plain(void *p);          /* free */
HAK_INTERNAL void  hak_delete(void *p);                    /* free.c: the two base C++ deletes */
HAK_INTERNAL void  hak_delete_aligned(void *p);
HAK_INTERNAL void  hak_secure_delete(void *p);             /* theirs, each op known */
HAK_INTERNAL void  hak_secure_delete_array(void *p);
HAK_INTERNAL void  hak_secure_delete_aligned(void *p);
HAK_INTERNAL void  hak_secure_delete_array_aligned(void *p);
HAK_INTERNAL void  hak_secure_delete_sized(void *p, size_t size);
HAK_INTERNAL void  hak_secure_delete_array_sized(void *p, size_t size);
HAK_INTERNAL void  hak_secure_delete_aligned_sized(void *p, size_t size);
HAK_INTERNAL void  hak_secure_delete_array_aligned_sized(void *p, size_t size);
HAK_INTERNAL void  hak_secure_free_sized(void *p, size_t size);   /* free_sized, free_aligned_sized */
/* The guard page after a large or huge block: `page` made inaccessible
 * (on) or accessible again (off), the OS page right after the block;
 * false if it could not be made inaccessible. */
#define HAK_GUARD_SIZE HAK_OS_PAGE
HAK_INTERNAL bool  hak_secure_guard(void *page, bool on);
/* The guard page at the end of each page's span: no block takes it. */
#define HAK_PAGE_GUARD HAK_GUARD_SIZE
HAK_INTERNAL void  hak_secure_span_taken(hak_page_t *span, size_t slices, uint8_t kind);
HAK_INTERNAL size_t hak_secure_page_offset(const hak_page_t *span, size_t slices, size_t have);
HAK_INTERNAL void  hak_secure_segment_release(const hak_segment_t *seg);
HAK_INTERNAL void *hak_secure_realloc(void *p, size_t size);
HAK_INTERNAL size_t hak_secure_usable_size(const void *p);
HAK_INTERNAL void hak_secure_page_init(hak_page_t *page);
HAK_INTERNAL void hak_secure_carve(hak_page_t *page, uint8_t *first, size_t n);
HAK_INTERNAL void hak_secure_segment_init(hak_segment_t *seg);
HAK_INTERNAL void hak_secure_keys_init(void);   /* init.c: the process keys, chosen at start */
HAK_INTERNAL void hak_secure_fork_child(void);   /* init.c: a forked child's own random numbers */
HAK_INTERNAL void hak_quarantine_hand_over(hak_heap_t *heap);   /* heap.c: thread exit */
HAK_INTERNAL void hak_quarantine_age(hak_heap_t *heap);         /* alloc.c: at the heap's heartbeat */
HAK_INTERNAL void hak_quarantine_flush(hak_heap_t *heap);       /* purge.c: malloc_trim */
HAK_INTERNAL uint64_t hak_quarantine_shared_due(uint64_t now, bool wait);   /* purge.c: exited threads' blocks */
HAK_INTERNAL void hak_free_released(void *p, hak_heap_t *heap);   /* free.c */

#define HAK_REQUEST(size)        hak_secure_request(size)
#define HAK_HANDOUT(p, size)     hak_secure_handout((p), (size))

#else  /* the default build: the plain operations */

static inline hak_block_t *hak_block_next(const hak_page_t *page, const hak_block_t *b) {
  (void)page;
  return b->next;
}
static inline void hak_block_set_next(const hak_page_t *page, hak_block_t *b, hak_block_t *next) {
  (void)page;
  b->next = next;
}
static inline void hak_block_set_next_remote(const hak_page_t *page, hak_block_t *b, hak_block_t *next) {
  hak_block_set_next(page, b, next);
}

#define HAK_REQUEST(size)        (size)
#define HAK_HANDOUT(p, size)     (p)
#define HAK_PAGE_GUARD           0

#endif
#endif
