/* Statistics and the report.
 *
 * Three sources, none of them on a fast path:
 * - process-wide atomics kept by the slow paths (segments, committed bytes,
 *   purges, the huge-block cache);
 * - per-thread call counters per size class in each heap (only when
 *   HAKMEM_STATS is on, see hak_owner_counted), merged here with those of
 *   exited threads, and process-wide page counters per size class;
 * - a walk of every arena's spans for what is there now (live blocks,
 *   pages in use, empty, abandoned).
 * The report is text, or one JSON object; mallinfo2() and malloc_stats()
 * give the same figures. */
#define _GNU_SOURCE
#include <malloc.h>
#include <string.h>
#include <unistd.h>
#include "internal.h"

uintptr_t hak_owner_counted;
hak_page_stats_t hak_page_stats[HAK_BINS];
_Atomic(int64_t) hak_stat_committed, hak_stat_committed_peak;
_Atomic(int64_t) hak_stat_segments, hak_stat_segments_released, hak_stat_purged;
_Atomic(int64_t) hak_stat_huge_bytes, hak_stat_huge_count;

void hak_stat_commit(int64_t delta) {
  int64_t now = atomic_fetch_add_explicit(&hak_stat_committed, delta, memory_order_relaxed) + delta;
  int64_t peak = atomic_load_explicit(&hak_stat_committed_peak, memory_order_relaxed);
  while (now > peak &&
         !atomic_compare_exchange_weak_explicit(&hak_stat_committed_peak, &peak, now, memory_order_relaxed, memory_order_relaxed)) {
  }
}

static int64_t stat(_Atomic(int64_t) *s) { return atomic_load_explicit(s, memory_order_relaxed); }

/* ------------------------------------------------------------ gathering */

static pthread_mutex_t report_lock = PTHREAD_MUTEX_INITIALIZER;   /* see report_begin */

/* Counts of one size class, as a snapshot adds them up. */
typedef struct bin_counts_s {
  uint64_t allocs, frees, remote_frees;
  uint64_t pages_new, pages_freed, pages_abandoned, pages_adopted;
} bin_counts_t;

/* Counters of threads that have exited, merged under heaps_lock (which
 * hak_heap_thread_done holds while it merges and unlinks the heap, and
 * take_snapshot while it reads them with the live heaps). */
static hak_bin_stats_t exited[HAK_BINS];

static void add_bins(bin_counts_t *into, const hak_bin_stats_t *from) {
  for (size_t b = 0; b < HAK_BINS; b++) {
    into[b].allocs += hak_counter_get(&from[b].allocs);
    into[b].frees += hak_counter_get(&from[b].frees);
    into[b].remote_frees += hak_counter_get(&from[b].remote_frees);
  }
}

static void take_page_events(bin_counts_t *into) {
  for (size_t b = 0; b < HAK_BINS; b++) {
    into[b].pages_new = hak_counter_get(&hak_page_stats[b].pages_new);
    into[b].pages_freed = hak_counter_get(&hak_page_stats[b].pages_freed);
    into[b].pages_abandoned = hak_counter_get(&hak_page_stats[b].pages_abandoned);
    into[b].pages_adopted = hak_counter_get(&hak_page_stats[b].pages_adopted);
  }
}

/* fork(): the report lock, outermost (lock order: report_lock, then the
 * heap locks, heap.c). */
void hak_stats_fork_prepare(void) { pthread_mutex_lock(&report_lock); }
void hak_stats_fork_parent(void) { pthread_mutex_unlock(&report_lock); }
void hak_stats_fork_child(void) { pthread_mutex_init(&report_lock, NULL); }

void hak_stats_merge_exited(hak_heap_t *heap) {
  hak_counter_t *into = (hak_counter_t *)exited;   /* both: rows of counters */
  const hak_counter_t *from = (const hak_counter_t *)heap->stats;
  for (size_t i = 0; i < HAK_BINS * (sizeof(hak_bin_stats_t) / sizeof(hak_counter_t)); i++)
    atomic_store_explicit(&into[i], hak_counter_get(&into[i]) + hak_counter_get(&from[i]), memory_order_relaxed);
}

/* What the span walk sees now, per size class. */
typedef struct census_s {
  uint64_t live_blocks, pages_in_use, pages_empty, pages_abandoned_now;
} census_t;

typedef struct snapshot_s {
  bin_counts_t counts[HAK_BINS];
  census_t census[HAK_BINS];
  uint64_t live_bytes, free_spans, free_span_bytes, dirty_span_bytes;   /* live: in pages */
  size_t heaps;                                                          /* live heaps */
} snapshot_t;

/* Under heaps_lock: heap NULL stands for the threads that have exited. */
static void count_heap(hak_heap_t *heap, void *arg) {
  snapshot_t *s = arg;
  add_bins(s->counts, heap != NULL ? heap->stats : exited);
  if (heap != NULL) s->heaps++;
}

/* Under the span's arena lock. A page's owner changes `used` meanwhile, and
 * `bin` when it (re)initialises the page: both are read relaxed (see
 * hak_page_t), so the figures are a snapshot; a page being set up for
 * its first class may show bin 0 and is skipped. */
static void census_span(const hak_page_t *span, void *arg) {
  snapshot_t *s = arg;
  size_t bytes = (size_t)span->slice_count * HAK_SLICE_SIZE;
  if (span->span_kind == HAK_SPAN_FREE) {
    s->free_spans++;
    s->free_span_bytes += bytes;
    s->dirty_span_bytes += (uint64_t)span->dirty_slices * HAK_SLICE_SIZE;
    return;
  }
  if (span->span_kind != HAK_SPAN_PAGE) return;
  size_t bin = atomic_load_explicit((_Atomic(uint8_t) *)&span->bin, memory_order_relaxed);
  if (bin == 0) return;
  census_t *c = &s->census[bin];
  uint16_t used = hak_page_used(span);
  c->live_blocks += used;
  s->live_bytes += (uint64_t)used * hak_bin_size(bin);
  if (used == 0) c->pages_empty++;
  else if (hak_page_owner(span) & HAK_OWNER_ABANDONED) c->pages_abandoned_now++;
  else c->pages_in_use++;
}

/* A class's live blocks from its call counters. The heaps' counters are
 * read one after another while threads go on counting, so a block
 * allocated on a heap already read and freed on one read after shows as a
 * free without its allocation: 0 then, not a wrapped count. */
static uint64_t counted_live(const bin_counts_t *c) { return c->allocs > c->frees ? c->allocs - c->frees : 0; }

static void take_snapshot(snapshot_t *s) {
  memset(s, 0, sizeof *s);
  hak_heaps_visit(count_heap, s);
  take_page_events(s->counts);
  hak_arenas_visit_spans(census_span, s);
  if (hak_owner_counted) {   /* exact, unlike pages' counts (remote frees not yet gathered) */
    s->live_bytes = 0;
    for (size_t b = 1; b < HAK_BINS; b++) s->live_bytes += counted_live(&s->counts[b]) * hak_bin_size(b);
  }
}

/* Live blocks of a class: exact from the call counters when counting (a
 * page's `used` also counts remote frees not yet gathered), else the walk. */
static uint64_t live_blocks(const snapshot_t *s, size_t bin) {
  return hak_owner_counted ? counted_live(&s->counts[bin]) : s->census[bin].live_blocks;
}

/* ------------------------------------------------------------ the report */

/* Large blocks (a span of an arena segment each, up to HAK_LARGE_MAX) and
 * huge blocks (a segment each, and giant ones: a mapping each) are counted
 * apart: huge_* never includes large blocks. Both are in the live bytes
 * (but mallinfo2's uordblks), in its hblks/hblkhd and in the size-0 class
 * row, whose call counters count both. */
typedef struct totals_s {
  int64_t segments, segments_released, huge_stretches, committed, committed_peak, purged;
  int64_t large_count, large_bytes, huge_count, huge_bytes, cache_hits, cache_misses;
  size_t cache_bytes, rss;
} totals_t;

static int64_t beyond_classes_count(const totals_t *t) { return t->large_count + t->huge_count; }
static int64_t beyond_classes_bytes(const totals_t *t) { return t->large_bytes + t->huge_bytes; }

static void take_totals(totals_t *t) {
  t->segments = stat(&hak_stat_segments);
  t->segments_released = stat(&hak_stat_segments_released);
  t->huge_stretches = stat(&hak_stat_huge_stretches);
  t->committed = stat(&hak_stat_committed);
  t->committed_peak = stat(&hak_stat_committed_peak);
  t->purged = stat(&hak_stat_purged);
  t->large_count = stat(&hak_stat_large_count);
  t->large_bytes = stat(&hak_stat_large_bytes);
  t->huge_count = stat(&hak_stat_huge_count);
  t->huge_bytes = stat(&hak_stat_huge_bytes);
  t->cache_hits = stat(&hak_stat_huge_cache_hits);
  t->cache_misses = stat(&hak_stat_huge_cache_misses);
  t->cache_bytes = hak_huge_cache_bytes();
  t->rss = hak_process_rss();
}

/* One line of the report: a size class (0: the blocks beyond the classes,
 * large and huge together, as the call counters count them), from the call
 * and page counters and the census. */
typedef struct class_row_s {
  size_t size;
  uint64_t allocs, frees, remote_frees, live;
  uint64_t pages_in_use, pages_empty, pages_abandoned_now;
  uint64_t pages_new, pages_freed, pages_abandoned, pages_adopted;
} class_row_t;

/* False if the class was never used. */
static bool class_row(const snapshot_t *s, const totals_t *t, size_t bin, class_row_t *row) {
  const bin_counts_t *c = &s->counts[bin];
  const census_t *n = &s->census[bin];
  *row = (class_row_t){
    .size = bin == 0 ? 0 : hak_bin_size(bin),
    .allocs = c->allocs, .frees = c->frees, .remote_frees = c->remote_frees,
    .live = bin == 0 ? (uint64_t)beyond_classes_count(t) : live_blocks(s, bin),
    .pages_in_use = n->pages_in_use, .pages_empty = n->pages_empty, .pages_abandoned_now = n->pages_abandoned_now,
    .pages_new = c->pages_new, .pages_freed = c->pages_freed,
    .pages_abandoned = c->pages_abandoned, .pages_adopted = c->pages_adopted,
  };
  return row->allocs || row->frees || row->live || row->pages_new || row->pages_adopted ||
         row->pages_in_use || row->pages_empty || row->pages_abandoned_now;
}

/* Reports share one snapshot (too large for the stack of whatever thread
 * asks), taken under report_lock (declared above). */
static snapshot_t report;
static totals_t report_totals;

/* Reports list the classes by size: the shared heap's own bins (past
 * HAK_CLASS_BINS) fall between the others. (report_lock) */
static uint8_t by_size[HAK_BINS];

static void sort_bins_by_size(void) {
  for (size_t bin = 0; bin < HAK_BINS; bin++) {
    size_t i = bin;
    for (; i > 0 && hak_bin_size(by_size[i - 1]) > hak_bin_size(bin); i--) by_size[i] = by_size[i - 1];
    by_size[i] = (uint8_t)bin;
  }
}

static void report_begin(void) {
  hak_lock(&report_lock);
  sort_bins_by_size();
  take_snapshot(&report);
  take_totals(&report_totals);
}

static void report_end(void) { hak_unlock(&report_lock); }

static void write_text(int fd) {
  report_begin();
  const snapshot_t *s = &report;
  const totals_t *t = &report_totals;
  hak_format_fd(fd, "hakmem statistics%s\n", hak_owner_counted ? "" : " (calls not counted: set HAKMEM_STATS=1)");
  hak_format_fd(fd, "%10s %11s %11s %11s %10s  %6s %6s %6s %6s %7s\n", "class", "allocs", "frees", "remote",
                "live", "used", "empty", "aband", "new", "adopted");
  class_row_t r;
  for (size_t i = 0; i < HAK_BINS; i++) {
    size_t b = by_size[i];
    if (!class_row(s, t, b, &r)) continue;
    char name[16];
    if (b == 0) hak_format(name, sizeof name, "large+huge");
    else hak_format(name, sizeof name, "%zu", r.size);
    hak_format_fd(fd, "%10s %11llu %11llu %11llu %10llu  %6llu %6llu %6llu %6llu %7llu\n", name,
                  (unsigned long long)r.allocs, (unsigned long long)r.frees, (unsigned long long)r.remote_frees,
                  (unsigned long long)r.live, (unsigned long long)r.pages_in_use, (unsigned long long)r.pages_empty,
                  (unsigned long long)r.pages_abandoned_now, (unsigned long long)r.pages_new,
                  (unsigned long long)r.pages_adopted);
  }
  hak_format_fd(fd, "heaps: %zu live\n", s->heaps);
  hak_format_fd(fd, "segments: %lld mapped, %lld released, %lld stretches of 2 MiB advised for huge pages; "
                "free spans %llu (%llu KiB, %llu KiB not yet purged)\n",
                (long long)t->segments, (long long)t->segments_released, (long long)t->huge_stretches,
                (unsigned long long)s->free_spans, (unsigned long long)(s->free_span_bytes >> 10),
                (unsigned long long)(s->dirty_span_bytes >> 10));
  hak_format_fd(fd, "large: %lld blocks, %lld KiB\n", (long long)t->large_count, (long long)(t->large_bytes >> 10));
  hak_format_fd(fd, "huge: %lld blocks, %lld KiB; cache %zu KiB, %lld hits, %lld misses\n", (long long)t->huge_count,
                (long long)(t->huge_bytes >> 10), t->cache_bytes >> 10, (long long)t->cache_hits,
                (long long)t->cache_misses);
  hak_format_fd(fd, "memory: live %llu KiB, committed %lld KiB (peak %lld KiB), purged %lld KiB in all, rss %zu KiB\n",
                (unsigned long long)((s->live_bytes + (uint64_t)beyond_classes_bytes(t)) >> 10), (long long)(t->committed >> 10),
                (long long)(t->committed_peak >> 10), (long long)(t->purged >> 10), t->rss >> 10);
  report_end();
}

void hak_stats_write_json(int fd) {
  report_begin();
  const snapshot_t *s = &report;
  const totals_t *t = &report_totals;
  hak_format_fd(fd, "{\"counted\":%s,\"classes\":[", hak_owner_counted ? "true" : "false");
  const char *sep = "";
  class_row_t r;
  for (size_t i = 0; i < HAK_BINS; i++) {
    size_t b = by_size[i];
    if (!class_row(s, t, b, &r)) continue;
    hak_format_fd(fd, "%s{\"size\":%zu,\"allocs\":%llu,\"frees\":%llu,\"remote_frees\":%llu,\"live\":%llu,"
                  "\"pages_in_use\":%llu,\"pages_empty\":%llu,\"pages_abandoned_now\":%llu,\"pages_new\":%llu,"
                  "\"pages_freed\":%llu,\"pages_abandoned\":%llu,\"pages_adopted\":%llu}",
                  sep, r.size, (unsigned long long)r.allocs, (unsigned long long)r.frees,
                  (unsigned long long)r.remote_frees, (unsigned long long)r.live,
                  (unsigned long long)r.pages_in_use, (unsigned long long)r.pages_empty,
                  (unsigned long long)r.pages_abandoned_now, (unsigned long long)r.pages_new,
                  (unsigned long long)r.pages_freed, (unsigned long long)r.pages_abandoned,
                  (unsigned long long)r.pages_adopted);
    sep = ",";
  }
  hak_format_fd(fd, "],\"heaps\":%zu", s->heaps);   /* hak_format_fd writes at most 511 bytes a call */
  hak_format_fd(fd, ",\"segments\":%lld,\"segments_released\":%lld,\"huge_page_stretches\":%lld,\"free_spans\":%llu,"
                "\"free_span_bytes\":%llu,\"unpurged_bytes\":%llu,\"large_blocks\":%lld,\"large_bytes\":%lld",
                (long long)t->segments, (long long)t->segments_released, (long long)t->huge_stretches,
                (unsigned long long)s->free_spans,
                (unsigned long long)s->free_span_bytes, (unsigned long long)s->dirty_span_bytes,
                (long long)t->large_count, (long long)t->large_bytes);
  hak_format_fd(fd, ",\"huge_blocks\":%lld,\"huge_bytes\":%lld,\"huge_cache_bytes\":%zu,"
                "\"huge_cache_hits\":%lld,\"huge_cache_misses\":%lld,\"live_bytes\":%llu,\"committed\":%lld,"
                "\"committed_peak\":%lld,\"purged\":%lld,\"rss\":%zu}\n",
                (long long)t->huge_count, (long long)t->huge_bytes, t->cache_bytes, (long long)t->cache_hits,
                (long long)t->cache_misses, (unsigned long long)(s->live_bytes + (uint64_t)beyond_classes_bytes(t)),
                (long long)t->committed, (long long)t->committed_peak, (long long)t->purged, t->rss);
  report_end();
}

void hak_stats_print(void) { write_text(STDERR_FILENO); }

void hak_stats_at_exit(void) {
  long mode = hak_option(HAK_OPT_STATS);
  if (mode == HAK_STATS_TEXT) write_text(STDERR_FILENO);
  else if (mode == HAK_STATS_JSON) hak_stats_write_json(STDERR_FILENO);
}

/* ------------------------------------------------------------ glibc's views */

/* glibc's split: blocks of the size classes are its "arena" chunks, the
 * blocks beyond them (large and huge) its mmapped ones, so that a program
 * that adds uordblks and hblkhd, as glibc's documentation has it, gets
 * the bytes in use once (uordblks once counted both). */
struct mallinfo2 hak_mallinfo2(void) {
  report_begin();
  size_t beyond = (size_t)beyond_classes_bytes(&report_totals), committed = (size_t)report_totals.committed;
  size_t live = (size_t)report.live_bytes;   /* (in blocks of the size classes) */
  struct mallinfo2 mi = {
    .arena = committed > beyond ? committed - beyond : 0,   /* bytes held for blocks of the classes */
    .ordblks = (size_t)report.free_spans,            /* free chunks: free spans */
    .hblks = (size_t)beyond_classes_count(&report_totals),
    .hblkhd = beyond,
    .usmblks = (size_t)report_totals.committed_peak,
    .uordblks = live,
    .keepcost = (size_t)report.dirty_span_bytes,     /* what malloc_trim would return */
  };
  mi.fordblks = mi.arena > live ? mi.arena - live : 0;
  report_end();
  return mi;
}

/* mallinfo: the same figures in int fields (truncated, as glibc's are). */
struct mallinfo hak_mallinfo(void) {
  struct mallinfo2 m2 = hak_mallinfo2();
  struct mallinfo m = { 0 };
  m.arena = (int)m2.arena; m.ordblks = (int)m2.ordblks; m.hblks = (int)m2.hblks; m.hblkhd = (int)m2.hblkhd;
  m.usmblks = (int)m2.usmblks; m.uordblks = (int)m2.uordblks; m.fordblks = (int)m2.fordblks; m.keepcost = (int)m2.keepcost;
  return m;
}

HAK_DEFINE_EXPORTS(HAK_EXPORTS_STATS)
