/* Statistics: process-wide counters kept with atomics off the fast paths,
 * per-thread page counters merged when the report is made, and the report
 * itself (text, or one JSON object). */
#include <string.h>
#include <unistd.h>
#include "internal.h"

_Atomic(int64_t) hak_stat_committed, hak_stat_committed_peak;
_Atomic(int64_t) hak_stat_segments, hak_stat_huge_bytes, hak_stat_purged;

void hak_stat_commit(int64_t delta) {
  int64_t now = atomic_fetch_add_explicit(&hak_stat_committed, delta, memory_order_relaxed) + delta;
  int64_t peak = atomic_load_explicit(&hak_stat_committed_peak, memory_order_relaxed);
  while (now > peak &&
         !atomic_compare_exchange_weak_explicit(&hak_stat_committed_peak, &peak, now, memory_order_relaxed, memory_order_relaxed)) {
  }
}

/* Counters of threads that have exited. */
static pthread_mutex_t exited_lock = PTHREAD_MUTEX_INITIALIZER;
static hak_bin_stats_t exited[HAK_BINS];

static void add_bins(hak_bin_stats_t *into, const hak_bin_stats_t *from) {
  for (size_t b = 0; b < HAK_BINS; b++) {
    into[b].alloc_pages += from[b].alloc_pages;
    into[b].free_pages += from[b].free_pages;
    into[b].reclaimed_pages += from[b].reclaimed_pages;
    into[b].abandoned_pages += from[b].abandoned_pages;
  }
}

void hak_stats_merge_exited(hak_heap_t *heap) {
  pthread_mutex_lock(&exited_lock);
  add_bins(exited, heap->stats);
  pthread_mutex_unlock(&exited_lock);
}

static void merge_live(hak_heap_t *heap, void *into) { add_bins(into, heap->stats); }

static void collect_bins(hak_bin_stats_t *bins) {
  memset(bins, 0, sizeof(hak_bin_stats_t) * HAK_BINS);
  pthread_mutex_lock(&exited_lock);
  add_bins(bins, exited);
  pthread_mutex_unlock(&exited_lock);
  hak_heaps_visit(merge_live, bins);
}

static int64_t stat(_Atomic(int64_t) *s) { return atomic_load_explicit(s, memory_order_relaxed); }

static void write_text(int fd) {
  hak_bin_stats_t bins[HAK_BINS];
  collect_bins(bins);
  hak_format_fd(fd, "hakmem stats\n%10s %12s %12s %12s %12s\n", "class", "pages new", "pages freed", "abandoned", "reclaimed");
  for (size_t b = 1; b < HAK_BINS; b++) {
    hak_bin_stats_t *s = &bins[b];
    if (s->alloc_pages == 0 && s->reclaimed_pages == 0) continue;
    hak_format_fd(fd, "%10zu %12llu %12llu %12llu %12llu\n", hak_bin_size(b),
                  (unsigned long long)s->alloc_pages, (unsigned long long)s->free_pages,
                  (unsigned long long)s->abandoned_pages, (unsigned long long)s->reclaimed_pages);
  }
  hak_format_fd(fd, "segments %lld, huge bytes %lld, committed %lld (peak %lld), purged %lld, rss %zu\n",
                (long long)stat(&hak_stat_segments), (long long)stat(&hak_stat_huge_bytes),
                (long long)stat(&hak_stat_committed), (long long)stat(&hak_stat_committed_peak),
                (long long)stat(&hak_stat_purged), hak_process_rss());
}

void hak_stats_write_json(int fd) {
  hak_bin_stats_t bins[HAK_BINS];
  collect_bins(bins);
  hak_format_fd(fd, "{\"classes\":[");
  bool first = true;
  for (size_t b = 1; b < HAK_BINS; b++) {
    hak_bin_stats_t *s = &bins[b];
    if (s->alloc_pages == 0 && s->reclaimed_pages == 0) continue;
    hak_format_fd(fd, "%s{\"size\":%zu,\"pages_new\":%llu,\"pages_freed\":%llu,\"pages_abandoned\":%llu,\"pages_reclaimed\":%llu}",
                  first ? "" : ",", hak_bin_size(b), (unsigned long long)s->alloc_pages,
                  (unsigned long long)s->free_pages, (unsigned long long)s->abandoned_pages,
                  (unsigned long long)s->reclaimed_pages);
    first = false;
  }
  hak_format_fd(fd, "],\"segments\":%lld,\"huge_bytes\":%lld,\"committed\":%lld,\"committed_peak\":%lld,\"purged\":%lld,\"rss\":%zu}\n",
                (long long)stat(&hak_stat_segments), (long long)stat(&hak_stat_huge_bytes),
                (long long)stat(&hak_stat_committed), (long long)stat(&hak_stat_committed_peak),
                (long long)stat(&hak_stat_purged), hak_process_rss());
}

void hak_stats_print(void) { write_text(STDERR_FILENO); }

void hak_stats_at_exit(void) {
  long mode = hak_option(HAK_OPT_STATS);
  if (mode == HAK_STATS_TEXT) write_text(STDERR_FILENO);
  else if (mode == HAK_STATS_JSON) hak_stats_write_json(STDERR_FILENO);
}
