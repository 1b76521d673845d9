/* Allocation: malloc and the rest of the standard surface that hands out
 * memory (calloc, realloc, the aligned family, C++ operator new), with the
 * glibc contracts: errno ENOMEM on failure, never a wrapped size. */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include "internal.h"

static HAK_NOINLINE void *malloc_slow(size_t size, hak_heap_t *heap, bool zero);

/* Take a block from a page's free list, or NULL if it has none. */
static inline void *page_pop(hak_page_t *page) {
  hak_block_t *b = page->free;
  if (hak_unlikely(b == NULL)) return NULL;
  page->free = b->next;
  page->used++;
  b->free_tag = 0;
  return b;
}

/* The fast path, for sizes up to 8 KiB: pop from the first page of the
 * size's class. No lock, no atomic; one TLS load, a table load, a pop. */
void *hak_malloc(size_t size) {
  hak_heap_t *heap = hak_heap_get();
  void *p;
  if (hak_likely(size <= HAK_SMALL_MAX)) p = page_pop(heap->direct[hak_direct_small(size)]);
  else if (size <= HAK_MID_MAX) p = page_pop(heap->direct[hak_direct_mid(size)]);
  else return hak_malloc_generic(size, heap, false);
  if (hak_likely(p != NULL)) return p;
  return malloc_slow(size, heap, false);
}


/* Any size: the small and mid direct tables, then the first page of the
 * class, without a call (so no registers to save); the rest in malloc_slow.
 * (Counting statistics keep the direct tables empty and skip the queue.) */
void *hak_malloc_generic(size_t size, hak_heap_t *heap, bool zero) {
  if (hak_likely(!zero)) {
    void *p = NULL;
    if (size <= HAK_MID_MAX) p = page_pop(heap->direct[hak_direct_index(size)]);
    else if (size <= HAK_MEDIUM_MAX && !hak_owner_counted) {
      hak_page_t *page = heap->queues[hak_bin_of(size)].first;
      if (page != NULL) p = page_pop(page);
    }
    if (p != NULL) return p;
  }
  return malloc_slow(size, heap, zero);
}

static void *malloc_slow(size_t size, hak_heap_t *heap, bool zero) {
  if (hak_unlikely(heap == &hak_heap_empty)) {
    heap = hak_heap_thread_init();
    if (heap == NULL) { errno = ENOMEM; return NULL; }
  }
  if ((++heap->generic_calls & 63) == 0) hak_purge_due_work(heap);   /* memory due back to the OS */
  if (size > HAK_MEDIUM_MAX) {
    if (hak_owner_counted) heap->stats[0].allocs++;
    return size <= HAK_LARGE_MAX ? hak_large_alloc(heap, size, zero) : hak_huge_alloc(size, 0, zero);
  }

  size_t bin = hak_bin_of(size);
  hak_page_t *page = heap->queues[bin].first;
  if (page != NULL && page->free == NULL) hak_page_collect(page);   /* the cheapest refill */
  if (page == NULL || page->free == NULL) {
    page = hak_page_for_bin(heap, bin);
    if (page == NULL) { errno = ENOMEM; return NULL; }
  }
  void *b = page_pop(page);
  if (hak_owner_counted) heap->stats[bin].allocs++;
  if (zero) memset(b, 0, size);
  return b;
}

void *hak_calloc(size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) { errno = ENOMEM; return NULL; }
  hak_heap_t *heap = hak_heap_get();
  if (total > HAK_MEDIUM_MAX) return hak_malloc_generic(total, heap, true);   /* fresh mappings are zero */
  void *p = hak_malloc_generic(total, heap, false);
  return p != NULL ? memset(p, 0, total) : NULL;
}

/* ------------------------------------------------------------ aligned */

static void *alloc_aligned(size_t align, size_t size, bool zero) {
  if (align <= HAK_ALIGN) return zero ? hak_calloc(1, size) : hak_malloc(size);
  /* At least one byte: the aligned address must lie inside its block (with
   * size 0 it could be the block's end, i.e. the next block's start). */
  if (size == 0) size = 1;
  if (size <= HAK_MEDIUM_MAX && align <= HAK_SLICE_SIZE) {
    /* Pages start on slice boundaries, so a class whose size is a multiple
     * of the alignment yields aligned blocks as they are. */
    if ((hak_bin_size(hak_bin_of(size)) & (align - 1)) == 0)
      return zero ? hak_calloc(1, size) : hak_malloc(size);
    size_t over = size + align - HAK_ALIGN;
    if (over <= HAK_MEDIUM_MAX) {
      uint8_t *p = hak_malloc_generic(over, hak_heap_get(), false);
      if (p == NULL) return NULL;
      uint8_t *q = (uint8_t *)hak_align_up((uintptr_t)p, align);
      /* The page is ours (we just allocated from it): from now on its frees
       * take the generic path, which maps interior pointers to blocks. */
      if (q != p) {
        hak_page_t *page = hak_page_of(hak_segment_of(p), p);
        atomic_store_explicit(&page->owner, hak_page_owner(page) | HAK_OWNER_ALIGNED, memory_order_relaxed);
      }
      if (zero) memset(q, 0, size);
      return q;
    }
  }
  /* Past the classes (over-allocating only overflows them above 512 KiB,
   * where every class is a multiple of 64 KiB and was taken above), large
   * blocks start on a slice. */
  if (align <= HAK_SLICE_SIZE && size <= HAK_LARGE_MAX)
    return hak_malloc_generic(size, hak_heap_get(), zero);
  return hak_huge_alloc(size, align, zero);
}

static bool is_power_of_two(size_t x) { return x != 0 && (x & (x - 1)) == 0; }

int hak_posix_memalign(void **out, size_t align, size_t size) {
  if (align < sizeof(void *) || !is_power_of_two(align)) return EINVAL;
  void *p = alloc_aligned(align, size, false);
  if (p == NULL) return ENOMEM;
  *out = p;
  return 0;
}

void *hak_aligned_alloc(size_t align, size_t size) {
  if (!is_power_of_two(align)) { errno = EINVAL; return NULL; }
  return alloc_aligned(align, size, false);
}

/* glibc's memalign rounds an alignment that is not a power of two up. */
void *hak_memalign(size_t align, size_t size) {
  if (align > SIZE_MAX / 2 + 1) { errno = EINVAL; return NULL; }
  if (!is_power_of_two(align)) align = align <= 1 ? 1 : (size_t)1 << (64 - __builtin_clzl(align - 1));
  return alloc_aligned(align, size, false);
}

void *hak_valloc(size_t size) { return alloc_aligned(HAK_OS_PAGE, size, false); }

void *hak_pvalloc(size_t size) {
  if (size > SIZE_MAX - HAK_OS_PAGE) { errno = ENOMEM; return NULL; }
  return alloc_aligned(HAK_OS_PAGE, size == 0 ? HAK_OS_PAGE : hak_align_up(size, HAK_OS_PAGE), false);
}

/* ------------------------------------------------------------ sizes, realloc */

/* Usable bytes from p to the end of its block. Reports a pointer hakmem
 * did not return. */
size_t hak_malloc_usable_size(const void *p) {
  if (p == NULL) return 0;
  if (!hak_segment_is_mapped(p)) {
    size_t n = hak_giant_usable_size(p);
    if (n == 0) hak_fatal("malloc_usable_size of %p, not allocated by hakmem", p);
    return n;
  }
  hak_segment_t *seg = hak_segment_of(p);
  hak_page_t *page = hak_page_of(seg, p);
  size_t n = 0;
  if (page->span_kind == HAK_SPAN_HUGE)
    n = hak_huge_usable_size(seg, page, p);
  else if (page->span_kind == HAK_SPAN_LARGE)
    n = (const uint8_t *)p == hak_page_area(page) ? page->block_size : 0;
  else if (page->span_kind == HAK_SPAN_PAGE && !(hak_page_owner(page) & HAK_OWNER_ALIGNED))
    n = page->block_size;   /* no interior pointers on this page: p starts its block */
  else if (page->span_kind == HAK_SPAN_PAGE && (const uint8_t *)p >= hak_page_area(page))
    n = (size_t)((const uint8_t *)hak_page_block_start(page, p) + page->block_size - (const uint8_t *)p);
  if (n == 0) hak_fatal("malloc_usable_size of %p, not allocated by hakmem", p);
  return n;
}

void *hak_realloc(void *p, size_t size) {
  if (p == NULL) return hak_malloc(size);
  if (size == 0) { hak_free(p); return NULL; }   /* glibc: frees, returns NULL */
  size_t usable = hak_malloc_usable_size(p);
  if (size <= usable && size >= usable / 2) return p;   /* fits, without wasting half */
  if (hak_segment_is_mapped(p) && size > HAK_MEDIUM_MAX) {
    hak_segment_t *seg = hak_segment_of(p);
    hak_page_t *page = hak_page_of(seg, p);
    if (page->span_kind == HAK_SPAN_HUGE) {
      void *q = hak_huge_realloc(seg, page, size);   /* no copy */
      if (q != NULL) return q;
    }
  }
  /* Growing past the block: take a quarter more than asked (as tcmalloc
   * does), so a buffer grown by small appends is not copied at every size
   * class on its way up. */
  void *q = NULL;
  if (size > usable && size - usable < usable / 4 && usable + usable / 4 <= HAK_MEDIUM_MAX)
    q = hak_malloc(usable + usable / 4);
  if (q == NULL) q = hak_malloc(size);
  if (q == NULL) return NULL;   /* errno is ENOMEM; p is untouched */
  memcpy(q, p, usable < size ? usable : size);
  hak_free(p);
  return q;
}

void *hak_reallocarray(void *p, size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) { errno = ENOMEM; return NULL; }
  return hak_realloc(p, total);
}

/* ------------------------------------------------------------ C++ new */

/* operator new must call the installed new_handler and retry, and throw
 * std::bad_alloc when there is none. The C++ runtime is only referenced
 * weakly: a C program does not load it, and never calls operator new. */
typedef void hak_new_handler_t(void);
extern hak_new_handler_t *_ZSt15get_new_handlerv(void) __attribute__((weak));   /* std::get_new_handler */
extern void _ZSt17__throw_bad_allocv(void) __attribute__((weak, noreturn));     /* std::__throw_bad_alloc */

static HAK_NOINLINE void *new_retry(size_t size, size_t align, bool nothrow) {
  for (;;) {
    hak_new_handler_t *handler = _ZSt15get_new_handlerv ? _ZSt15get_new_handlerv() : NULL;
    if (handler == NULL) {
      if (nothrow) return NULL;
      if (_ZSt17__throw_bad_allocv) _ZSt17__throw_bad_allocv();
      hak_fatal("operator new(%zu): out of memory", size);
    }
    handler();   /* frees memory, or throws, or aborts */
    void *p = alloc_aligned(align, size, false);
    if (p != NULL) return p;
  }
}

HAK_INTERNAL void *hak_new(size_t size) {
  void *p = hak_malloc(size);
  return hak_likely(p != NULL) ? p : new_retry(size, HAK_ALIGN, false);
}
HAK_INTERNAL void *hak_new_nothrow(size_t size, const void *tag) {
  (void)tag;
  void *p = hak_malloc(size);
  return hak_likely(p != NULL) ? p : new_retry(size, HAK_ALIGN, true);
}
HAK_INTERNAL void *hak_new_aligned(size_t size, size_t align) {
  void *p = alloc_aligned(align, size, false);
  return hak_likely(p != NULL) ? p : new_retry(size, align, false);
}
HAK_INTERNAL void *hak_new_aligned_nothrow(size_t size, size_t align, const void *tag) {
  (void)tag;
  void *p = alloc_aligned(align, size, false);
  return hak_likely(p != NULL) ? p : new_retry(size, align, true);
}

/* ------------------------------------------------------------ exported names */

#if !defined(HAKMEM_OVERRIDE) || HAKMEM_OVERRIDE
#define HAK_EXPORT_AS(target) __attribute__((alias(#target), visibility("default")))
void *malloc(size_t) HAK_EXPORT_AS(hak_malloc);
void *calloc(size_t, size_t) HAK_EXPORT_AS(hak_calloc);
void *realloc(void *, size_t) HAK_EXPORT_AS(hak_realloc);
void *reallocarray(void *, size_t, size_t) HAK_EXPORT_AS(hak_reallocarray);
int posix_memalign(void **, size_t, size_t) HAK_EXPORT_AS(hak_posix_memalign);
void *aligned_alloc(size_t, size_t) HAK_EXPORT_AS(hak_aligned_alloc);
void *memalign(size_t, size_t) HAK_EXPORT_AS(hak_memalign);
void *valloc(size_t) HAK_EXPORT_AS(hak_valloc);
void *pvalloc(size_t) HAK_EXPORT_AS(hak_pvalloc);
size_t malloc_usable_size(void *) HAK_EXPORT_AS(hak_malloc_usable_size);

/* C++: operator new / new[] (plain, nothrow, aligned, aligned nothrow). */
void *_Znwm(size_t) HAK_EXPORT_AS(hak_new);
void *_Znam(size_t) HAK_EXPORT_AS(hak_new);
void *_ZnwmRKSt9nothrow_t(size_t, const void *) HAK_EXPORT_AS(hak_new_nothrow);
void *_ZnamRKSt9nothrow_t(size_t, const void *) HAK_EXPORT_AS(hak_new_nothrow);
void *_ZnwmSt11align_val_t(size_t, size_t) HAK_EXPORT_AS(hak_new_aligned);
void *_ZnamSt11align_val_t(size_t, size_t) HAK_EXPORT_AS(hak_new_aligned);
void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t, size_t, const void *) HAK_EXPORT_AS(hak_new_aligned_nothrow);
void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t, size_t, const void *) HAK_EXPORT_AS(hak_new_aligned_nothrow);
#endif
