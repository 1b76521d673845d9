/* Segments and arenas.
 *
 * An arena segment is HAK_SEGMENT_SIZE bytes at a HAK_SEGMENT_SIZE-aligned
 * address: a header (with one page descriptor per slice) followed by slices
 * of HAK_SLICE_SIZE. An arena carves its segments into spans of slices for
 * pages, and takes them back, coalescing free neighbours. Free spans keep
 * their memory for a short delay (HAKMEM_PURGE_DELAY) before it is purged,
 * so bursts reuse resident memory without system calls; fully free segments
 * beyond HAK_EMPTY_SEGMENTS_KEPT per arena are unmapped. When purges are due
 * and how long the delay is: purge.c. (Huge segments: huge.c.) */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include "internal.h"

hak_segment_t *hak_segment_map[HAK_SEGMENT_MAP_SIZE];

static hak_arena_t arenas[HAK_ARENAS_MAX];
static unsigned arena_count = 1;
static _Atomic unsigned arena_next;

void hak_segment_map_set(hak_segment_t *seg, bool mapped) {
  size_t i = ((uintptr_t)seg >> HAK_SEGMENT_SHIFT) & (HAK_SEGMENT_MAP_SIZE - 1);
  __atomic_store_n(&hak_segment_map[i], mapped ? seg : NULL, __ATOMIC_RELEASE);
}

static bool arena_is_valid(hak_arena_t *a);   /* debug build: after every span change */
static void stretches_init(void);

static void arena_lock_init(hak_arena_t *a) { pthread_mutex_init(&a->lock, NULL); }

void hak_arenas_init(void) {
  long n = hak_option(HAK_OPT_ARENAS);
  if (n <= 0) n = (long)hak_cpu_count();
  arena_count = n > HAK_ARENAS_MAX ? HAK_ARENAS_MAX : (unsigned)n;
  for (unsigned i = 0; i < HAK_ARENAS_MAX; i++) {
    arena_lock_init(&arenas[i]);
    hak_purge_clock_init(&arenas[i].clock);
  }
  stretches_init();
}

unsigned hak_arena_count(void) { return arena_count; }

/* The shared heap's arena (heap.c): the one the first thread heap draws
 * too, so a single-threaded program stays in one arena when its thread
 * leaves the shared heap (its frees and new blocks keep meeting). */
hak_arena_t *hak_arena_first(void) { return &arenas[0]; }

hak_arena_t *hak_arena_for_new_heap(void) {
  unsigned i = atomic_fetch_add_explicit(&arena_next, 1, memory_order_relaxed);
  return &arenas[i % arena_count];
}

/* ------------------------------------------------------------ free spans */

/* Free spans are binned by slice count: exact up to 8, then two bins per
 * power of two. A bin may hold spans smaller than a request of its range;
 * every higher bin holds only larger spans. */
static size_t span_bin(size_t n) {
  if (n <= 8) return n - 1;
  unsigned b = 63u - (unsigned)__builtin_clzl(n);
  return 8 + (b - 3) * 2 + ((n >> (b - 1)) & 1);
}

static size_t slice_index(const hak_page_t *span) { return (size_t)(span - hak_segment_of(span)->pages); }

/* A free span maps only its first and last slice: coalescing needs no more
 * (its interior entries still name some descriptor of the segment). */
/* Which slices may hold resident memory is kept per slice (HAK_SLICE_*): a
 * freed page marks its slices dirty, a purge marks them purged, and a split
 * counts what it takes, so a span merged with never-touched neighbours is
 * not counted whole. */
static void slices_mark(hak_page_t *first, size_t n, uint8_t state) {
  for (size_t i = 0; i < n; i++) first[i].dirty = state;
}

static size_t slices_count(const hak_page_t *first, size_t n, uint8_t state) {
  size_t count = 0;
  for (size_t i = 0; i < n; i++) count += first[i].dirty == state;
  return count;
}

/* The slices in state `from` now in state `to`: how many. */
static size_t slices_turn(hak_page_t *first, size_t n, uint8_t from, uint8_t to) {
  size_t turned = 0;
  for (size_t i = 0; i < n; i++)
    if (first[i].dirty == from) {
      first[i].dirty = to;
      turned++;
    }
  return turned;
}

/* A dirty free span will be due for its purge at `at`. */
static void arena_note_due(hak_arena_t *a, uint64_t at) {
  uint64_t due = atomic_load_explicit(&a->next_purge, memory_order_relaxed);
  if (hak_option(HAK_OPT_PURGE_DELAY) >= 0 && (due == 0 || at < due)) {
    atomic_store_explicit(&a->next_purge, at, memory_order_relaxed);
    hak_note_pending_work(at);
  }
}

static void span_insert(hak_arena_t *a, hak_page_t *span, size_t n, size_t dirty, uint64_t purge_at) {
  span->span_kind = HAK_SPAN_FREE;
  span->slice_count = (uint16_t)n;
  span->dirty_slices = (uint16_t)dirty;
  span->purge_at = purge_at;
  span->block_size = 0;
  hak_segment_t *seg = hak_segment_of(span);
  seg->slices[slice_index(span)].page = seg->slices[slice_index(span) + n - 1].page = span;
  size_t b = span_bin(n);
  span->prev = NULL;
  span->next = a->spans[b];
  if (span->next) span->next->prev = span;
  a->spans[b] = span;
  if (dirty > 0 && purge_at != HAK_PURGE_KEPT) arena_note_due(a, purge_at);
}

static void span_remove(hak_arena_t *a, hak_page_t *span) {
  size_t b = span_bin(span->slice_count);
  if (span->prev) span->prev->next = span->next; else a->spans[b] = span->next;
  if (span->next) span->next->prev = span->prev;
  span->next = span->prev = NULL;
}

static void segment_release(hak_arena_t *a, hak_segment_t *seg);

/* ------------------------------------------------------------ huge-page stretches */

/* A segment is 16 stretches of 2 MiB, each the size and alignment of a
 * transparent huge page (docs/design.md §7b). Segments are mapped advised
 * MADV_NOHUGEPAGE. Once the program has had HAK_HUGE_STRETCH_FROM
 * committed, a page that is the first to take slices of a stretch never
 * touched before advises the stretch MADV_HUGEPAGE (unless it is sparse: a
 * heap's first page of its class, or a page of medium blocks while the
 * program is not seen to use those densely, heap.c; the stretch then stays
 * plain): its first touch then
 * faults 2 MiB in at once instead of 512 times 4 KiB, and its pages take
 * one TLB entry. A smaller program keeps 4 KiB pages and the resident set
 * that follows what it touches. The header's stretch is touched at once:
 * never advised. (A stretch touched before keeps a page table, and its
 * faults map 4 KiB whatever the advice.)
 * The whole stretch is resident from that first touch, so its free slices
 * are counted dirty at once, due for their purge as any freed memory. But
 * purging part of a huge page splits it, and the part then comes back 4 KiB
 * at a time. So a free span that covers an advised stretch in part is kept
 * resident (purge_at HAK_PURGE_KEPT) while a quarter or more of the stretch
 * is in use, and judged again when it changes (a neighbour freed into it).
 * Below a quarter, or when a purge is forced (malloc_trim), the stretch
 * loses its advice (khugepaged would otherwise refill it) and is purged as
 * any other; its other kept spans are due at once. A stretch wholly free is
 * purged whole: its huge page goes, its advice stays. Its page table went
 * with the huge page, so the next span to take slices of it alone faults 2
 * MiB in again, and its free parts count as resident as at the first
 * advice (a stretch that kept a page table, split before, faults 4 KiB:
 * those marks are then pessimistic, costing calloc a clear and a purge a
 * call). A large block that
 * takes a stretch whole decides for itself (hak_large_alloc), so the
 * stretch loses its advice. No stretch is advised in the secure variant
 * (a page's guard page splits its stretch's mapping), with a purge delay
 * of 0, where THP is "never", or beyond stretch_budget. */
#define HAK_HUGE_STRETCH_FROM ((int64_t)32 << 20)

_Atomic(int64_t) hak_stat_huge_stretches;

/* Stretches that may be advised at once: each one alone among plain ones
 * is two more kernel mappings, and a process may have vm.max_map_count. */
static int64_t stretch_budget;

static void stretches_init(void) {
  if (HAKMEM_SECURE || !hak_option(HAK_OPT_HUGE_PAGES) || hak_option(HAK_OPT_PURGE_DELAY) == 0 || !hak_os_thp_enabled())
    return;
  size_t limit = hak_os_map_limit();
  stretch_budget = (int64_t)(limit != 0 ? limit : 65530) / 8;
}

/* Advise stretch k for huge pages or not. Its bit follows the advice the
 * kernel took; a refused advice leaves it as it was. */
static bool stretch_advise(hak_segment_t *seg, size_t k, bool on) {
  if (!hak_os_huge_pages((uint8_t *)seg + k * HAK_THP_SIZE, HAK_THP_SIZE, on)) return false;
  if (on) seg->huge_stretches |= (uint16_t)(1u << k);
  else seg->huge_stretches &= (uint16_t)~(1u << k);
  atomic_fetch_add_explicit(&hak_stat_huge_stretches, on ? 1 : -1, memory_order_relaxed);
  return true;
}

/* Slices [from, to) of free span `span` may be resident now: marked dirty,
 * and the span due for its purge. */
static void span_mark_resident(hak_arena_t *a, hak_page_t *span, size_t from, size_t to, uint64_t now) {
  hak_page_t *first = &hak_segment_of(span)->pages[from];
  size_t marked = slices_turn(first, to - from, HAK_SLICE_FRESH, HAK_SLICE_DIRTY) +
                  slices_turn(first, to - from, HAK_SLICE_PURGED, HAK_SLICE_DIRTY);
  if (marked == 0) return;
  uint64_t due = hak_purge_deadline(&a->clock, now);
  if (span->dirty_slices == 0 || span->purge_at > due) span->purge_at = due;
  span->dirty_slices = (uint16_t)(span->dirty_slices + marked);
  arena_note_due(a, span->purge_at);
}

/* Stretch k was just advised by a span that took [first, first + n) and is
 * alone in it: the free spans before and after it in the stretch will be
 * resident with its first touch. */
static void stretch_free_parts_resident(hak_arena_t *a, hak_segment_t *seg, size_t k, size_t first, size_t n,
                                        uint64_t now) {
  size_t lo = k * HAK_STRETCH_SLICES, hi = lo + HAK_STRETCH_SLICES;
  if (first > lo) span_mark_resident(a, seg->slices[first - 1].page, lo, first, now);
  if (first + n < hi) span_mark_resident(a, &seg->pages[first + n], first + n, hi, now);
}

/* How many of slices [first, first + n) lie in stretch k. */
static size_t stretch_share(size_t k, size_t first, size_t n) {
  size_t lo = k * HAK_STRETCH_SLICES, hi = lo + HAK_STRETCH_SLICES;
  return (first + n < hi ? first + n : hi) - (first > lo ? first : lo);
}

/* Slices [first, first + n) were taken for a span of `kind`, `advisable`
 * if a page that may begin a huge-page stretch (not sparse, and some of its
 * slices held no memory): count them in their stretches, and advise or
 * un-advise those stretches (above). (A span in use keeps the marks its
 * slices had when it was taken.) */
static void stretches_take(hak_arena_t *a, hak_segment_t *seg, size_t first, size_t n, uint8_t kind, bool advisable) {
  bool advise = kind == HAK_SPAN_PAGE && advisable &&
                atomic_load_explicit(&hak_stat_huge_stretches, memory_order_relaxed) < stretch_budget &&
                atomic_load_explicit(&hak_stat_committed_peak, memory_order_relaxed) >= HAK_HUGE_STRETCH_FROM;
  for (size_t k = first / HAK_STRETCH_SLICES; k <= (first + n - 1) / HAK_STRETCH_SLICES; k++) {
    size_t ours = stretch_share(k, first, n);
    seg->stretch_used[k] = (uint8_t)(seg->stretch_used[k] + ours);
    if (kind == HAK_SPAN_LARGE && ours == HAK_STRETCH_SLICES && hak_stretch_is_huge(seg, k))
      stretch_advise(seg, k, false);
    else if (advise && k != 0 && !hak_stretch_is_huge(seg, k) && seg->stretch_used[k] == ours &&
             slices_count(&seg->pages[k * HAK_STRETCH_SLICES], HAK_STRETCH_SLICES, HAK_SLICE_FRESH) == HAK_STRETCH_SLICES &&
             stretch_advise(seg, k, true))
      stretch_free_parts_resident(a, seg, k, first, n, hak_clock_ms());
    else if (hak_stretch_is_huge(seg, k) && seg->stretch_used[k] == ours &&
             slices_count(&seg->pages[k * HAK_STRETCH_SLICES], HAK_STRETCH_SLICES, HAK_SLICE_DIRTY) == 0)
      stretch_free_parts_resident(a, seg, k, first, n, hak_clock_ms());   /* purged whole: 2 MiB at its first touch */
  }
}

static void stretches_give(hak_segment_t *seg, size_t first, size_t n) {
  for (size_t k = first / HAK_STRETCH_SLICES; k <= (first + n - 1) / HAK_STRETCH_SLICES; k++)
    seg->stretch_used[k] = (uint8_t)(seg->stretch_used[k] - stretch_share(k, first, n));
}

/* Stretch k loses its advice; the free spans kept for it are due now. */
static void stretch_demote(hak_arena_t *a, hak_segment_t *seg, size_t k, uint64_t now) {
  stretch_advise(seg, k, false);   /* (refused: judged again at the next purge there) */
  size_t lo = k * HAK_STRETCH_SLICES, hi = lo + HAK_STRETCH_SLICES;
  for (size_t i = HAK_META_SLICES; i < hi; i += seg->pages[i].slice_count) {
    hak_page_t *s = &seg->pages[i];
    if (i + s->slice_count > lo && s->span_kind == HAK_SPAN_FREE && s->purge_at == HAK_PURGE_KEPT) {
      s->purge_at = now;
      arena_note_due(a, now);
    }
  }
}

/* Whether a purge of slices [lo, hi) leaves out stretch k: only an advised
 * stretch that the range covers in part may be left out, while a quarter
 * of it is in use and `keep_dense`; else such a stretch is demoted
 * (*demoted set). */
static bool stretch_keeps(hak_arena_t *a, hak_segment_t *seg, size_t k, size_t lo, size_t hi, bool keep_dense,
                          uint64_t now, bool *demoted) {
  if (!hak_stretch_is_huge(seg, k) || (lo <= k * HAK_STRETCH_SLICES && (k + 1) * HAK_STRETCH_SLICES <= hi)) return false;
  if (keep_dense && seg->stretch_used[k] * 4 >= HAK_STRETCH_SLICES) return true;
  stretch_demote(a, seg, k, now);
  *demoted = true;
  return false;
}

/* ------------------------------------------------------------ purging */

/* Purge a free span, but for its parts in dense huge-page stretches if
 * `keep_dense` (above). If the OS refuses, its slices stay dirty (so calloc
 * still clears what it takes from them) and it is tried again later.
 * Returns whether a stretch lost its advice (other spans may be due now). */
static bool span_purge(hak_arena_t *a, hak_page_t *span, uint64_t now, bool keep_dense) {
  hak_segment_t *seg = hak_segment_of(span);
  size_t first = slice_index(span), lo = first, hi = first + span->slice_count;
  bool demoted = false;
  if (seg->huge_stretches != 0) {
    size_t k_lo = lo / HAK_STRETCH_SLICES, k_hi = (hi - 1) / HAK_STRETCH_SLICES;
    bool keep_lo = stretch_keeps(a, seg, k_lo, lo, hi, keep_dense, now, &demoted);
    bool keep_hi = k_hi != k_lo && stretch_keeps(a, seg, k_hi, lo, hi, keep_dense, now, &demoted);
    if (keep_lo) lo = k_lo == k_hi ? hi : (k_lo + 1) * HAK_STRETCH_SLICES;
    if (keep_hi) hi = k_hi * HAK_STRETCH_SLICES;
  }
  if (lo < hi) {
    if (hak_os_purge((uint8_t *)seg + lo * HAK_SLICE_SIZE, (hi - lo) * HAK_SLICE_SIZE) == HAK_PURGE_FAILED) {
      span->purge_at = now + HAK_PURGE_RETRY;
      return demoted;
    }
    /* (fresh slices stay fresh: never touched, no page table) */
    size_t purged = slices_turn(&seg->pages[lo], hi - lo, HAK_SLICE_DIRTY, HAK_SLICE_PURGED);
    atomic_fetch_add_explicit(&hak_stat_purged, (int64_t)(purged * HAK_SLICE_SIZE), memory_order_relaxed);
    a->clock.purged_at = now;
  }
  span->dirty_slices = (uint16_t)slices_count(span, span->slice_count, HAK_SLICE_DIRTY);
  if (span->dirty_slices != 0) span->purge_at = HAK_PURGE_KEPT;
  return demoted;
}

/* One pass of arena_purge; *again if a stretch lost its advice (spans
 * kept for it are due now, maybe in bins already passed). */
static uint64_t arena_purge_pass(hak_arena_t *a, uint64_t now, bool force, bool *again) {
  uint64_t next = 0;
  for (size_t b = 0; b < HAK_SPAN_BINS; b++) {
    for (hak_page_t *s = a->spans[b], *after; s != NULL; s = after) {
      after = s->next;
      if (s->dirty_slices == 0) continue;
      if (force || s->purge_at <= now) {
        /* A segment gone empty beyond the ones kept is unmapped now, when
         * its memory is due back, not as it empties: large blocks that
         * come and go would otherwise map and fault in a fresh segment
         * each time. */
        hak_segment_t *seg = hak_segment_of(s);
        if (seg->used_slices == 0 && a->empty_segments > HAK_EMPTY_SEGMENTS_KEPT) {
          segment_release(a, seg);
          continue;
        }
        *again |= span_purge(a, s, now, !force);
      }
      if (s->dirty_slices != 0 && s->purge_at != HAK_PURGE_KEPT) next = hak_earliest(next, s->purge_at);
    }
  }
  return next;
}

/* Purge the dirty free spans whose delay has run out (all of them if
 * `force`). Caller holds the arena lock. Returns the next purge_at, or 0. */
static uint64_t arena_purge(hak_arena_t *a, uint64_t now, bool force) {
  uint64_t next;
  for (bool again = true; again;) {
    again = false;
    next = arena_purge_pass(a, now, force, &again);
  }
  atomic_store_explicit(&a->next_purge, next, memory_order_relaxed);
  return next;
}

/* Purge what is due in every arena (a span may be freed into another
 * thread's arena, whose owner has gone quiet). `wait`: take each arena's
 * lock even if it is busy (the purger), else skip a busy one. Returns the
 * earliest purge still pending, or 0. */
uint64_t hak_arenas_purge_due(uint64_t now, bool wait) {
  uint64_t next = 0;
  for (unsigned i = 0; i < arena_count; i++) next = hak_earliest(next, hak_arena_purge_due(&arenas[i], now, wait));
  return next;
}

/* The same for one arena. */
uint64_t hak_arena_purge_due(hak_arena_t *a, uint64_t now, bool wait) {
  uint64_t due = atomic_load_explicit(&a->next_purge, memory_order_relaxed);
  if (due != 0 && now >= due && hak_lock_or_try(&a->lock, wait)) {
    due = arena_purge(a, now, false);
    hak_unlock(&a->lock);
  }
  return due;
}

/* Call fn on every span (free, page or meta) of every arena's segments,
 * each arena locked in turn. Page fields are read while their owners may
 * be changing them: the figures are a snapshot, for statistics. */
void hak_arenas_visit_spans(hak_span_visit_fn *fn, void *arg) {
  for (unsigned i = 0; i < arena_count; i++) {
    hak_lock(&arenas[i].lock);
    for (hak_segment_t *seg = arenas[i].segments; seg != NULL; seg = seg->next)
      for (size_t s = 0; s < HAK_SLICES; s += seg->pages[s].slice_count) fn(&seg->pages[s], arg);
    hak_unlock(&arenas[i].lock);
  }
}

/* Purge every free span of an arena now (what fails stays dirty), and
 * unmap its empty segments beyond the ones kept. */
void hak_arena_purge_all(hak_arena_t *a) {
  hak_lock(&a->lock);
  arena_purge(a, hak_clock_ms(), true);
  hak_unlock(&a->lock);
}

/* Every arena's (malloc_trim). */
void hak_arenas_purge_all(void) {
  for (unsigned i = 0; i < arena_count; i++) hak_arena_purge_all(&arenas[i]);
}

/* ------------------------------------------------------------ segments */

void hak_segment_init_header(hak_segment_t *seg, size_t size, hak_arena_t *a) {
  seg->size = size;
  seg->arena = a;
}

static hak_segment_t *segment_new(hak_arena_t *a) {
  hak_segment_t *seg = hak_os_alloc_aligned(HAK_SEGMENT_SIZE, HAK_SEGMENT_SIZE);
  if (seg == NULL) return NULL;
  /* Its pages and large blocks are purged in slices of 64 KiB: no huge
   * pages (huge blocks, in segments of their own, keep them). */
  hak_os_no_huge_pages(seg, HAK_SEGMENT_SIZE);
  hak_segment_init_header(seg, HAK_SEGMENT_SIZE, a);
#if HAKMEM_SECURE
  hak_secure_segment_init(seg);   /* guard page between metadata and data */
#endif
  seg->pages[0].span_kind = HAK_SPAN_META;
  seg->pages[0].slice_count = HAK_META_SLICES;
  for (size_t i = 0; i < HAK_SLICES; i++)
    seg->slices[i].page = &seg->pages[i < HAK_META_SLICES ? 0 : HAK_META_SLICES];
  seg->next = a->segments;
  seg->prev = NULL;
  if (seg->next) seg->next->prev = seg;
  a->segments = seg;
  a->segment_count++;
  a->empty_segments++;
  span_insert(a, &seg->pages[HAK_META_SLICES], HAK_SLICES - HAK_META_SLICES, 0, 0);
  atomic_fetch_add_explicit(&hak_stat_segments, 1, memory_order_relaxed);
  hak_stat_commit((int64_t)HAK_META_SIZE);
  hak_segment_map_set(seg, true);
  return seg;
}

static void segment_release(hak_arena_t *a, hak_segment_t *seg) {
  hak_page_t *span = &seg->pages[HAK_META_SLICES];
  span_remove(a, span);
  if (seg->prev) seg->prev->next = seg->next; else a->segments = seg->next;
  if (seg->next) seg->next->prev = seg->prev;
  a->segment_count--;
  a->empty_segments--;
  hak_segment_map_set(seg, false);
  atomic_fetch_sub_explicit(&hak_stat_segments, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&hak_stat_segments_released, 1, memory_order_relaxed);
  hak_stat_commit(-(int64_t)HAK_META_SIZE);
  atomic_fetch_sub_explicit(&hak_stat_huge_stretches, __builtin_popcount(seg->huge_stretches), memory_order_relaxed);
#if HAKMEM_SECURE
  hak_secure_segment_release(seg);   /* its page guards go with it */
#endif
  hak_os_free(seg, HAK_SEGMENT_SIZE);
}

/* ------------------------------------------------------------ spans */

/* The slices of free span s before the first run of n slices in it that
 * starts on a multiple of `align` slices (a power of two; 1: none), or
 * SIZE_MAX if none fits in it. (Segments are aligned beyond any `align`.) */
static size_t span_align_skip(const hak_page_t *s, size_t n, size_t align) {
  size_t first = slice_index(s), start = (first + align - 1) & ~(align - 1);
  return start - first + n <= s->slice_count ? start - first : SIZE_MAX;
}

/* A free span of at least n slices: the smallest-binned one whose first n
 * slices are all dirty if there is one (they are resident already: reusing
 * them costs no page fault, and leaves purged memory purged), else the first
 * that fits. Taking a purged span while dirty ones wait for their delay
 * made producer/consumer rounds hold a growing heap of dirty spans. A
 * `sparse` page takes a span not all dirty in a huge-page stretch only if
 * no other fits: its first touch would make 2 MiB resident. */
static hak_page_t *arena_find_span(hak_arena_t *a, size_t n, size_t align, bool sparse) {
  hak_page_t *fit = NULL, *huge_fit = NULL;
  for (size_t b = span_bin(n); b < HAK_SPAN_BINS; b++)
    for (hak_page_t *s = a->spans[b]; s != NULL; s = s->next) {
      if (s->slice_count < n) continue;
      if (align > 1) {   /* (an aligned large block: the first that holds one) */
        if (span_align_skip(s, n, align) != SIZE_MAX) return s;
        continue;
      }
      if (s->dirty_slices >= n && slices_count(s, n, HAK_SLICE_DIRTY) == n) return s;
      if (sparse && hak_slices_in_huge_stretch(hak_segment_of(s), slice_index(s), n)) {
        if (huge_fit == NULL) huge_fit = s;
      } else if (fit == NULL) {
        fit = s;
      }
    }
  return fit != NULL ? fit : huge_fit;
}

/* A span from a new segment of the arena (locked). If the OS maps none
 * (address space or commit limit), once more after hakmem gave back what
 * it keeps cached (hak_memory_short; the lock let go meanwhile, so a span
 * freed then is taken too). */
static hak_page_t *arena_grow(hak_arena_t *a, size_t slices, size_t align, bool sparse) {
  int saved = errno;
  if (segment_new(a) != NULL) return arena_find_span(a, slices, align, sparse);
  hak_unlock(&a->lock);
  hak_memory_short();
  hak_lock(&a->lock);
  hak_page_t *span = arena_find_span(a, slices, align, sparse);
  if (span == NULL && segment_new(a) != NULL) span = arena_find_span(a, slices, align, sparse);
  if (span != NULL) errno = saved;   /* (the first refusal set it) */
  return span;
}

/* Every arena's empty segments, the kept ones too, unmapped
 * (hak_memory_short). */
void hak_arenas_release_empty(void) {
  for (unsigned i = 0; i < arena_count; i++) {
    hak_arena_t *a = &arenas[i];
    hak_lock(&a->lock);
    for (hak_segment_t *seg = a->segments, *next; seg != NULL; seg = next) {
      next = seg->next;
      if (seg->used_slices == 0) segment_release(a, seg);
    }
    hak_unlock(&a->lock);
  }
}

/* Take a span of `slices` slices for a page or a large block (`kind`),
 * starting on a multiple of `align` slices (a power of two; 1: anywhere;
 * at most HAK_SLICES / 2). Returns its descriptor, with slice_count and
 * span_kind set and every slice mapped to it, or NULL. `sparse`: a page
 * likely to stay partly used (a heap's first of its class), which advises
 * no huge-page stretch and keeps out of those not resident where it can
 * (arena_find_span).
 * `resident` (may be NULL): whether any of its memory may be resident
 * already: it held contents since its last purge, or was purged with
 * MADV_FREE, or (a page) lies in a huge-page stretch, where a first touch
 * maps 2 MiB; else it is fresh or purged to zero, and becomes resident
 * only as it is touched. (A large block un-advises the stretches it takes
 * whole and decides for itself, hak_large_alloc: one that takes part of
 * an advised stretch is judged as before it came to be said so.) In the
 * secure variant a page's span ends in a guard page, possibly one an
 * earlier page left, and a large block's holds none (secure.c). */
hak_page_t *hak_span_alloc(hak_arena_t *a, size_t slices, size_t align, uint8_t kind, bool sparse,
                           bool *resident) {
  hak_assert(align > 0 && (align & (align - 1)) == 0 && align <= HAK_SLICES / 2);
  hak_lock(&a->lock);
  hak_page_t *span = arena_find_span(a, slices, align, sparse);
  if (span == NULL) span = arena_grow(a, slices, align, sparse);
  if (span == NULL) { hak_unlock(&a->lock); errno = ENOMEM; return NULL; }

  span_remove(a, span);
  size_t have = span->slice_count, free_dirty = span->dirty_slices;
  uint64_t purge_at = span->purge_at;
  /* The slices before an aligned start stay free; so do those before a
   * page placed to end on a slice that has a guard already (the secure
   * variant, secure.c). */
  size_t skip = span_align_skip(span, slices, align);
#if HAKMEM_SECURE
  if (kind == HAK_SPAN_PAGE) skip = hak_secure_page_offset(span, slices, have);
#endif
  if (skip > 0) {
    size_t skipped_dirty = slices_count(span, skip, HAK_SLICE_DIRTY);
    span_insert(a, span, skip, skipped_dirty, purge_at);
    span += skip;
    have -= skip;
    free_dirty -= skipped_dirty;
  }
  size_t taken_dirty = slices_count(span, slices, HAK_SLICE_DIRTY);
  if (have > slices) span_insert(a, span + slices, have - slices, free_dirty - taken_dirty, purge_at);
  /* Purged memory taken back: maybe the purge came too early (purge.c). */
  if (slices_count(span, slices, HAK_SLICE_PURGED) > 0)
    hak_purge_clock_refault(&a->clock, hak_clock_ms());
  hak_segment_t *seg = hak_segment_of(span);
  if (seg->used_slices == 0) a->empty_segments--;
  seg->used_slices += (uint32_t)slices;
  stretches_take(a, seg, slice_index(span), slices, kind, !sparse && taken_dirty < slices);
  if (resident != NULL)
    *resident = taken_dirty > 0 || hak_option(HAK_OPT_PURGE_MODE) == HAK_PURGE_FREE ||
                (kind == HAK_SPAN_PAGE && hak_slices_in_huge_stretch(seg, slice_index(span), slices));
  for (size_t i = 0, first = slice_index(span); i < slices; i++) seg->slices[first + i].page = span;
  span->slice_count = (uint16_t)slices;
  span->span_kind = kind;
  hak_assert(arena_is_valid(a));
  hak_unlock(&a->lock);
  hak_stat_commit((int64_t)(slices * HAK_SLICE_SIZE));
#if HAKMEM_SECURE
  hak_secure_span_taken(span, slices, kind);   /* a page's guard at its end, no other (the span is ours) */
#endif
  hak_purger_consider_start();   /* allocation side, no lock held: see purge.c */
  return span;
}

/* Under the arena's lock: the n slices of `span`, live until now, join
 * its free spans, merged with free neighbours. A segment left fully free
 * is kept (a few per arena) or unmapped. */
static void span_give_back(hak_arena_t *a, hak_page_t *span, size_t n) {
  hak_segment_t *seg = hak_segment_of(span);
  long delay = hak_option(HAK_OPT_PURGE_DELAY);
  uint64_t now = hak_clock_ms();
  hak_stat_commit(-(int64_t)(n * HAK_SLICE_SIZE));
  /* Under the lock: a span marked free is one a neighbour may merge with.
   * Marked even if merged away below, so that a second free is reported. */
  span->span_kind = HAK_SPAN_FREE;
  seg->used_slices -= (uint32_t)n;
  stretches_give(seg, slice_index(span), n);
  slices_mark(span, n, HAK_SLICE_DIRTY);   /* the page was used: its slices may be resident */
  size_t dirty = n;
  hak_page_t *end = span + n;
  if (end < seg->pages + HAK_SLICES && end->span_kind == HAK_SPAN_FREE) {
    span_remove(a, end);
    n += end->slice_count;
    dirty += end->dirty_slices;
  }
  hak_page_t *before = seg->slices[slice_index(span) - 1].page;
  if (before->span_kind == HAK_SPAN_FREE) {
    span_remove(a, before);
    n += before->slice_count;
    dirty += before->dirty_slices;
    span = before;
  }
  span_insert(a, span, n, dirty, hak_purge_deadline(&a->clock, now));

  /* A segment beyond the ones kept goes when its memory is due back (see
   * arena_purge); at once if purges are immediate or never happen. */
  if (seg->used_slices == 0 && ++a->empty_segments > HAK_EMPTY_SEGMENTS_KEPT && delay <= 0) segment_release(a, seg);
  else if (delay == 0) span_purge(a, span, now, false);
}

/* Return a span to its segment's arena, if it is still of `kind`. False if
 * not: it is free already (span_give_back marks a span free even if it
 * merges away), or taken since for something else. (A large block's free
 * checks more: hak_large_free.) */
bool hak_span_free(hak_page_t *span, uint8_t kind) {
  hak_arena_t *a = hak_segment_of(span)->arena;
  hak_lock(&a->lock);
  bool was_used = span->span_kind == kind;
  if (was_used) span_give_back(a, span, span->slice_count);
  hak_assert(arena_is_valid(a));
  hak_unlock(&a->lock);
  return was_used;
}

/* ------------------------------------------------------------ large blocks */

/* A block beyond the size classes (up to HAK_LARGE_MAX) is a span of its
 * own, owned by no thread: freed, it coalesces with its neighbours and is
 * reused for any size, keeps its memory for the purge delay, and costs no
 * system call. */
_Atomic(int64_t) hak_stat_large_count, hak_stat_large_bytes;


/* Whether the program uses its big blocks densely (writes most of each
 * page of them) decides what would waste memory otherwise:
 * - calloc of a large block that is not resident (fresh, or purged): the
 *   program typically reads a page of it before writing it, which faults
 *   twice (the read maps the zero page, the write copies it); bigchurn
 *   spent 2x tcmalloc's time in those faults. Populating the block in one
 *   call faults each page once, in a batch;
 * - a large block of 2 MiB and more is advised for transparent huge pages:
 *   a fault then maps 2 MiB, not 4 KiB (large, bigchurn and realloc-huge
 *   took 64K, 90K and 34K faults; mimalloc 3 advises its whole arena so);
 * - a page of medium blocks may advise its huge-page stretch (stretches_take).
 * But a program that allocates big tables or buffers and touches little of
 *   them would then hold all of them resident (5,000 blocks of 300 KB with
 *   64 bytes written in each: 1.48 GiB, against 21 MiB under glibc, when
 *   pages of medium blocks advised their stretches unjudged). So each is
 *   done only while the program is seen to use such blocks densely: the
 *   last block handed out neither populated nor advised (and not resident
 *   before: from clean slices outside huge-page stretches) is looked at
 *   (mincore) when the next such allocation comes: mostly resident by now,
 *   or not. The last 8 of those verdicts are kept; 6 dense ones turn it
 *   on. While on, every 8th block still goes out plain, so a change of use
 *   is seen. Large blocks and medium ones (a new page's first block, which
 *   the malloc that made the page hands out) keep records of their own. */
typedef struct use_record_s {
  _Atomic(uint32_t) verdicts;            /* bit i: the i-th last verdict was "dense" */
  _Atomic(uint32_t) dense_allocs;
  _Atomic(uintptr_t) probe;              /* the last plain block's address (a slice start) | its OS pages,
                                            hidden (hak_leak_hidden; 0: none) */
} use_record_t;
static use_record_t large_use, medium_use;

#define USE_PROBE_PAGES 2048             /* OS pages judged at most (8 MiB; 2 KiB of vector on the stack) */

/* Was most of the block resident? One mincore call. The block may have
 * been freed and reused since, or unmapped (then mincore fails): a
 * verdict, never a fault. */
static void use_judge(use_record_t *u, uintptr_t probe) {
  unsigned char vec[USE_PROBE_PAGES];
  size_t pages = probe & (HAK_SLICE_SIZE - 1);
  int saved = errno;
  bool seen = mincore((void *)hak_align_down(probe, HAK_SLICE_SIZE), pages * HAK_OS_PAGE, vec) == 0;
  errno = saved;   /* (the malloc asking goes on) */
  if (!seen) return;
  size_t resident = 0;
  for (size_t i = 0; i < pages; i++) resident += vec[i] & 1;
  uint32_t dense = resident * 8 >= pages * 7;
  uint32_t v = atomic_load_explicit(&u->verdicts, memory_order_relaxed);
  while (!atomic_compare_exchange_weak_explicit(&u->verdicts, &v, ((v << 1) & 0xff) | dense,
                                                memory_order_relaxed, memory_order_relaxed)) {}
}

/* `explore`: while on, every 8th answer is "no", so that a block goes out
 * plain to be judged (where going out plain costs what the answer saves:
 * see large_zero for where it would not). */
static bool use_is_dense(use_record_t *u, bool explore) {
  uintptr_t last = atomic_exchange_explicit(&u->probe, 0, memory_order_relaxed);
  if (last != 0) use_judge(u, hak_leak_hidden(last));
  uint32_t v = atomic_load_explicit(&u->verdicts, memory_order_relaxed);
  return __builtin_popcount(v) >= 6 &&
         (!explore || atomic_fetch_add_explicit(&u->dense_allocs, 1, memory_order_relaxed) % 8 != 0);
}

/* Block p (a slice start), `bytes` long, went out plain, from memory not
 * resident before: the next allocation of its kind judges it. */
static void use_probe(use_record_t *u, const void *p, size_t bytes) {
  size_t pages = (bytes + HAK_OS_PAGE - 1) / HAK_OS_PAGE;
  atomic_store_explicit(&u->probe, hak_leak_hidden((uintptr_t)p | (pages < USE_PROBE_PAGES ? pages : USE_PROBE_PAGES)),
                        memory_order_relaxed);
}

bool hak_medium_use_is_dense(void) { return use_is_dense(&medium_use, true); }
void hak_medium_use_probe(const hak_page_t *page) { use_probe(&medium_use, hak_page_area(page), page->block_size); }

/* Whether a slice of a span being taken may hold old bytes: it held
 * contents since its last purge, or that purge was MADV_FREE's, which may
 * leave them (HAKMEM_PURGE=free). */
static bool slice_holds_old_bytes(const hak_page_t *slice, bool lazy_purges) {
  return slice->dirty == HAK_SLICE_DIRTY || (lazy_purges && slice->dirty == HAK_SLICE_PURGED);
}

/* calloc's zeroing of a new large block. Its slices that may hold old
 * bytes are cleared; the others read as zero already. While the program
 * is seen to use its large blocks densely (`dense`, -1 until asked), the
 * clean slices are populated, and the old bytes are written over (memset);
 * else the clean slices are left to fault in, and the old bytes are given
 * back (hak_os_zero) rather than written over, which made them resident
 * whole (200 tables of 8 MB, 64 bytes written in each, freed and calloc'd
 * again in rounds: 943 MiB resident by the 8th round; glibc 29). The old
 * bytes ask without exploring: given back, the memory of a program that
 * writes all of it faults twice a page (bigchurn: 10 times as many faults,
 * 2.6x the system time, at every 8th block). So a program seen to use its
 * blocks densely has their old bytes written over, as before, until a
 * block from clean memory shows otherwise. The slices' marks still tell
 * their state before the block was taken. *plain: nothing of the block is
 * resident for it now. Returns `dense`. */
static int large_zero(hak_page_t *span, uint8_t *p, size_t size, int dense, bool *plain) {
  bool lazy = hak_option(HAK_OPT_PURGE_MODE) == HAK_PURGE_FREE;
  size_t n = (size + HAK_SLICE_SIZE - 1) >> HAK_SLICE_SHIFT;
  int written_over = -1;   /* the old bytes': the verdict, unexplored; -1 until asked */
  *plain = true;
  for (size_t i = 0, j; i < n; i = j) {
    bool old_bytes = slice_holds_old_bytes(&span[i], lazy);
    for (j = i + 1; j < n && slice_holds_old_bytes(&span[j], lazy) == old_bytes; j++) {}
    size_t from = i << HAK_SLICE_SHIFT, to = j == n ? size : j << HAK_SLICE_SHIFT;
    if (old_bytes) {
      if (written_over < 0) written_over = use_is_dense(&large_use, false);
      if (written_over || !hak_os_zero(p + from, to - from)) {
        memset(p + from, 0, to - from);
        *plain = false;
      }
      continue;
    }
    if (dense < 0) dense = use_is_dense(&large_use, true);
    if (dense) {
      hak_os_populate(p + from, to - from);
      *plain = false;
    }
  }
  return dense;
}

void *hak_large_alloc(hak_heap_t *heap, size_t size, size_t align, bool zero) {
#if HAKMEM_SECURE
  /* The block ends at the OS page that ends its request, and the page after
   * it is a guard page (secure.h), inaccessible until the block is freed;
   * the rest of its last slice is unused. A block whose guard would not
   * fit an arena segment is huge. */
  size_t block = hak_align_up(size, HAK_OS_PAGE);
  size_t slices = (block + HAK_GUARD_SIZE + HAK_SLICE_SIZE - 1) >> HAK_SLICE_SHIFT;
  if (slices > hak_large_max(align) >> HAK_SLICE_SHIFT) return hak_huge_alloc(size, align, zero);
#else
  size_t slices = (size + HAK_SLICE_SIZE - 1) >> HAK_SLICE_SHIFT;
#endif
  bool resident;
  hak_page_t *span = hak_span_alloc(heap->arena, slices, hak_align_slices(align), HAK_SPAN_LARGE, false, &resident);
  if (span == NULL) return NULL;
#if HAKMEM_SECURE
  span->block_size = (uint32_t)block;
#else
  span->block_size = (uint32_t)(slices << HAK_SLICE_SHIFT);
#endif
  hak_page_used_set(span, 1);
  atomic_fetch_add_explicit(&hak_stat_large_count, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&hak_stat_large_bytes, (int64_t)span->block_size, memory_order_relaxed);
  uint8_t *p = hak_page_area(span);
  int dense = -1;   /* not asked yet */
  if (span->block_size >= HAK_THP_SIZE && hak_option(HAK_OPT_HUGE_PAGES)) dense = use_is_dense(&large_use, true);
  span->huge_pages = dense > 0 && hak_os_huge_pages(p, span->block_size, true);
  bool plain = !resident;   /* (calloc's zeroing may give its old bytes back: then it is too) */
  if (zero) dense = large_zero(span, p, size, dense, &plain);
  if (plain && dense <= 0) use_probe(&large_use, p, size);   /* not resident: its use will tell */
#if HAKMEM_SECURE
  hak_secure_guard(p + span->block_size, true);   /* after zeroing: populate stops short of it anyway */
#endif
  return p;
}

/* Whether `span` is still the large block of `usable` bytes a free or a
 * realloc found on it without the lock: another thread's free of it (a
 * double free, or a free during the realloc) may have come first, and the
 * span may even be a new block since. Under the arena lock. */
static bool large_block_is(const hak_page_t *span, size_t usable) {
  return span->span_kind == HAK_SPAN_LARGE && span->block_size == usable;
}

/* The arena of `span`, locked, if the span is still that block; else NULL
 * (not locked). */
static hak_arena_t *large_block_lock(const hak_page_t *span, size_t usable) {
  hak_arena_t *a = hak_segment_of(span)->arena;
  hak_lock(&a->lock);
  if (large_block_is(span, usable)) return a;
  hak_unlock(&a->lock);
  return NULL;
}

/* Free the large block of `usable` bytes the caller found on `span`. False,
 * and nothing done, if it is not that block any more (large_block_is); the
 * caller reports it. Its guard and advice are undone only after that check. */
bool hak_large_free(hak_page_t *span, size_t usable) {
  hak_arena_t *a = large_block_lock(span, usable);
  if (a == NULL) return false;
#if HAKMEM_SECURE
  hak_secure_guard(hak_page_area(span) + usable, false);   /* before the span may be reused or purged */
#endif
  if (span->huge_pages) hak_os_huge_pages(hak_page_area(span), usable, false);   /* (see use_record_t) */
  span_give_back(a, span, span->slice_count);
  hak_assert(arena_is_valid(a));
  hak_unlock(&a->lock);
  atomic_fetch_sub_explicit(&hak_stat_large_count, 1, memory_order_relaxed);
  atomic_fetch_sub_explicit(&hak_stat_large_bytes, (int64_t)usable, memory_order_relaxed);
  return true;
}

#if !HAKMEM_SECURE   /* (whose realloc moves a block it shrinks by a page or more: secure.c) */
/* realloc shrinking a large block of `usable` bytes to `size` in place: the
 * slices past it go back to the arena, as if freed (a block that wastes
 * less than half stays where it is, alloc.c; its tail would otherwise stay
 * resident with it). False, and nothing done, if another thread freed the
 * block meanwhile (the caller reports it). */
bool hak_large_shrink(hak_page_t *span, size_t usable, size_t size) {
  hak_arena_t *a = large_block_lock(span, usable);   /* (span fields, and a neighbour freed meanwhile looks at the tail's kind) */
  if (a == NULL) return false;
  hak_segment_t *seg = hak_segment_of(span);
  size_t keep = (size + HAK_SLICE_SIZE - 1) >> HAK_SLICE_SHIFT, n = span->slice_count - keep;
  hak_assert(keep > 0 && keep < span->slice_count);
  uint8_t *area = hak_page_area(span), *cut = area + (keep << HAK_SLICE_SHIFT), *end = cut + (n << HAK_SLICE_SHIFT);
  if (span->huge_pages) {   /* the advised stretches the block no longer holds whole: from the cut's on */
    uint8_t *from = (uint8_t *)((uintptr_t)cut & ~(uintptr_t)(HAK_THP_SIZE - 1));
    if (from < area) from = area;
    hak_os_huge_pages(from, (size_t)(end - from), false);
  }
  atomic_fetch_sub_explicit(&hak_stat_large_bytes, (int64_t)(n << HAK_SLICE_SHIFT), memory_order_relaxed);
  hak_page_t *tail = span + keep;
  for (size_t i = 0; i < n; i++) seg->slices[slice_index(tail) + i].page = tail;
  tail->slice_count = (uint16_t)n;
  span->slice_count = (uint16_t)keep;
  span->block_size = (uint32_t)(keep << HAK_SLICE_SHIFT);
  span_give_back(a, tail, n);
  hak_assert(arena_is_valid(a));
  hak_unlock(&a->lock);
  return true;
}
#endif

/* ------------------------------------------------------------ validation */

/* An arena under its lock (debug build; see the invariants of
 * hak_segment_t and hak_page_t): every segment is in the segment map; its
 * spans tile it from the header on; a live span's slices all name it, a
 * free span's first and last do, and no two free spans touch (coalesced);
 * the slices of spans other than pages hold no owner word; used_slices
 * counts the live slices, stretch_used those of each stretch, and the
 * header's stretch is never advised for huge pages (nor any in the secure
 * variant); each free span sits in the bin of its size, with its dirty
 * marks counted; the lists hold nothing else. */
static bool segment_is_valid(const hak_segment_t *seg, size_t *free_spans) {
  if (!hak_segment_is_mapped(seg) || seg->pages[0].span_kind != HAK_SPAN_META) return false;
  if ((seg->huge_stretches & 1) || (HAKMEM_SECURE && seg->huge_stretches != 0)) return false;
  size_t used = 0, stretch_used[HAK_STRETCHES] = { 0 };
  bool after_free = false;
  for (size_t i = HAK_META_SLICES; i < HAK_SLICES;) {
    const hak_page_t *span = &seg->pages[i];
    size_t n = span->slice_count;
    if (n == 0 || i + n > HAK_SLICES) return false;
    if (span->span_kind != HAK_SPAN_PAGE)   /* (a page's owner may be writing its slices' now) */
      for (size_t k = 0; k < n; k++)
        if (hak_slice_owner(&seg->slices[i + k]) != 0) return false;
    if (span->span_kind == HAK_SPAN_FREE) {
      if (after_free || seg->slices[i].page != span || seg->slices[i + n - 1].page != span) return false;
      if (span->dirty_slices != slices_count(span, n, HAK_SLICE_DIRTY)) return false;
      (*free_spans)++;
    } else {
      if (span->span_kind != HAK_SPAN_PAGE && span->span_kind != HAK_SPAN_LARGE) return false;
      for (size_t k = 0; k < n; k++) {
        if (seg->slices[i + k].page != span) return false;
        stretch_used[(i + k) / HAK_STRETCH_SLICES]++;
      }
      used += n;
    }
    after_free = span->span_kind == HAK_SPAN_FREE;
    i += n;
  }
  for (size_t k = 0; k < HAK_STRETCHES; k++)
    if (stretch_used[k] != seg->stretch_used[k]) return false;
  return used == seg->used_slices;
}

static bool arena_is_valid(hak_arena_t *a) {
  size_t free_spans = 0, listed = 0, segments = 0;
  for (const hak_segment_t *seg = a->segments; seg != NULL; seg = seg->next, segments++)
    if (seg->arena != a || !segment_is_valid(seg, &free_spans)) return false;
  for (size_t b = 0; b < HAK_SPAN_BINS; b++)
    for (const hak_page_t *span = a->spans[b]; span != NULL; span = span->next, listed++)
      if (span->span_kind != HAK_SPAN_FREE || span_bin(span->slice_count) != b) return false;
  return segments == a->segment_count && listed == free_spans;
}

/* Every arena, each under its lock (debug build: at exit, and from tests). */
bool hak_arenas_are_valid(void) {
  bool valid = true;
  for (unsigned i = 0; i < arena_count && valid; i++) {
    hak_lock(&arenas[i].lock);
    valid = arena_is_valid(&arenas[i]);
    hak_unlock(&arenas[i].lock);
  }
  return valid;
}

/* ------------------------------------------------------------ fork */

void hak_segments_fork_prepare(void) {
  for (unsigned i = 0; i < HAK_ARENAS_MAX; i++) pthread_mutex_lock(&arenas[i].lock);
}

void hak_segments_fork_parent(void) {
  for (unsigned i = 0; i < HAK_ARENAS_MAX; i++) pthread_mutex_unlock(&arenas[i].lock);
}

void hak_segments_fork_child(void) {
  for (unsigned i = 0; i < HAK_ARENAS_MAX; i++) arena_lock_init(&arenas[i]);
}
