/* Segments and arenas: alignment, the slice map, coalescing of free spans,
 * release of empty segments, huge blocks. Uses a private arena, so the
 * spans it sees are only its own. */
#include <string.h>
#include <sys/mman.h>
#include "hak_test.h"
#include "internal.h"

static hak_arena_t arena;

static void check_page_span(hak_page_t *span, size_t slices) {
  hak_segment_t *seg = hak_segment_of(span);
  CHECKF(((uintptr_t)seg & HAK_SEGMENT_MASK) == 0, "segment %p not aligned", (void *)seg);
  CHECKF(hak_segment_is_mapped(seg), "segment %p not in the map", (void *)seg);
  CHECKF(span->span_kind == HAK_SPAN_PAGE && span->slice_count == slices, "kind %d count %u", span->span_kind, span->slice_count);
  uint8_t *area = hak_page_area(span);
  CHECKF(area >= (uint8_t *)seg + HAK_META_SIZE && area + slices * HAK_SLICE_SIZE <= (uint8_t *)seg + HAK_SEGMENT_SIZE,
         "span outside its segment");
  for (size_t i = 0; i < slices * HAK_SLICE_SIZE; i += 4096) {
    CHECKF(hak_page_of(seg, area + i) == span, "slice map wrong at +%zu", i);
    area[i] = (uint8_t)i;   /* the memory is usable */
  }
}

static void segments_are_aligned_and_mapped(void) {
  for (size_t n = 1; n <= HAK_PAGE_MAX_SLICES; n *= 2) {
    hak_page_t *span = hak_span_alloc(&arena, n, 1, HAK_SPAN_PAGE, false, NULL);
    CHECKF(span != NULL, "span of %zu", n);
    check_page_span(span, n);
    hak_span_free(span, HAK_SPAN_PAGE);
  }
}

static void free_spans_coalesce(void) {
  hak_page_t *a = hak_span_alloc(&arena, 3, 1, HAK_SPAN_PAGE, false, NULL), *b = hak_span_alloc(&arena, 5, 1, HAK_SPAN_PAGE, false, NULL), *c = hak_span_alloc(&arena, 2, 1, HAK_SPAN_PAGE, false, NULL);
  CHECKF(hak_segment_of(a) == hak_segment_of(c), "one segment");
  CHECKF(b == a + 3 && c == b + 5, "spans are carved in order");
  CHECKF(!hak_span_free(b, HAK_SPAN_LARGE), "a page's span freed as a large block's");
  CHECKF(hak_span_free(b, HAK_SPAN_PAGE), "the span given back");
  CHECKF(!hak_span_free(b, HAK_SPAN_PAGE), "the span given back twice");
  hak_span_free(a, HAK_SPAN_PAGE);
  CHECKF(!hak_span_free(b, HAK_SPAN_PAGE), "the span given back again, merged into the one before it");
  hak_span_free(c, HAK_SPAN_PAGE);
  hak_page_t *all = hak_span_alloc(&arena, 10, 1, HAK_SPAN_PAGE, false, NULL);
  CHECKF(all == a, "the three freed spans merged back into one (got %p, want %p)", (void *)all, (void *)a);
  check_page_span(all, 10);
  hak_span_free(all, HAK_SPAN_PAGE);
}

static void empty_segments_beyond_a_few_are_released(void) {
  enum { N = HAK_EMPTY_SEGMENTS_KEPT + 2 };
  hak_page_t *whole[N];
  size_t big = HAK_SLICES - HAK_META_SLICES;   /* a whole segment each */
  for (int i = 0; i < N; i++) {
    whole[i] = hak_span_alloc(&arena, big, 1, HAK_SPAN_PAGE, false, NULL);
    CHECKF(whole[i] != NULL, "segment %d", i);
  }
  CHECKF(arena.segment_count >= N, "%zu segments", arena.segment_count);
  for (int i = 0; i < N; i++) hak_span_free(whole[i], HAK_SPAN_PAGE);
  /* Kept until their memory is due back (the purge delay), then unmapped. */
  hak_arena_purge_all(&arena);
  CHECKF(arena.empty_segments == HAK_EMPTY_SEGMENTS_KEPT && arena.segment_count == HAK_EMPTY_SEGMENTS_KEPT,
         "kept %zu of %zu", arena.empty_segments, arena.segment_count);
  int mapped = 0;
  for (int i = 0; i < N; i++) mapped += hak_segment_is_mapped(whole[i]);
  CHECKF(mapped == HAK_EMPTY_SEGMENTS_KEPT, "released segments left the map (%d mapped)", mapped);
}

/* Blocks above the size classes that fit a segment are spans of their own:
 * freed, the span coalesces and serves other sizes. */
static void large_blocks_are_spans(void) {
  uint8_t *p = hak_malloc(5u << 20);
  hak_page_t *span = hak_page_of(hak_segment_of(p), p);
  CHECKF(span->span_kind == HAK_SPAN_LARGE && p == hak_page_area(span), "kind %d", span->span_kind);
  CHECKF(((uintptr_t)p & (HAK_SLICE_SIZE - 1)) == 0 && hak_malloc_usable_size(p) >= (5u << 20), "slice aligned");
  memset(p, 0xEE, 5u << 20);
  hak_free(p);
  CHECKF(span->span_kind == HAK_SPAN_FREE, "freed span");
  uint8_t *q = hak_calloc(1, 3u << 20);   /* reuses the dirty span: must be zeroed */
  CHECKF(q == p, "the freed span is reused (got %p, freed %p)", (void *)q, (void *)p);
  for (size_t i = 0; i < (3u << 20); i++) CHECKF(q[i] == 0, "calloc byte %zu", i);
  hak_free(q);
}

/* Spans placed on an alignment of several slices (large blocks aligned
 * beyond a slice): each starts on it, the slices skipped before it stay
 * a free span, and the biggest one hak_large_max
 * allows for the alignment fits a segment. */
static void aligned_spans_start_on_their_alignment(void) {
  const size_t aligns[] = { 2, 4, 16, 32, HAK_SLICES / 2 };
  for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
    size_t a = aligns[i];
    hak_page_t *before = hak_span_alloc(&arena, 1, 1, HAK_SPAN_PAGE, false, NULL);   /* (the next free slice is unaligned) */
    hak_page_t *span = hak_span_alloc(&arena, 3, a, HAK_SPAN_LARGE, false, NULL);
    CHECKF(span != NULL && span->span_kind == HAK_SPAN_LARGE && span->slice_count == 3, "aligned span of %zu", a);
    uintptr_t area = (uintptr_t)hak_page_area(span);
    CHECKF(area % (a * HAK_SLICE_SIZE) == 0, "span at %p, not on %zu slices", (void *)area, a);
    if (hak_segment_of(span) == hak_segment_of(before) && span > before + 1)
      CHECKF(before[1].span_kind == HAK_SPAN_FREE && before + 1 + before[1].slice_count == span,
             "the %td slices skipped before the span on %zu are a free span", span - before - 1, a);
    hak_span_free(span, HAK_SPAN_LARGE);
    hak_span_free(before, HAK_SPAN_PAGE);
    size_t most = hak_large_max(a * HAK_SLICE_SIZE) / HAK_SLICE_SIZE;
    hak_page_t *biggest = hak_span_alloc(&arena, most, a, HAK_SPAN_LARGE, false, NULL);
    CHECKF(biggest != NULL && (uintptr_t)hak_page_area(biggest) % (a * HAK_SLICE_SIZE) == 0,
           "%zu slices on %zu", most, a);
    hak_span_free(biggest, HAK_SPAN_LARGE);
  }
  hak_arena_purge_all(&arena);
}

static void huge_blocks_honour_alignment(void) {
  size_t aligns[] = { 16, 4096, 65536, (size_t)1 << 21, HAK_HUGE_ALIGN_MAX };
  for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
    size_t size = HAK_LARGE_MAX + 123;
    uint8_t *p = hak_huge_alloc(size, aligns[i], false);
    CHECKF(p != NULL && ((uintptr_t)p & (aligns[i] - 1)) == 0, "align %zu: %p", aligns[i], (void *)p);
    hak_segment_t *seg = hak_segment_of(p);
    hak_page_t *page = hak_page_of(seg, p);
    CHECKF(page->span_kind == HAK_SPAN_HUGE, "huge page kind %d", page->span_kind);
    CHECKF(hak_huge_usable_size(seg, page, p) >= size, "usable %zu", hak_huge_usable_size(seg, page, p));
    memset(p, 0xA5, size);
    hak_huge_free(seg, page);
    CHECKF(!hak_segment_is_mapped(seg), "freed huge segment still mapped");
  }
}

static void os_aligned_mappings_are_aligned(void) {
  for (int i = 0; i < 64; i++) {
    size_t size = HAK_SEGMENT_SIZE + (size_t)i * HAK_OS_PAGE;
    void *p = hak_os_alloc_aligned(size, HAK_SEGMENT_SIZE);
    CHECKF(p != NULL && ((uintptr_t)p & HAK_SEGMENT_MASK) == 0, "mapping %d at %p", i, p);
    hak_os_free(p, size);
  }
}

/* realloc of a large block that grows again moves it into a mapping of its
 * own (a huge block), which grows on without copying; contents kept. (Not
 * under a tool or while counting: realloc then copies through malloc.) */
static void growing_large_blocks_become_huge(void) {
  bool plain = !hak_tracking && !hak_owner_counted;
  size_t size = 2 * HAK_MEDIUM_MAX;
  uint8_t *p = hak_malloc(size);
  CHECK(p != NULL && hak_page_of(hak_segment_of(p), p)->span_kind == HAK_SPAN_LARGE);
  for (size_t i = 0; i < size; i += 512) p[i] = (uint8_t)(i >> 9);
  for (int step = 0; step < 4; step++) {
    size_t next = size * 3 / 2;
    p = hak_realloc(p, next);
    CHECK(p != NULL);
    CHECKF(!plain || hak_page_of(hak_segment_of(p), p)->span_kind == HAK_SPAN_HUGE, "step %d: kind %d", step,
           hak_page_of(hak_segment_of(p), p)->span_kind);
    for (size_t i = 0; i < size; i += 512) CHECKF(p[i] == (uint8_t)(i >> 9), "byte %zu lost", i);
    for (size_t i = size; i < next; i += 512) p[i] = (uint8_t)(i >> 9);
    size = next;
  }
  hak_free(p);
}

/* A page's span taken back soon after its memory was purged: the purge
 * came too early for this program, and the arena's delay doubles (page
 * spans of medium classes refault as dearly as large blocks). */
static void page_span_refaults_raise_the_purge_delay(void) {
  hak_purge_clock_init(&arena.clock);
  uint64_t base = arena.clock.delay;
  if (base == 0) {
    printf("     HAKMEM_PURGE_DELAY=0: no adapting, skipped\n");
    return;
  }
  enum { SLICES = 8 };
  hak_page_t *span = hak_span_alloc(&arena, SLICES, 1, HAK_SPAN_PAGE, false, NULL);
  memset(hak_page_area(span), 1, SLICES * HAK_SLICE_SIZE);
  hak_span_free(span, HAK_SPAN_PAGE);
  hak_arena_purge_all(&arena);
  CHECKF(arena.clock.delay == base, "delay %llu before any refault", (unsigned long long)arena.clock.delay);
  hak_page_t *again = hak_span_alloc(&arena, SLICES, 1, HAK_SPAN_PAGE, false, NULL);
  CHECKF(again == span, "the purged span was taken back");
  CHECKF(arena.clock.delay == 2 * base, "delay %llu after a refault, want %llu", (unsigned long long)arena.clock.delay,
         (unsigned long long)(2 * base));
  hak_span_free(again, HAK_SPAN_PAGE);
}

/* Huge-page stretches (segment.c): once the program has had 32 MiB
 * committed, a page that is the first to take slices of a stretch never
 * touched advises it, and the rest of the stretch counts as resident; a
 * free span that covers an advised stretch in part stays resident while a
 * quarter of the stretch is in use, and the stretch loses its advice below
 * that, or when a purge is forced. A private arena of its own, so that its
 * first segment is fresh. */
static hak_arena_t thp_arena;

static bool stretch_huge(const hak_segment_t *seg, size_t k) { return seg->huge_stretches >> k & 1; }

static bool huge_stretches_testable(void) {
  if (HAKMEM_SECURE || !hak_option(HAK_OPT_HUGE_PAGES) || hak_option(HAK_OPT_PURGE_DELAY) <= 0 ||
      !hak_os_thp_enabled()) {
    printf("     huge pages off, THP \"never\", or purges never or at once: skipped\n");
    return false;
  }
  return true;
}

static void huge_page_stretches(void) {
  if (!huge_stretches_testable()) return;
  enum { SPAN = 16, FILL = 40, N = 9 };   /* spans of 1 MiB */
  hak_page_t *fill[FILL];
  for (int i = 0; i < FILL; i++) fill[i] = hak_span_alloc(&arena, SPAN, 1, HAK_SPAN_PAGE, false, NULL);
  CHECKF(atomic_load(&hak_stat_committed_peak) >= ((int64_t)32 << 20), "committed peak %lld",
         (long long)atomic_load(&hak_stat_committed_peak));
  for (int i = 0; i < FILL; i++) hak_span_free(fill[i], HAK_SPAN_PAGE);
  hak_arena_purge_all(&arena);

  /* Carved in order from the header's end: span i holds slices
   * [M + 16i, M + 16i + 16), M = HAK_META_SLICES < 16. */
  pthread_mutex_init(&thp_arena.lock, NULL);
  hak_purge_clock_init(&thp_arena.clock);
  hak_page_t *s[N];
  for (int i = 0; i < N; i++) {
    s[i] = hak_span_alloc(&thp_arena, SPAN, 1, HAK_SPAN_PAGE, false, NULL);
    memset(hak_page_area(s[i]), 1, SPAN * HAK_SLICE_SIZE);
  }
  hak_segment_t *seg = hak_segment_of(s[0]);
  size_t m = HAK_META_SLICES, st = HAK_STRETCH_SLICES;
  CHECKF(s[N - 1] == s[0] + (N - 1) * SPAN && s[0] == &seg->pages[m], "carved in order");
  /* Spans 1, 3, 5 and 7 begin stretches 1-4; stretch 5 is untouched. */
  CHECKF(!stretch_huge(seg, 0) && stretch_huge(seg, 1) && stretch_huge(seg, 2) && stretch_huge(seg, 4) &&
         !stretch_huge(seg, 5), "stretches advised: %#x", seg->huge_stretches);
  hak_page_t *tail = s[N - 1] + SPAN;   /* the free rest of the segment: resident up to stretch 4's end */
  CHECKF(tail->span_kind == HAK_SPAN_FREE && tail->dirty_slices == 5 * st - (m + N * SPAN),
         "the advised stretch's free part counts as resident (dirty %u)", tail->dirty_slices);

  /* Stretch 1 is slices [st, 2st): s[1] holds m + 2*SPAN - st of them, s[2]
   * all 16 of its own, s[3] the rest. */
  uint64_t later = UINT64_MAX - 1;
  hak_span_free(s[2], HAK_SPAN_PAGE);
  hak_arena_purge_due(&thp_arena, later, true);
  CHECKF(s[2]->span_kind == HAK_SPAN_FREE && s[2]->purge_at == HAK_PURGE_KEPT && s[2]->dirty_slices == SPAN,
         "a free span in a stretch half in use is kept resident (purge_at %llu, dirty %u)",
         (unsigned long long)s[2]->purge_at, s[2]->dirty_slices);
  CHECK(stretch_huge(seg, 1));

  hak_span_free(s[3], HAK_SPAN_PAGE);   /* merged: stretch 1 now holds only s[1]'s few slices, stretch 2 is mostly used */
  hak_arena_purge_due(&thp_arena, later, true);
  hak_page_t *merged = s[2];
  size_t in_2 = m + 4 * SPAN - 2 * st;   /* the merged span's slices in stretch 2 */
  CHECKF(merged->slice_count == 2 * SPAN, "merged span of %u slices", merged->slice_count);
  CHECKF(!stretch_huge(seg, 1) && stretch_huge(seg, 2), "stretch 1 demoted, 2 kept: %#x", seg->huge_stretches);
  CHECKF(merged->dirty_slices == in_2 && merged->purge_at == HAK_PURGE_KEPT && merged[0].dirty == HAK_SLICE_PURGED &&
         merged[2 * SPAN - 1].dirty == HAK_SLICE_DIRTY, "stretch 1's part purged, stretch 2's kept (dirty %u)",
         merged->dirty_slices);

  hak_arena_purge_all(&thp_arena);   /* forced: nothing is kept */
  CHECKF(!stretch_huge(seg, 2) && merged->dirty_slices == 0 && tail->dirty_slices == 0,
         "forced purge: %#x, dirty %u and %u", seg->huge_stretches, merged->dirty_slices, tail->dirty_slices);
  for (int i = 0; i < N; i++)
    if (i != 2 && i != 3) hak_span_free(s[i], HAK_SPAN_PAGE);
  hak_arena_purge_all(&thp_arena);
  CHECKF(seg->used_slices == 0 && seg->stretch_used[2] == 0, "all given back");
}

/* A heap's first page of a class (sparse) begins no huge-page stretch, and
 * takes a span of an advised stretch whose memory is not resident (a
 * stretch purged whole keeps its advice) only if no other span fits: its
 * first touch would fault 2 MiB in. Needs the program to have had 32 MiB
 * committed (huge_page_stretches saw to it). */
static void sparse_pages_stay_out_of_huge_stretches(void) {
  if (!huge_stretches_testable()) return;
  CHECKF(atomic_load(&hak_stat_committed_peak) >= ((int64_t)32 << 20), "committed peak %lld",
         (long long)atomic_load(&hak_stat_committed_peak));
  static hak_arena_t sa;
  pthread_mutex_init(&sa.lock, NULL);
  hak_purge_clock_init(&sa.clock);
  size_t m = HAK_META_SLICES, st = HAK_STRETCH_SLICES;
  /* Stretch 0's pages (sparse), then stretches 1, 2 and 3 taken whole. */
  hak_page_t *head = hak_span_alloc(&sa, st - m, 1, HAK_SPAN_PAGE, true, NULL);
  hak_page_t *one = hak_span_alloc(&sa, st, 1, HAK_SPAN_PAGE, true, NULL);
  hak_page_t *two = hak_span_alloc(&sa, st, 1, HAK_SPAN_PAGE, false, NULL);
  hak_page_t *three = hak_span_alloc(&sa, st, 1, HAK_SPAN_PAGE, false, NULL);
  hak_segment_t *seg = hak_segment_of(head);
  CHECKF(head == &seg->pages[m] && one == head + (st - m) && two == one + st && three == two + st, "carved in order");
  CHECKF(!stretch_huge(seg, 1) && stretch_huge(seg, 2) && stretch_huge(seg, 3),
         "the sparse page advised no stretch, the dense ones theirs: %#x", seg->huge_stretches);
  hak_span_free(two, HAK_SPAN_PAGE);   /* stretch 2 wholly free: purged whole, advice kept */
  hak_arena_purge_due(&sa, UINT64_MAX - 1, true);
  CHECKF(two->dirty_slices == 0 && two->slice_count == st && stretch_huge(seg, 2), "set up: dirty %u, %u slices, %#x",
         two->dirty_slices, two->slice_count, seg->huge_stretches);
  /* Both fit in stretch 2 (the smaller span) or in the fresh rest of the
   * segment, past stretch 3. */
  hak_page_t *sparse = hak_span_alloc(&sa, st / 2, 1, HAK_SPAN_PAGE, true, NULL);
  hak_page_t *dense = hak_span_alloc(&sa, st / 2, 1, HAK_SPAN_PAGE, false, NULL);
  CHECKF(sparse == three + st && dense == two, "sparse took %+td, dense %+td (want %+td, %+td)", sparse - head,
         dense - head, three + st - head, two - head);
  /* The stretch purged whole lost its page table with its huge page: the
   * dense page's first touch faults 2 MiB in, so the rest of the stretch
   * counts as resident (it counted as purged, kept resident for ever, even
   * past malloc_trim). */
  hak_page_t *rest = dense + st / 2;
  CHECKF(rest->span_kind == HAK_SPAN_FREE && rest->dirty_slices == st / 2,
         "the rest of the stretch counts as resident: dirty %u of %zu", rest->dirty_slices, st / 2);
  hak_span_free(sparse, HAK_SPAN_PAGE);
  hak_span_free(dense, HAK_SPAN_PAGE);
  hak_span_free(head, HAK_SPAN_PAGE);
  hak_span_free(one, HAK_SPAN_PAGE);
  hak_span_free(three, HAK_SPAN_PAGE);
  hak_arena_purge_all(&sa);
  CHECK(seg->used_slices == 0);
}

/* Whether the OS page holding p is resident. */
static bool resident(const void *p) {
  unsigned char v = 0;
  CHECK(mincore((void *)((uintptr_t)p & ~(uintptr_t)(HAK_OS_PAGE - 1)), HAK_OS_PAGE, &v) == 0);
  return v & 1;
}

/* A one-slice page of 8 KiB blocks on `span`, owned by this thread, with
 * its first block freed by "another thread" (pushed on xthread_free, as
 * free.c's free_remote does) and not yet gathered: the purger's case. */
static hak_block_t *page_with_a_held_free(hak_page_t *span) {
  hak_page_init(hak_heap_thread_init(), span, hak_bin_of(8192));
  while (span->capacity < span->reserved) hak_page_extend(span, false);
  if (hak_tracking) hak_track_open(span->free);   /* (the ASan build: as malloc and free do) */
  hak_block_t *b = hak_page_pop(span);
  if (hak_tracking) hak_track_handout(b, 8192, false);
  memset(b, 1, 8192);
  if (hak_tracking) hak_track_free(b, 8192, true), hak_track_open(b);
  b->free_tag = hak_free_tag(span);
  hak_page_free_remote(span, b);
  return b;
}

/* The purger gives back the interior of blocks freed into a page whose
 * owner has not gathered them (hak_page_purge_held), but not in an
 * advised huge-page stretch, where a purge would split the huge page
 * (the check once looked at the descriptor's address, and never fired). */
static void held_frees_in_huge_stretches_stay(void) {
  if (!huge_stretches_testable()) return;
  static hak_arena_t ha;
  pthread_mutex_init(&ha.lock, NULL);
  hak_purge_clock_init(&ha.clock);
  size_t m = HAK_META_SLICES, st = HAK_STRETCH_SLICES;
  /* Stretch 0's rest (sparse); stretch 1 begun by a dense page and filled;
   * stretch 2 begun by a sparse one (plain). */
  hak_page_t *head = hak_span_alloc(&ha, st - m, 1, HAK_SPAN_PAGE, true, NULL);
  hak_page_t *huge = hak_span_alloc(&ha, 1, 1, HAK_SPAN_PAGE, false, NULL);
  hak_page_t *rest = hak_span_alloc(&ha, st - 1, 1, HAK_SPAN_PAGE, false, NULL);
  hak_page_t *plain = hak_span_alloc(&ha, 1, 1, HAK_SPAN_PAGE, true, NULL);
  hak_segment_t *seg = hak_segment_of(head);
  CHECKF(huge == &seg->pages[st] && plain == &seg->pages[2 * st] && stretch_huge(seg, 1) && !stretch_huge(seg, 2),
         "set up: %+td, %+td, %#x", huge - seg->pages, plain - seg->pages, seg->huge_stretches);
  hak_block_t *in_huge = page_with_a_held_free(huge), *in_plain = page_with_a_held_free(plain);
  const uint8_t *interior_huge = (const uint8_t *)in_huge + 4096, *interior_plain = (const uint8_t *)in_plain + 4096;
  CHECK(resident(interior_huge) && resident(interior_plain));

  CHECKF(hak_page_purge_held(plain) == 4096 && !resident(interior_plain), "the plain page's held free purged");
  CHECKF(hak_page_purge_held(huge) == 0 && resident(interior_huge),
         "the huge stretch's page left whole");
  CHECKF(hak_xlist_count(atomic_load(&huge->xthread_free)) == 1 && hak_xlist_count(atomic_load(&plain->xthread_free)) == 1,
         "both frees still pending for their owner");

  hak_page_t *pages[] = { huge, plain };
  for (size_t i = 0; i < 2; i++) {
    hak_page_gather_frees(pages[i]);
    CHECK(hak_page_used(pages[i]) == 0);
    hak_page_free_span(pages[i]);
  }
  hak_span_free(head, HAK_SPAN_PAGE);
  hak_span_free(rest, HAK_SPAN_PAGE);
  hak_arena_purge_all(&ha);
  CHECK(seg->used_slices == 0);
}

int main(void) {
  hak_test_begin("unit_segments");
  hak_process_init();
  pthread_mutex_init(&arena.lock, NULL);
  RUN_CASE(segments_are_aligned_and_mapped);
  RUN_CASE(free_spans_coalesce);
  RUN_CASE(empty_segments_beyond_a_few_are_released);
  RUN_CASE(large_blocks_are_spans);
  RUN_CASE(aligned_spans_start_on_their_alignment);
  RUN_CASE(huge_blocks_honour_alignment);
  RUN_CASE(os_aligned_mappings_are_aligned);
  RUN_CASE(growing_large_blocks_become_huge);
  RUN_CASE(page_span_refaults_raise_the_purge_delay);
  RUN_CASE(huge_page_stretches);
  RUN_CASE(sparse_pages_stay_out_of_huge_stretches);
  RUN_CASE(held_frees_in_huge_stretches_stay);
  return 0;
}
