/* Allocation: malloc and the rest of the standard surface that hands out
 * memory (calloc, realloc, the aligned family, C++ operator new), with the
 * glibc contracts: errno ENOMEM on failure, never a wrapped size. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include "internal.h"

static HAK_NOINLINE void *malloc_slow(size_t size, hak_heap_t *heap, bool zero);

/* calloc of this much or more takes a large block (a span of its own,
 * segment.c) even within the size classes: of a span, only the slices
 * that held contents need clearing, the rest is fresh or purged and reads
 * as zero untouched, where a block of a page, which may have held
 * anything, is cleared whole and so made resident whole (2,000 blocks of
 * 500 KB, 64 bytes written in each: 1 GiB resident, against 9 MiB under
 * glibc, whose blocks that size are mappings of their own; numpy's zeros
 * are such blocks). A span's slices are 64 KiB: below this, rounding to
 * them would waste more than a size class does. */
#define HAK_CALLOC_SPAN_MIN ((size_t)128 * 1024)

/* A fast path's pop, or NULL: no block, or the heartbeat's turn. */
static inline void *page_pop_fast(hak_page_t *page, hak_heap_t *heap) {
  if (hak_unlikely(page->free == NULL) || hak_unlikely(!hak_heap_beat(heap))) return NULL;
  return hak_page_pop(page);
}

static HAK_NOINLINE void *malloc_medium(size_t size, hak_heap_t *heap);

/* The fast path, for sizes up to 8 KiB: pop from the first page of the
 * size's class. No lock, no atomic; one TLS load, a table load, a pop. */
void *hak_malloc(size_t size) {
#if HAKMEM_SECURE   /* every block takes the generic path and gets its canary */
  return hak_secure_malloc(size);
#endif
  hak_heap_t *heap = hak_heap_get();
  void *p;
  if (hak_likely(size <= HAK_DIRECT_FINE_MAX)) p = page_pop_fast(heap->direct[hak_direct_fine(size)], heap);
  else if (size <= HAK_SMALL_MAX) p = page_pop_fast(heap->direct[hak_direct_coarse(size)], heap);
  else return malloc_medium(size, heap);
  if (hak_likely(p != NULL)) return p;
  return malloc_slow(size, heap, false);
}

/* Any size: the small direct table, or malloc_medium; the rest in
 * malloc_slow. */
void *hak_malloc_generic(size_t size, hak_heap_t *heap, bool zero) {
  if (hak_likely(!zero)) {
    if (size > HAK_SMALL_MAX) return malloc_medium(size, heap);
    void *p = page_pop_fast(heap->direct[hak_direct_index(size)], heap);
    if (p != NULL) return p;
  }
  return malloc_slow(size, heap, zero);
}

#if HAKMEM_SECURE
void *hak_malloc_at_heartbeat(size_t size, hak_heap_t *heap) { return malloc_slow(size, heap, false); }
#endif

/* Above the small sizes: up to 32 KiB, the newest block of the class's
 * ring (heap->recent, free.c); then, up to HAK_MEDIUM_MAX, the first page
 * of the class, without a call (so no registers to save); the rest in
 * malloc_slow. (The rings stay empty and the queues are skipped when calls
 * are counted: free.c keeps no block then.) */
static void *malloc_medium(size_t size, hak_heap_t *heap) {
  size_t bin;
  if (size <= HAK_RECENT_MAX) {
    size_t i = hak_recent_index(size);
    unsigned count = heap->recent_count[i];
    if (count > 0) {   /* still in this core's cache, likely */
      if (hak_unlikely(!hak_heap_beat(heap))) return malloc_slow(size, heap, false);
      hak_block_t *b = heap->recent[i].slot[--count];
#if HAKMEM_SECURE
      /* As a page's pop checks (hak_page_pop): a block pushed twice (a
       * double free, after a write cleared its tag word) came out twice. */
      hak_page_t *page = hak_slice_at(hak_segment_of(b), b)->page;
      if (hak_unlikely(b->free_tag != hak_free_tag(page))) hak_secure_bad_link(page, b);
#endif
      heap->recent_count[i] = (uint8_t)count;
      b->free_tag = 0;
      return b;
    }
    bin = HAK_RECENT_FIRST + i;
  } else if (size <= HAK_MEDIUM_MAX) {
    bin = hak_bin_of(size);
  } else {
    return malloc_slow(size, heap, false);
  }
  hak_page_t *page = heap->queues[bin].first;
  if (page != NULL && !hak_owner_counted) {
    void *p = page_pop_fast(page, heap);
    if (p != NULL) return p;
  }
  return malloc_slow(size, heap, false);
}

/* The thread has no heap: one of its first allocations, or one after its
 * heap was given up at thread exit (see heap.c: the shared heap). The
 * purger may be due to start, which it cannot under the shared heap's lock. */
static HAK_NOINLINE void *malloc_without_heap(size_t size, bool zero) {
  hak_heap_t *heap = hak_heap_for_allocation(&size);
  if (heap == NULL) { errno = ENOMEM; return NULL; }
  void *p = malloc_slow(size, heap, zero);
  hak_heap_release(heap);
  hak_purger_consider_start();
  return p;
}

/* Every malloc of a block in a page comes here when calls are counted
 * (HAKMEM_STATS), or tracked by a tool (tracking.h). */
static HAK_NOINLINE void *page_pop_counted(hak_page_t *page, hak_heap_t *heap, size_t bin, size_t size) {
  if (hak_tracking) hak_track_open(page->free);   /* hak_page_pop reads its link */
  void *b = hak_page_pop(page);
  if (hak_tracking) hak_track_handout(b, size, false);
  hak_counter_inc(&heap->stats[bin].allocs);
  return b;
}

/* A large block (a span of one of the heap's arena's segments, placed on
 * `align`, 0 or a power of two) if one that size fits a segment there,
 * else a huge block. Under a tool, the block is handed out to the tool
 * before it is zeroed, so the tool sees the zeroing as the program's. */
static void *beyond_classes(size_t size, size_t align, hak_heap_t *heap, bool zero) {
  bool tracked = hak_unlikely(hak_tracking);
  void *p = align <= HAK_HUGE_ALIGN_MAX && size <= hak_large_max(align) ? hak_large_alloc(heap, size, align, zero && !tracked)
                                                                        : hak_huge_alloc(size, align, zero && !tracked);
  if (tracked) {
    hak_track_handout(p, size, false);
    if (zero && p != NULL) memset(p, 0, size);
  }
  return p;
}

/* A large or huge block, counted (HAKMEM_STATS) in its row (class 0) if
 * there is one. */
static HAK_NOINLINE void *malloc_beyond_classes(size_t size, size_t align, hak_heap_t *heap, bool zero) {
  void *p = beyond_classes(size, align, heap, zero);
  if (hak_owner_counted && p != NULL) hak_counter_inc(&heap->stats[0].allocs);
  return p;
}

/* A block of a page in the heap's queue, so owned by it. */
static void *malloc_from_pages(size_t size, size_t bin, hak_heap_t *heap, bool zero) {
  hak_page_t *page = heap->queues[bin].first;
  if (page == NULL || page->free == NULL) {
    page = hak_heap_page_for_bin(heap, bin);
    if (page == NULL) { errno = ENOMEM; return NULL; }
  }
  void *b = hak_unlikely(hak_owner_counted) ? page_pop_counted(page, heap, bin, size) : hak_page_pop(page);
  if (zero) memset(b, 0, size);
  return b;
}

static void *malloc_slow(size_t size, hak_heap_t *heap, bool zero) {
  if (hak_unlikely(heap == &hak_heap_empty)) return malloc_without_heap(size, zero);
  if (heap->heartbeat <= HAK_HEARTBEAT_SLOW) {   /* memory due back to the OS */
    heap->heartbeat = HAK_HEARTBEAT;
#if HAKMEM_SECURE
    hak_quarantine_age(heap);   /* (first: medium blocks it lets go may go to the recent rings) */
#endif
    hak_heap_flush_recent(heap, 1);
    hak_heap_abandon_kept(heap);
    hak_heap_retire_idle(heap);
    hak_heap_foreign_heartbeat(heap);
    hak_purge_due_work(heap);
  } else {
    heap->heartbeat -= HAK_HEARTBEAT_SLOW;
#if !HAKMEM_SECURE
    heap->slow_mallocs++;   /* (the foreign cache's window, free.c) */
#endif
  }
  if (size > HAK_MEDIUM_MAX || (zero && size >= HAK_CALLOC_SPAN_MIN)) return malloc_beyond_classes(size, 0, heap, zero);
  size_t bin = hak_heap_bin_of(heap, size);
#if !HAKMEM_SECURE
  if (heap->keeps_foreign && bin < HAK_FOREIGN_BINS && hak_foreign_drained(&heap->foreign[bin])) hak_heap_foreign_reset(heap, bin);
#endif
  return malloc_from_pages(size, bin, heap, zero);
}

void *hak_calloc(size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) { errno = ENOMEM; return NULL; }
  hak_heap_t *heap = hak_heap_get();
  if (HAK_REQUEST(total) >= HAK_CALLOC_SPAN_MIN)   /* a span's fresh or purged memory reads as zero */
    return HAK_HANDOUT(hak_malloc_generic(HAK_REQUEST(total), heap, true), total);
  void *p = hak_malloc_generic(HAK_REQUEST(total), heap, false);
  return p != NULL ? HAK_HANDOUT(memset(p, 0, total), total) : NULL;
}

/* ------------------------------------------------------------ aligned */

/* Every block an aligned request gets starts its block, so `free` needs
 * nothing to find it. Pages start on slice boundaries, and the class that
 * holds a multiple m of an alignment a (up to a slice) is a multiple of a
 * too: up to 128 bytes classes step by 16 (m is one); in (2^k, 2^(k+1)]
 * they are multiples of 2^(k-3), so m is one if a >= 2^(k-3), and the
 * class is a multiple of a otherwise; the shared heap's classes from 1 to
 * 4 KiB are the request rounded to lines, m itself (unit_size_classes
 * checks all of it). So the request rounded up to a multiple of the
 * alignment gets a block aligned as it is. (Over-allocating by a - 16 and
 * handing out an aligned address inside the block took a class more, and
 * sent every free of its page to the slow path: alignmix peaked at 13.0
 * MiB, not 12.7, and took 1.09x the time.) Large blocks start on a slice.
 * (A block of at least one byte: 0 would round to 0, whose class is 16
 * bytes, and a huge block of none is no block. The size handed out stays
 * the one asked for, which the secure variant's free_sized checks.) */
size_t hak_aligned_request(size_t size, size_t align) {
  size_t request = HAK_REQUEST(size > 0 ? size : 1);
  /* (Not rounded beyond the classes: a large block is aligned already, and
   * in the secure variant its guard page then follows its request, not
   * the alignment's round-up, up to 64 KiB further.) */
  return request > HAK_MEDIUM_MAX ? request : hak_align_up(request, align);
}

/* A block aligned beyond a slice, or too large for the classes: a large
 * block placed on its alignment (an arena's span, as any large block: a
 * mapping each, as it was, made 80,000 blocks of 100 bytes aligned to 128
 * KiB hit the kernel's limit of mappings) or a huge one, on the thread's
 * heap, made now if it has none, as malloc makes one for a block beyond
 * the small sizes. */
static HAK_NOINLINE void *alloc_aligned_beyond(size_t request, size_t align, bool zero) {
  hak_heap_t *heap = hak_heap_get(), *own = heap;
  if (heap == &hak_heap_empty && (own = hak_heap_thread_init()) == NULL) { errno = ENOMEM; return NULL; }
  void *p = malloc_beyond_classes(request, align, own, zero);
  if (own != heap) {
    hak_heap_release(own);
    hak_purger_consider_start();   /* (not under the shared heap's lock: malloc_without_heap) */
  }
  return p;
}

static void *alloc_aligned(size_t align, size_t size, bool zero) {
  if (align <= HAK_ALIGN) return zero ? hak_calloc(1, size) : hak_malloc(size);
  if (align <= HAK_SLICE_SIZE && size <= HAK_LARGE_MAX)
    return HAK_HANDOUT(hak_malloc_generic(hak_aligned_request(size, align), hak_heap_get(), zero), size);
  return HAK_HANDOUT(alloc_aligned_beyond(HAK_REQUEST(size > 0 ? size : 1), align, zero), size);
}

static bool is_power_of_two(size_t x) { return x != 0 && (x & (x - 1)) == 0; }

int hak_posix_memalign(void **out, size_t align, size_t size) {
  if (align < sizeof(void *) || !is_power_of_two(align)) return EINVAL;
  void *p = alloc_aligned(align, size, false);
  if (p == NULL) return ENOMEM;
  *out = p;
  return 0;
}

/* C17 (and glibc 2.38 on): an alignment that is not a power of two fails
 * (glibc 2.36 took 0 as malloc, and rounded the rest up as memalign). */
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

/* malloc_usable_size of any block, or a report; under a tool, the whole
 * block is the caller's now. */
static HAK_NOINLINE size_t usable_size_searched(const void *p) {
  hak_block_ref_t ref;
  hak_block_find(HAK_OP_USABLE_SIZE, p, &ref);
  if (hak_unlikely(hak_tracking)) hak_track_resize((void *)p, ref.usable, ref.usable);
  return ref.usable;
}

/* Usable bytes from p to the end of its block. Reports a pointer hakmem
 * did not hand out, or a block already freed. A block of a page is
 * answered at once, without a ref written to memory: a program may ask at
 * every malloc and free (redis does, to count its memory), and this cost
 * it 46 instructions a call with the ref, 28 without. */
size_t hak_malloc_usable_size(const void *p) {
#if HAKMEM_SECURE   /* the requested size: the bytes past it hold the canary */
  return hak_secure_usable_size(p);
#endif
  if (p == NULL) return 0;
  hak_segment_t *seg;
  hak_page_t *page;
  if (hak_likely(!hak_tracking) && (page = hak_live_block_page(p, &seg)) != NULL) return page->block_size;
  return usable_size_searched(p);
}

/* The usable size malloc(size) gives at least, without allocating (as
 * jemalloc's nallocx, but a lower bound): for a small size the lesser of
 * what a thread heap and the shared heap give (the shared heap's is less
 * from 1 to 4 KiB only), else the block's class, whole slices for a large
 * block, whole OS pages for a huge one (one taken from the cache of freed
 * ones may hold up to an eighth more); 0 for a size malloc cannot serve.
 * The secure variant gives exactly the size asked for: its canary follows. */
size_t hak_good_size(size_t size) {
#if HAKMEM_SECURE
  return hak_secure_request(size) <= HAK_MAX_REQUEST ? size : 0;
#endif
  if (size <= HAK_SMALL_MAX) {
    size_t own = hak_bin_size(hak_bin_of(size)), shared = hak_shared_block_size(size);
    return own < shared ? own : shared;
  }
  if (size <= HAK_MEDIUM_MAX) return hak_bin_size(hak_bin_of(size));
  if (size <= HAK_LARGE_MAX) return hak_align_up(size, HAK_SLICE_SIZE);
  if (size <= HAK_MAX_REQUEST) return hak_align_up(size, HAK_OS_PAGE);
  return 0;
}

/* How realloc moves a block of `usable` bytes that must hold `need` (the
 * secure variant's request, canary included, secure.c). Growing past the
 * block: take a quarter more than asked (as tcmalloc does), so a buffer
 * grown by small appends is not copied at every size class on its way up.
 * A large block growing again gets a mapping of its own (a huge block,
 * even below HAK_LARGE_MAX): a buffer that keeps growing grows on by
 * mremap, in place or moving its pages, where a large one would be copied
 * each time (glibc grows its mmapped chunks the same way). A block that
 * grows once past the classes stays in the arena, which reuses resident
 * memory. Not while counting or tracking, which only malloc's own path
 * does. */
hak_growth_t hak_realloc_growth(size_t usable, size_t need) {
  if (need > usable && need - usable < usable / 4 && usable + usable / 4 <= HAK_MEDIUM_MAX) return HAK_GROW_QUARTER;
  if (need > usable && usable > HAK_MEDIUM_MAX && !hak_tracking && !hak_owner_counted) return HAK_GROW_HUGE;
  return HAK_GROW_AS_ASKED;
}

#if !HAKMEM_SECURE   /* (whose realloc checks the canary, and moves a block it shrinks by a page or more) */
/* realloc's move: a block of its own for `size` bytes, p's copied over
 * (out of line: the resize in place then saves no registers). */
static HAK_NOINLINE void *realloc_move(void *p, size_t size, const hak_block_ref_t *ref) {
  size_t usable = ref->usable;
  int saved = errno;   /* (a way tried and refused on the way is not the call's failure) */
  if (ref->kind == HAK_SPAN_HUGE && size > HAK_MEDIUM_MAX && !hak_tracking) {
    if (!hak_huge_take_for_resize(ref->page)) hak_report_raced(HAK_OP_REALLOC, p);
    void *q = hak_huge_realloc(ref->seg, ref->page, size);   /* no copy */
    if (q != NULL) { errno = saved; return q; }
  }
  void *q = NULL;
  hak_growth_t growth = hak_realloc_growth(usable, size);
  if (growth == HAK_GROW_QUARTER) q = hak_malloc(usable + usable / 4);
  else if (growth == HAK_GROW_HUGE) q = hak_huge_alloc(size, 0, false);
  if (q == NULL) q = hak_malloc(size);
  if (q == NULL) return NULL;   /* errno is ENOMEM; p is untouched */
  errno = saved;
  if (hak_unlikely(hak_tracking)) hak_track_resize(p, usable, usable);   /* the copy reads past the request */
  memcpy(q, p, usable < size ? usable : size);
  hak_free(p);
  return q;
}

/* realloc's shrink in place of a large or huge block p by a slice or
 * more: what falls off goes back (a large block's slices to its arena, a
 * huge block's pages to the OS), as glibc and jemalloc do; a buffer grown
 * by doubling and cut to its length at the end would otherwise keep up to
 * twice that resident. Returns its usable size now. */
static HAK_NOINLINE size_t realloc_shrink(const void *p, size_t size, const hak_block_ref_t *ref) {
  if (ref->kind == HAK_SPAN_LARGE) {
    if (!hak_large_shrink(ref->page, ref->usable, size)) hak_report_raced(HAK_OP_REALLOC, p);
    return ref->page->block_size;
  }
  if (!hak_huge_take_for_resize(ref->page)) hak_report_raced(HAK_OP_REALLOC, p);
  return hak_huge_shrink(ref->seg, ref->page, size);
}
#endif

void *hak_realloc(void *p, size_t size) {
#if HAKMEM_SECURE
  return hak_secure_realloc(p, size);
#else
  if (p == NULL) return hak_malloc(size);
  if (size == 0) { hak_free(p); return NULL; }   /* glibc: frees, returns NULL */
  hak_block_ref_t ref;
  hak_block_find(HAK_OP_REALLOC, p, &ref);   /* exact: no freed or interior pointer gets through */
  size_t usable = ref.usable;
  if (size <= usable && size >= usable / 2) {   /* fits, without wasting half */
    size_t kept = usable;
    if (usable - size >= HAK_SLICE_SIZE && (ref.kind == HAK_SPAN_LARGE || ref.kind == HAK_SPAN_HUGE))
      kept = realloc_shrink(p, size, &ref);
    if (hak_unlikely(hak_tracking)) hak_track_cut(p, size, kept, usable);
    return p;
  }
  return realloc_move(p, size, &ref);
#endif
}

void *hak_reallocarray(void *p, size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) { errno = ENOMEM; return NULL; }
  return hak_realloc(p, total);
}

/* ------------------------------------------------------------ C++ new */

/* operator new must call the installed new_handler and retry, and throw
 * std::bad_alloc when there is none. hakmem is C and may serve programs
 * that never load the C++ runtime, or load it later with dlopen (a C
 * program loading a C++ module, privately): so the runtime's functions are
 * looked up when an allocation fails, never before, and never on a fast
 * path (dlsym may allocate; failing operator new is the place for that).
 * `operator`: the name is one of the operators, which allocators define
 * too: only libstdc++'s own will do (another allocator preloaded after
 * hakmem defines the next one, whose nothrow form neither calls the
 * program's new nor makes hakmem's blocks). Else a function only the
 * runtime defines: the program's global scope first (its copy of the
 * runtime, if it has its own). */
static void *cxx_runtime_symbol(const char *name, bool operator) {
  void *sym = operator ? NULL : dlsym(RTLD_DEFAULT, name);   /* C++ programs: global scope */
  if (sym != NULL) return sym;
  void *lib = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_NOLOAD);   /* loaded privately, or not at all */
  if (lib == NULL) return NULL;
  sym = dlsym(lib, name);
  dlclose(lib);
  return sym;
}

typedef void hak_new_handler_t(void);

static hak_new_handler_t *cxx_new_handler(void) {
  hak_new_handler_t *(*get)(void) = (hak_new_handler_t *(*)(void))cxx_runtime_symbol("_ZSt15get_new_handlerv", false);
  return get != NULL ? get() : NULL;
}

static HAK_NORETURN void cxx_throw_bad_alloc(size_t size) {
  void (*throw_bad_alloc)(void) = (void (*)(void))cxx_runtime_symbol("_ZSt17__throw_bad_allocv", false);
  if (throw_bad_alloc != NULL) throw_bad_alloc();
  hak_fatal("operator new(%zu): out of memory", size);
}

/* The throwing forms: call the new_handler until it makes room, or throw. */
static HAK_NOINLINE void *new_retry(size_t size, size_t align) {
  for (;;) {
    hak_new_handler_t *handler = cxx_new_handler();
    if (handler == NULL) cxx_throw_bad_alloc(size);
    handler();   /* frees memory, or throws, or aborts */
    void *p = alloc_aligned(align, size, false);
    if (p != NULL) return p;
  }
}

/* The nothrow forms behave as the throwing ones inside try/catch (a
 * handler may throw bad_alloc). C cannot catch, so the C++ runtime's own
 * nothrow operator, which is exactly that try/catch around the throwing
 * operator (ours, through the usual symbol resolution), does it. Without a
 * C++ runtime there is no handler to call. */
typedef void *hak_new_nothrow_t(size_t, const void *);
typedef void *hak_new_aligned_nothrow_t(size_t, size_t, const void *);

/* `symbol`: the runtime's nothrow operator of the same form (new or
 * new[]), which calls ours back. */
static HAK_NOINLINE void *nothrow_retry(const char *symbol, size_t size, const void *tag) {
  hak_new_nothrow_t *runtime_new = (hak_new_nothrow_t *)cxx_runtime_symbol(symbol, true);
  return runtime_new != NULL && cxx_new_handler() != NULL ? runtime_new(size, tag) : NULL;
}

static HAK_NOINLINE void *aligned_nothrow_retry(const char *symbol, size_t size, size_t align, const void *tag) {
  hak_new_aligned_nothrow_t *runtime_new = (hak_new_aligned_nothrow_t *)cxx_runtime_symbol(symbol, true);
  return runtime_new != NULL && cxx_new_handler() != NULL ? runtime_new(size, align, tag) : NULL;
}
#define NEW_NOTHROW               "_ZnwmRKSt9nothrow_t"
#define NEW_ARRAY_NOTHROW         "_ZnamRKSt9nothrow_t"
#define NEW_ALIGNED_NOTHROW       "_ZnwmSt11align_val_tRKSt9nothrow_t"
#define NEW_ARRAY_ALIGNED_NOTHROW "_ZnamSt11align_val_tRKSt9nothrow_t"

/* A nothrow form, in a program that replaced the form it calls (cxx.c):
 * the runtime's own (found once, as nothrow_retry finds it), which makes
 * that call inside try/catch. Without the runtime in reach (a static
 * program) the call is made here: a bad_alloc it throws then passes. */
static void *runtime_nothrow[HAK_CXX_FORMS];   /* by the form called; NULL: not looked up yet */

static HAK_NOINLINE void *nothrow_replaced(hak_cxx_form_t callee, const char *symbol, size_t size, size_t align,
                                           const void *tag) {
  void *runtime = __atomic_load_n(&runtime_nothrow[callee], __ATOMIC_ACQUIRE);
  if (runtime == NULL) {
    runtime = cxx_runtime_symbol(symbol, true);
    if (runtime == NULL) return hak_cxx_new(callee, size, align);
    __atomic_store_n(&runtime_nothrow[callee], runtime, __ATOMIC_RELEASE);
  }
  if (hak_cxx_aligned(callee)) return ((hak_new_aligned_nothrow_t *)runtime)(size, align, tag);
  return ((hak_new_nothrow_t *)runtime)(size, tag);
}

/* Each form's own allocation: the size, the alignment (HAK_ALIGN: none
 * asked), and in the secure variant the family it records (secure.h; the
 * default build has none). The throwing forms call the new_handler and
 * throw when there is no memory, the nothrow ones return NULL, or what the
 * runtime's nothrow operator of the same form gets after a handler made
 * room (it calls ours back). A form the runtime defines as a call of
 * another makes that call instead if the program replaced the other. */
#if HAKMEM_SECURE
#define FAMILY_NEW               HAK_FAMILY_NEW
#define FAMILY_NEW_ARRAY         HAK_FAMILY_NEW_ARRAY
#define FAMILY_NEW_ALIGNED       (HAK_FAMILY_NEW | HAK_FAMILY_ALIGNED)
#define FAMILY_NEW_ARRAY_ALIGNED (HAK_FAMILY_NEW_ARRAY | HAK_FAMILY_ALIGNED)

/* The throwing forms' slow path, when it found no memory (secure.c). */
void *hak_new_failed(size_t size, unsigned family) {
  return hak_secure_set_family(new_retry(size, HAK_ALIGN), family);
}
static inline void *new_own(size_t size, unsigned family) { return hak_secure_new_throwing(size, family); }
static inline void *new_nothrow_own(size_t size, unsigned family) { return hak_secure_new(size, family); }
static inline void *new_aligned_own(size_t size, size_t align, unsigned family) {
  void *p = alloc_aligned(align, size, false);
  return hak_secure_set_family(hak_likely(p != NULL) ? p : new_retry(size, align), family);
}
static inline void *new_aligned_nothrow_own(size_t size, size_t align, unsigned family) {
  void *p = alloc_aligned(align, size, false);
  return hak_likely(p != NULL) ? hak_secure_set_family(p, family) : NULL;
}
#else
#define FAMILY_NEW               0
#define FAMILY_NEW_ARRAY         0
#define FAMILY_NEW_ALIGNED       0
#define FAMILY_NEW_ARRAY_ALIGNED 0
static inline void *new_own(size_t size, unsigned family) {
  void *p = hak_malloc(size);
  return hak_likely(p != NULL) ? p : new_retry(size, HAK_ALIGN);
}
static inline void *new_nothrow_own(size_t size, unsigned family) { return hak_malloc(size); }
static inline void *new_aligned_own(size_t size, size_t align, unsigned family) {
  void *p = alloc_aligned(align, size, false);
  return hak_likely(p != NULL) ? p : new_retry(size, align);
}
static inline void *new_aligned_nothrow_own(size_t size, size_t align, unsigned family) {
  return alloc_aligned(align, size, false);
}
#endif

HAK_INTERNAL void *hak_new(size_t size) { return new_own(size, FAMILY_NEW); }
HAK_INTERNAL void *hak_new_aligned(size_t size, size_t align) { return new_aligned_own(size, align, FAMILY_NEW_ALIGNED); }

/* The nothrow forms' own, and the runtime's nothrow retry if it fails. */
static inline void *new_nothrow_or_retry(size_t size, unsigned family, const char *symbol, const void *tag) {
  void *p = new_nothrow_own(size, family);
  return hak_likely(p != NULL) ? p : nothrow_retry(symbol, size, tag);
}
static inline void *new_aligned_nothrow_or_retry(size_t size, size_t align, unsigned family, const char *symbol,
                                                 const void *tag) {
  void *p = new_aligned_nothrow_own(size, align, family);
  return hak_likely(p != NULL) ? p : aligned_nothrow_retry(symbol, size, align, tag);
}

/* A form the runtime defines as a call of `callee`: that call if the
 * program replaced it, else `own`. (The check out of line, and jumped to:
 * the form then keeps nothing in registers across a call.) */
#define NEW_FORM(name, params, args, callee, replaced, own)          \
  static HAK_NOINLINE void *name##_checked params {                  \
    return hak_cxx_replaced(callee) ? (replaced) : (own);            \
  }                                                                  \
  HAK_INTERNAL void *name params {                                   \
    if (hak_cxx_maybe_replaced()) return name##_checked args;        \
    return own;                                                      \
  }
NEW_FORM(hak_new_array, (size_t size), (size), HAK_CXX_NEW,
         hak_cxx_new(HAK_CXX_NEW, size, 0), new_own(size, FAMILY_NEW_ARRAY))
NEW_FORM(hak_new_nothrow, (size_t size, const void *tag), (size, tag), HAK_CXX_NEW,
         nothrow_replaced(HAK_CXX_NEW, NEW_NOTHROW, size, 0, tag),
         new_nothrow_or_retry(size, FAMILY_NEW, NEW_NOTHROW, tag))
NEW_FORM(hak_new_array_nothrow, (size_t size, const void *tag), (size, tag), HAK_CXX_NEW_ARRAY,
         nothrow_replaced(HAK_CXX_NEW_ARRAY, NEW_ARRAY_NOTHROW, size, 0, tag),
         new_nothrow_or_retry(size, FAMILY_NEW_ARRAY, NEW_ARRAY_NOTHROW, tag))
NEW_FORM(hak_new_array_aligned, (size_t size, size_t align), (size, align), HAK_CXX_NEW_ALIGNED,
         hak_cxx_new(HAK_CXX_NEW_ALIGNED, size, align), new_aligned_own(size, align, FAMILY_NEW_ARRAY_ALIGNED))
NEW_FORM(hak_new_aligned_nothrow, (size_t size, size_t align, const void *tag), (size, align, tag), HAK_CXX_NEW_ALIGNED,
         nothrow_replaced(HAK_CXX_NEW_ALIGNED, NEW_ALIGNED_NOTHROW, size, align, tag),
         new_aligned_nothrow_or_retry(size, align, FAMILY_NEW_ALIGNED, NEW_ALIGNED_NOTHROW, tag))
NEW_FORM(hak_new_array_aligned_nothrow, (size_t size, size_t align, const void *tag), (size, align, tag),
         HAK_CXX_NEW_ARRAY_ALIGNED, nothrow_replaced(HAK_CXX_NEW_ARRAY_ALIGNED, NEW_ARRAY_ALIGNED_NOTHROW, size, align, tag),
         new_aligned_nothrow_or_retry(size, align, FAMILY_NEW_ARRAY_ALIGNED, NEW_ARRAY_ALIGNED_NOTHROW, tag))

HAK_DEFINE_EXPORTS(HAK_EXPORTS_ALLOC)
HAK_DEFINE_WEAK_EXPORTS(HAK_EXPORTS_NEW)
