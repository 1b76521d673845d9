/* Huge blocks: beyond what an arena segment holds (HAK_LARGE_MAX; large
 * blocks, up to there, are spans of their own: segment.c), and large blocks
 * that realloc grows again (alloc.c), to grow on here. A huge block
 * gets a segment of its own, so that free() finds it by masking like any
 * other block.
 *
 * Freed huge segments go to a small cache, still mapped and aligned: a
 * program that frees and reallocates big buffers then pays neither
 * mmap/munmap nor fresh page faults. The cache holds at most
 * HAKMEM_HUGE_CACHE bytes (oldest out first). While huge blocks keep being
 * freed and taken, cached memory stays resident; once the cache has seen no
 * use for HAKMEM_PURGE_DELAY, its memory is purged (mappings kept), by the
 * purger (purge.c); with a delay of 0, as it is cached.
 *
 * realloc of a huge block resizes its mapping in place when the address
 * space allows, and otherwise moves it with mremap onto a fresh aligned
 * reservation: the kernel moves page tables instead of us copying bytes.
 *
 * Blocks whose alignment exceeds what a segment can hold at an offset
 * (HAK_HUGE_ALIGN_MAX) are "giant": mapped on their own, found through a
 * short list. Rare by nature. */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include "internal.h"

_Atomic(int64_t) hak_stat_huge_cache_hits, hak_stat_huge_cache_misses;

/* The secure variant's huge block is followed by a guard page, the last
 * OS page of its mapping (secure.h), inaccessible while the block lives. */
#if HAKMEM_SECURE
#define HUGE_GUARD HAK_GUARD_SIZE
#else
#define HUGE_GUARD 0
#endif

/* Offset of the block in its segment: past the header, aligned. */
static size_t huge_offset(size_t align) {
  return hak_align_up(HAK_META_SIZE, align > HAK_OS_PAGE ? align : HAK_OS_PAGE);
}

/* The segment map marks a huge segment's whole first HAK_SEGMENT_SIZE, but
 * a small one maps less, and other mappings may lie past it: their slices
 * name this descriptor, so a pointer there is reported, not followed. */
hak_page_t hak_page_unmapped = { .span_kind = HAK_SPAN_META };

/* Point every slice entry of a huge segment (`size` bytes mapped) at its
 * block's descriptor, or at hak_page_unmapped past the mapping. */
static void huge_map_slices(hak_segment_t *seg, hak_page_t *page, size_t size) {
  size_t mapped_slices = (size + HAK_SLICE_SIZE - 1) >> HAK_SLICE_SHIFT;
  for (size_t i = 0; i < HAK_SLICES; i++) seg->slices[i].page = i < mapped_slices ? page : &hak_page_unmapped;
}

/* A huge (or giant) block of `size` mapped bytes in the counters. */
static void huge_account(size_t size) {
  atomic_fetch_add_explicit(&hak_stat_huge_bytes, (int64_t)size, memory_order_relaxed);
  atomic_fetch_add_explicit(&hak_stat_huge_count, 1, memory_order_relaxed);
  hak_stat_commit((int64_t)size);
}

/* Make `seg` (mapped, `total` bytes) describe one huge block at `offset`. */
static void *huge_setup(hak_segment_t *seg, size_t total, size_t offset) {
  hak_segment_init_header(seg, total, NULL);
  hak_page_t *page = &seg->pages[offset >> HAK_SLICE_SHIFT];
  page->span_kind = HAK_SPAN_HUGE;
  page->slice_count = 1;
  hak_page_used_set(page, 1);
  huge_map_slices(seg, page, total);
  huge_account(total);
  hak_segment_map_set(seg, true);
  return (uint8_t *)seg + offset;
}

/* A huge block of `size` mapped bytes is leaving: forget it in the
 * counters. (Its segment-map entry is the caller's: after a move by mremap
 * the old address may already be another segment's.) */
static void huge_unaccount(size_t size) {
  atomic_fetch_sub_explicit(&hak_stat_huge_bytes, (int64_t)size, memory_order_relaxed);
  atomic_fetch_sub_explicit(&hak_stat_huge_count, 1, memory_order_relaxed);
  hak_stat_commit(-(int64_t)size);
}

/* ------------------------------------------------------------ the cache */

#define HUGE_CACHE_SLOTS 32

typedef struct cached_s {
  hak_segment_t *seg;
  bool purged;                           /* memory handed back since it was freed */
  bool zeroed;                           /* ... and it reads as zero */
} cached_t;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static cached_t cache[HUGE_CACHE_SLOTS];   /* oldest first */
static size_t cache_count, cache_bytes;
static uint64_t cache_purge_at;            /* ms: when unpurged entries go (last take or put + delay) */
static _Atomic(bool) cache_dirty;          /* some entry is not purged */

static void cache_remove_at(size_t i) {
  cache_bytes -= cache[i].seg->size;
  memmove(&cache[i], &cache[i + 1], (cache_count - i - 1) * sizeof cache[0]);
  cache_count--;
}

/* Purge a cached segment's memory (the header's first page stays: it is
 * rewritten on reuse anyway). If the OS refuses, the entry stays unpurged,
 * so a calloc that takes it clears it. True if purged. */
static bool cached_purge(cached_t *c) {
  hak_purge_result_t r = hak_os_purge((uint8_t *)c->seg + HAK_OS_PAGE, c->seg->size - HAK_OS_PAGE);
  if (r == HAK_PURGE_FAILED) return false;
  atomic_fetch_add_explicit(&hak_stat_purged, (int64_t)c->seg->size, memory_order_relaxed);
  c->purged = true;
  c->zeroed = r == HAK_PURGED_ZERO;
  return true;
}

/* Purge every entry. Caller holds the lock. */
static void cache_purge(uint64_t now) {
  bool all = true;
  for (size_t i = 0; i < cache_count; i++)
    if (!cache[i].purged) all &= cached_purge(&cache[i]);
  if (!all) cache_purge_at = now + HAK_PURGE_RETRY;
  atomic_store_explicit(&cache_dirty, !all, memory_order_relaxed);
}

/* Purge the cache once it has gone unused for the purge delay. `wait`:
 * even if another thread holds the cache (the purger). Returns when cached
 * memory is due to be purged, or 0 if none waits. */
uint64_t hak_huge_cache_decay(uint64_t now, bool wait) {
  if (hak_option(HAK_OPT_PURGE_DELAY) < 0 || !atomic_load_explicit(&cache_dirty, memory_order_relaxed)) return 0;
  if (!hak_lock_or_try(&cache_lock, wait)) return now + 1;
  if (now >= cache_purge_at) cache_purge(now);
  uint64_t next = atomic_load_explicit(&cache_dirty, memory_order_relaxed) ? cache_purge_at : 0;
  hak_unlock(&cache_lock);
  return next;
}

/* The smallest cached segment of at least `total` bytes, its tail trimmed
 * if it would waste more than an eighth; or NULL. */
static hak_segment_t *cache_take(size_t total, bool *zeroed) {
  hak_segment_t *seg = NULL;
  hak_lock(&cache_lock);
  size_t best = cache_count;
  for (size_t i = 0; i < cache_count; i++) {
    size_t size = cache[i].seg->size;
    if (size >= total && (best == cache_count || size < cache[best].seg->size)) best = i;
  }
  if (best < cache_count) {
    seg = cache[best].seg;
    *zeroed = cache[best].zeroed;
    cache_remove_at(best);
  }
  cache_purge_at = hak_clock_ms() + (uint64_t)hak_option(HAK_OPT_PURGE_DELAY);
  hak_unlock(&cache_lock);
  atomic_fetch_add_explicit(seg ? &hak_stat_huge_cache_hits : &hak_stat_huge_cache_misses, 1, memory_order_relaxed);
#if HAKMEM_SECURE   /* trimmed to the size asked: its guard page must follow the block right away */
  if (seg != NULL && seg->size > total && hak_os_resize_in_place(seg, seg->size, total)) seg->size = total;
#else
  if (seg != NULL && seg->size - total > total / 8 && hak_os_resize_in_place(seg, seg->size, total)) seg->size = total;
#endif
  return seg;
}

/* Keep a freed huge segment, or unmap it if it does not fit the cache.
 * With a purge delay of 0 its memory goes back at once (before it is
 * cached: nobody else sees it yet). */
static void cache_put(hak_segment_t *seg) {
  size_t limit = (size_t)hak_option(HAK_OPT_HUGE_CACHE);
  long delay = hak_option(HAK_OPT_PURGE_DELAY);
  hak_segment_t *evicted[HUGE_CACHE_SLOTS];
  size_t n_evicted = 0;
  if (seg->size <= limit) {
    cached_t entry = { seg, false, false };
    if (delay == 0) cached_purge(&entry);
    hak_lock(&cache_lock);
    while (cache_count > 0 && (cache_count == HUGE_CACHE_SLOTS || cache_bytes + seg->size > limit)) {
      evicted[n_evicted++] = cache[0].seg;
      cache_remove_at(0);
    }
    cache[cache_count++] = entry;
    cache_bytes += seg->size;
    uint64_t now = hak_clock_ms();
    uint64_t due = 0;
    if (!entry.purged) {
      due = cache_purge_at = delay > 0 ? now + (uint64_t)delay : now + HAK_PURGE_RETRY;
      atomic_store_explicit(&cache_dirty, true, memory_order_relaxed);
    }
    hak_unlock(&cache_lock);
    if (due != 0) hak_note_pending_work(due);
    seg = NULL;
  }
  for (size_t i = 0; i < n_evicted; i++) hak_os_free(evicted[i], evicted[i]->size);
  if (seg != NULL) hak_os_free(seg, seg->size);
}

/* Whether seg is a freed huge segment waiting in the cache (to tell a
 * double free from a foreign pointer; error paths only). */
bool hak_huge_cache_holds(const hak_segment_t *seg) {
  hak_lock(&cache_lock);
  bool found = false;
  for (size_t i = 0; i < cache_count && !found; i++) found = cache[i].seg == seg;
  hak_unlock(&cache_lock);
  return found;
}

/* Unmap everything cached (malloc_trim). */
void hak_huge_cache_flush(void) {
  hak_lock(&cache_lock);
  while (cache_count > 0) {
    hak_segment_t *seg = cache[0].seg;
    cache_remove_at(0);
    hak_os_free(seg, seg->size);
  }
  hak_unlock(&cache_lock);
}

size_t hak_huge_cache_bytes(void) {
  hak_lock(&cache_lock);
  size_t n = cache_bytes;
  hak_unlock(&cache_lock);
  return n;
}

/* ------------------------------------------------------------ huge blocks */

static void *giant_alloc(size_t size, size_t align);   /* below */

void *hak_huge_alloc(size_t size, size_t align, bool zero) {
  if (align > HAK_HUGE_ALIGN_MAX) return giant_alloc(size, align);
  if (size > HAK_MAX_REQUEST) { errno = ENOMEM; return NULL; }
  size_t offset = huge_offset(align);
  size_t total = hak_align_up(offset + size, HAK_OS_PAGE) + HUGE_GUARD;
  bool zeroed = true;   /* a fresh mapping is */
  hak_segment_t *seg = cache_take(total, &zeroed);
  if (seg != NULL) total = seg->size;   /* may be up to an eighth larger */
  else if ((seg = hak_os_alloc_or_short(total, HAK_SEGMENT_SIZE)) == NULL) return NULL;
  void *p = huge_setup(seg, total, offset);
  if (zero && !zeroed) memset(p, 0, size);
#if HAKMEM_SECURE
  hak_secure_guard((uint8_t *)seg + total - HUGE_GUARD, true);
#endif
  hak_purger_consider_start();   /* allocation side, no lock held: see purge.c */
  return p;
}

/* Bytes from p to the end of the huge block, or 0 if p is not its start. */
size_t hak_huge_usable_size(hak_segment_t *seg, hak_page_t *page, const void *p) {
  const uint8_t *start = hak_page_area(page);
  return (const uint8_t *)p == start ? seg->size - HUGE_GUARD - (size_t)(start - (uint8_t *)seg) : 0;
}

/* ------------------------------------------------------------ who changes a huge block
 *
 * A live huge block is taken by one compare-and-swap of its kind: by free
 * for good (HUGE to FREE), by realloc for its resize (HUGE to RESIZING,
 * and HUGE again when done, on the segment it is on then). A free or a
 * realloc that finds another kind was raced by another thread's (a double
 * free, or a free during a realloc), and its caller reports it: run on, it
 * would cache or unmap a segment the other call is moving. fork waits for
 * the resizes in progress (each holds resize_lock to read), so a child never
 * inherits a block taken for one, which it could then not free. (Readers
 * first, glibc's default: a signal handler's realloc on a thread inside a
 * resize, with a fork waiting, would otherwise wait for ever.) A fork
 * holds resize_gate while it waits, and a resize starts only past the
 * gate: with readers first, threads whose resizes overlapped kept the lock
 * read-held, and a fork waited as long as they went on (6 threads
 * resizing on 2 cores: for ever). But for a thread inside the allocator
 * already (hak_locks_held: a signal handler's realloc), which goes straight
 * to the lock: the fork may be waiting for it. */
static pthread_rwlock_t resize_lock = PTHREAD_RWLOCK_INITIALIZER;
static pthread_mutex_t resize_gate = PTHREAD_MUTEX_INITIALIZER;

static bool huge_take(hak_page_t *page, uint8_t kind) {
  uint8_t live = HAK_SPAN_HUGE;
  return __atomic_compare_exchange_n(&page->span_kind, &live, kind, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

/* realloc's: false if the block is not live any more (the caller reports
 * it). Taken, it is released by hak_huge_realloc or hak_huge_shrink. */
bool hak_huge_take_for_resize(hak_page_t *page) {
  if (hak_locks_held == 0) {
    hak_lock(&resize_gate);
    hak_unlock(&resize_gate);
  }
  if (hak_read_lock(&resize_lock) != 0) hak_fatal("internal error: a huge block's resize cannot take its lock");
  if (huge_take(page, HAK_SPAN_RESIZING)) return true;
  hak_read_unlock(&resize_lock);
  return false;
}

/* The resize is done: the block, on `page` now, is live again. */
static void huge_resized(hak_page_t *page) {
  __atomic_store_n(&page->span_kind, HAK_SPAN_HUGE, __ATOMIC_RELEASE);
  hak_read_unlock(&resize_lock);
}

/* False if the block was not live any more (the caller reports it). */
bool hak_huge_free(hak_segment_t *seg, hak_page_t *page) {
  if (!huge_take(page, HAK_SPAN_FREE)) return false;
#if HAKMEM_SECURE   /* before the segment is cached (purged, trimmed, reused) or unmapped */
  hak_secure_guard((uint8_t *)seg + seg->size - HUGE_GUARD, false);
#endif
  hak_segment_map_set(seg, false);
  huge_unaccount(seg->size);
  cache_put(seg);
  return true;
}

/* Resize a huge block to `total` bytes of mapping: in place if the address
 * space allows, else by moving its pages with mremap to a new aligned place.
 * NULL if neither works (the block is then untouched). */
/* seg->size never exceeds what is mapped, so that a child forked meanwhile
 * (fork takes no lock of ours here) frees at most its mapping: it shrinks
 * before the cut (and back if the cut was refused), grows after. */
static void huge_set_size(hak_segment_t *seg, hak_page_t *page, size_t total) {
  seg->size = total;
  huge_map_slices(seg, page, total);
}

static bool huge_resize_in_place(hak_segment_t *seg, hak_page_t *page, size_t total) {
  size_t old = seg->size;
  if (total < old) huge_set_size(seg, page, total);
  if (!hak_os_resize_in_place(seg, old, total)) {
    if (total < old) huge_set_size(seg, page, old);
    return false;
  }
  if (total > old) huge_set_size(seg, page, total);
  int64_t delta = (int64_t)total - (int64_t)old;
  atomic_fetch_add_explicit(&hak_stat_huge_bytes, delta, memory_order_relaxed);
  hak_stat_commit(delta);
  return true;
}

static void *huge_resize(hak_segment_t *seg, hak_page_t *page, size_t offset, size_t total) {
  if (huge_resize_in_place(seg, page, total)) return (uint8_t *)seg + offset;
  hak_segment_t *target = hak_os_alloc_aligned(total, HAK_SEGMENT_SIZE);
  if (target == NULL) return NULL;
  size_t old_size = seg->size;
  /* Out of the map before the old range is unmapped: once it is, another
   * thread's new segment may get this address and set the entry itself. */
  hak_segment_map_set(seg, false);
  int saved = errno;
  if (mremap(seg, old_size, total, MREMAP_MAYMOVE | MREMAP_FIXED, target) != (void *)target) {
    errno = saved;   /* (the caller moves the block instead) */
    hak_segment_map_set(seg, true);
    hak_os_free(target, total);
    return NULL;
  }
  /* The old range is gone, and its map entry may already be another new
   * segment's: only the counters are ours to update. */
  huge_unaccount(old_size);
  return huge_setup(target, total, offset);
}

/* The block taken for its resize (hak_huge_take_for_resize), released on
 * return. NULL if neither way worked (the block is as it was). */
void *hak_huge_realloc(hak_segment_t *seg, hak_page_t *page, size_t new_size) {
  size_t offset = (size_t)(hak_page_area(page) - (uint8_t *)seg);
  uint8_t *p = NULL;
  if (new_size <= HAK_MAX_REQUEST) {
    size_t total = hak_align_up(offset + new_size, HAK_OS_PAGE) + HUGE_GUARD;
#if HAKMEM_SECURE   /* the guard page goes to the new end (lifted first: mremap takes one mapping) */
    hak_secure_guard((uint8_t *)seg + seg->size - HUGE_GUARD, false);
    p = huge_resize(seg, page, offset, total);
    hak_segment_t *now = p != NULL ? (hak_segment_t *)(p - offset) : seg;
    hak_secure_guard((uint8_t *)now + now->size - HUGE_GUARD, true);
#else
    p = huge_resize(seg, page, offset, total);
#endif
  }
  huge_resized(p != NULL ? hak_page_of(hak_segment_of(p), p) : page);
  return p;
}

#if !HAKMEM_SECURE   /* (whose realloc moves a block it shrinks by a page or more: secure.c) */
/* realloc shrinking a huge block to `size` bytes in place: its pages past
 * them unmapped. Never moved: if the kernel refuses the cut (it would
 * split a mapping past vm.max_map_count), the block stays as it was. The
 * block taken for its resize, released on return; returns its usable size. */
size_t hak_huge_shrink(hak_segment_t *seg, hak_page_t *page, size_t size) {
  size_t offset = (size_t)(hak_page_area(page) - (uint8_t *)seg);
  (void)huge_resize_in_place(seg, page, hak_align_up(offset + size, HAK_OS_PAGE));
  size_t usable = hak_huge_usable_size(seg, page, hak_page_area(page));   /* (before the block is released) */
  huge_resized(page);
  return usable;
}
#endif

/* ------------------------------------------------------------ giant blocks */

/* A block aligned beyond what a segment can hold: a mapping of its own
 * pages. Its descriptor, listed under giant_lock, is an OS page of its
 * own, away from the block: in the page just before it, a write below the
 * block rewrote where free unmaps (an attack helper's program unmapped
 * another mapping of the process so, 10 runs in 10). */
typedef struct giant_s {
  struct giant_s *next;
  size_t mapped;         /* from the block on */
  uintptr_t block_neg;   /* the block's address, hidden (hak_leak_hidden) */
} giant_t;

static uint8_t *giant_block(const giant_t *g) { return (uint8_t *)hak_leak_hidden(g->block_neg); }

static pthread_mutex_t giant_lock = PTHREAD_MUTEX_INITIALIZER;
static giant_t *giants;

#if HAKMEM_SECURE
/* The secure variant keeps the address ranges of the last GIANT_RETIRED
 * giant blocks freed, inaccessible and their memory given back, before it
 * unmaps them (giant blocks skip the quarantine, secure.c): a write after
 * free faults, and a second free is reported (as of a block hakmem does
 * not know) instead of freeing whatever block the OS mapped there since
 * (an attack helper's program: a second free of a reused address, 10 runs
 * in 10). */
#define GIANT_RETIRED 8
static giant_t *giants_retired[GIANT_RETIRED];   /* (giant_lock) */
static unsigned giants_retired_next;

/* g's block, just freed, out of reach; returns the block it replaces in
 * the ring, to unmap (NULL if none). Under giant_lock. */
static giant_t *giant_retire(giant_t *g) {
  giant_t *old = giants_retired[giants_retired_next];
  giants_retired[giants_retired_next] = g;
  giants_retired_next = (giants_retired_next + 1) % GIANT_RETIRED;
  return old;
}
#endif

static void giant_unmap(giant_t *g) {
  hak_os_free(giant_block(g), g->mapped);
  hak_os_free(g, HAK_OS_PAGE);
}

/* The mapping is cut down to the block's own pages: the rest of the
 * `align` it was over-sized by would otherwise stay mapped, and be the
 * block's (its usable size, up to `align` more than asked; the secure
 * variant's canary, which records the slack in 29 bits, then lay far past
 * the request). */
static void *giant_alloc(size_t size, size_t align) {
  if (size > HAK_MAX_REQUEST || align > HAK_MAX_REQUEST - size) { errno = ENOMEM; return NULL; }
  giant_t *g = hak_os_alloc_or_short(HAK_OS_PAGE, HAK_OS_PAGE);
  if (g == NULL) return NULL;
  size_t over = hak_align_up(size + align, HAK_OS_PAGE);
  uint8_t *base = hak_os_alloc_or_short(over, HAK_OS_PAGE);
  if (base == NULL) {
    hak_os_free(g, HAK_OS_PAGE);
    return NULL;
  }
  uint8_t *block = (uint8_t *)hak_align_up((uintptr_t)base, align), *end = block + hak_align_up(size, HAK_OS_PAGE);
  if (block > base) hak_os_free(base, (size_t)(block - base));
  if (base + over > end) hak_os_free(end, (size_t)(base + over - end));
  g->mapped = (size_t)(end - block);
  g->block_neg = hak_leak_hidden((uintptr_t)block);
  hak_lock(&giant_lock);
  g->next = giants;
  giants = g;
  hak_unlock(&giant_lock);
  huge_account(g->mapped + HAK_OS_PAGE);   /* (counted as huge blocks, with the descriptor) */
  return block;
}

static giant_t **giant_find(const void *p) {
  for (giant_t **g = &giants; *g != NULL; g = &(*g)->next)
    if (giant_block(*g) == p) return g;
  return NULL;
}

/* Once out of the list, g is this call's alone until it enters the ring
 * of retired blocks, where any later free may push it out and unmap it:
 * so its range is made inaccessible before, not after (a second free of p
 * meanwhile finds it in neither, and is reported as it would be later). */
bool hak_giant_free(void *p) {
  hak_lock(&giant_lock);
  giant_t **link = giant_find(p);
  giant_t *g = link ? *link : NULL;
  if (g) *link = g->next;
  hak_unlock(&giant_lock);
  if (g == NULL) return false;
  huge_unaccount(g->mapped + HAK_OS_PAGE);
#if HAKMEM_SECURE
  hak_os_purge(giant_block(g), g->mapped);
  int saved = errno;   /* (refused: the range stays as it was until it leaves the ring) */
  mprotect(giant_block(g), g->mapped, PROT_NONE);
  errno = saved;
  hak_lock(&giant_lock);
  giant_t *unmapped = giant_retire(g);
  hak_unlock(&giant_lock);
#else
  giant_t *unmapped = g;
#endif
  if (unmapped != NULL) giant_unmap(unmapped);
  return true;
}

size_t hak_giant_usable_size(const void *p) {
  hak_lock(&giant_lock);
  giant_t **link = giant_find(p);
  size_t n = link ? (*link)->mapped : 0;
  hak_unlock(&giant_lock);
  return n;
}

/* ------------------------------------------------------------ fork */

/* The resizes first (init.c): a resize holds resize_lock outside any other
 * (a report it makes takes the report lock). */
void hak_huge_resize_fork_prepare(void) {
  pthread_mutex_lock(&resize_gate);
  pthread_rwlock_wrlock(&resize_lock);
}
void hak_huge_resize_fork_parent(void) {
  pthread_rwlock_unlock(&resize_lock);
  pthread_mutex_unlock(&resize_gate);
}
void hak_huge_resize_fork_child(void) {
  pthread_rwlock_t unlocked = PTHREAD_RWLOCK_INITIALIZER;
  resize_lock = unlocked;
  pthread_mutex_init(&resize_gate, NULL);
}

void hak_huge_fork_prepare(void) {
  pthread_mutex_lock(&cache_lock);
  pthread_mutex_lock(&giant_lock);
}
void hak_huge_fork_parent(void) {
  pthread_mutex_unlock(&giant_lock);
  pthread_mutex_unlock(&cache_lock);
}
void hak_huge_fork_child(void) {
  pthread_mutex_init(&giant_lock, NULL);
  pthread_mutex_init(&cache_lock, NULL);
}
