/* The free path, whole.
 *
 *   hak_free            find the segment (one load from the segment map)
 *                       and the slice's page; if this thread owns it and
 *                       the slice's check passes: local free
 *   free_local          push on page->free, no atomics; a page whose
 *                       blocks are all free again is retired
 *   free_own            the owner's free into a page of several slices
 *                       (medium blocks; up to 32 KiB kept in heap->recent)
 *                       or into a full page it abandoned, after
 *                       hak_page_is_block_start's exact check
 *   free_in_slice       every other free into a mapped segment (the fast
 *                       path hands it its slice; hak_free_generic, the
 *                       other layers' entry, finds it): a block of a page
 *                       of another thread or of nobody, after the same
 *                       exact checks (the slice's for a one-slice page);
 *   free_searched       the rest, after the exact check of hak_block_find:
 *                       large and huge blocks, counted frees, misuse.
 *                       Blocks of pages this thread does not own go to
 *                       hak_page_free_remote (owner.c: the ownership
 *                       protocol), or stay with this thread if its frees
 *                       are mostly such frees (free_foreign)
 *
 * A free of a block in a page never takes a lock (large and huge blocks go
 * back to their arena or cache, under its lock), and never touches a block
 * after publishing it (docs/design.md §5.2): once pushed, another thread
 * may already reuse it. */
#include <errno.h>
#include "internal.h"

/* ------------------------------------------------------------ misuse */

const char *hak_op_name(hak_op_t op) {
  static const char *const names[] = {
    [HAK_OP_FREE] = "free", [HAK_OP_REALLOC] = "realloc", [HAK_OP_USABLE_SIZE] = "malloc_usable_size",
#if HAKMEM_SECURE   /* (the default build's deletes are free) */
    [HAK_OP_DELETE] = "delete", [HAK_OP_DELETE_ARRAY] = "delete[]",
    [HAK_OP_DELETE_ALIGNED] = "delete (align_val_t)", [HAK_OP_DELETE_ARRAY_ALIGNED] = "delete[] (align_val_t)",
#endif
  };
  return names[op];
}

/* One line naming the call, the pointer and what is wrong, then abort. */
static HAK_NOINLINE HAK_NORETURN void report(hak_op_t op, const void *p, const char *what) {
  hak_fatal("%s of %p, %s", hak_op_name(op), p, what);
}

/* p was found live, then another thread's free or realloc of it took it
 * first (free: a double free). */
HAK_NORETURN void hak_report_raced(hak_op_t op, const void *p) {
  hak_report_freed(op, p, "freed or resized by another thread at the same time");
}

/* The block is free already: for free (or delete), a double free. */
HAK_NORETURN void hak_report_freed(hak_op_t op, const void *p, const char *what) {
  if (op == HAK_OP_FREE) hak_fatal("double free of %p (%s)", p, what);
#if HAKMEM_SECURE
  if (op >= HAK_OP_DELETE) hak_fatal("double free of %p by %s (%s)", p, hak_op_name(op), what);
#endif
  hak_fatal("%s of %p, a block already freed (%s)", hak_op_name(op), p, what);
}

/* hak_block_find's search: any pointer, exactly, or a report. */
void hak_block_search(hak_op_t op, const void *p, hak_block_ref_t *ref) {
  *ref = (hak_block_ref_t){ 0 };
  if (!hak_segment_is_mapped(p)) {
    ref->usable = hak_giant_usable_size(p);
    if (ref->usable != 0) return;
    if (hak_huge_cache_holds(hak_segment_of(p))) hak_report_freed(op, p, "a huge block");
    report(op, p, "not allocated by hakmem (or freed already)");
  }
  hak_segment_t *seg = hak_segment_of(p);
  hak_page_t *page = hak_page_of(seg, p);
  ref->seg = seg;
  ref->page = page;
  uint8_t *area = hak_page_area(page);
  uint8_t kind = __atomic_load_n(&page->span_kind, __ATOMIC_RELAXED);
  ref->kind = kind;
  switch (kind) {
    case HAK_SPAN_RESIZING:
      report(op, p, "a huge block another thread's realloc is resizing (freed or resized twice at once)");
    case HAK_SPAN_HUGE:
      if ((const uint8_t *)p < area) report(op, p, "not allocated by hakmem (in a huge block's header)");
      if ((const uint8_t *)p != area) report(op, p, "not the start of a block (a pointer inside a huge one)");
      ref->usable = hak_huge_usable_size(seg, page, p);
      return;
    case HAK_SPAN_LARGE:
      if ((const uint8_t *)p != area) report(op, p, "not the start of a block (a pointer inside a large one)");
      ref->usable = page->block_size;
      return;
    case HAK_SPAN_FREE:
      hak_report_freed(op, p, "or never allocated: its memory is free");
    case HAK_SPAN_PAGE:
      break;
    default:
      report(op, p, "not allocated by hakmem");
  }
  hak_block_t *b = hak_page_block_of(page, p);
  if (b == NULL) report(op, p, "not allocated by hakmem (outside every block of its page)");
  if (hak_block_is_free(b, page)) hak_report_freed(op, p, "or never handed out");
  if ((const void *)b != p) report(op, p, "not the start of a block (a pointer inside one)");
  ref->usable = page->block_size;
}


/* ------------------------------------------------------------ free */

/* Checked before the block is pushed anywhere, so a double free never
 * corrupts a free list. */
static inline void mark_free(hak_block_t *b, const hak_page_t *page) {
  uintptr_t tag = hak_free_tag(page);
  if (hak_unlikely(b->free_tag == tag)) hak_report_freed(HAK_OP_FREE, b, "or never handed out");
  b->free_tag = tag;
}

/* Onto the page's free list, b tagged free already: the owner's next
 * malloc of the class takes it back while its lines are still in this
 * core's cache (LIFO; a separate list that `free` takes only once it runs
 * out hands out blocks freed long ago: cachegrind counted 23-31% more L1
 * data misses on the lab's small-block workloads). */
static inline void link_local(hak_page_t *page, hak_block_t *b) {
  hak_block_set_next(page, b, page->free);
  page->free = b;
}

static inline void push_local(hak_page_t *page, hak_block_t *b) {
  mark_free(b, page);
  link_local(page, b);
}

/* A block of another thread's page, or of nobody's: checked and tagged
 * here, then handed to the ownership protocol (owner.c). */
static inline void free_remote(hak_page_t *page, hak_block_t *b) {
  mark_free(b, page);
  hak_page_free_remote(page, b);
}

/* After a local free: a page whose blocks are all free again goes back to
 * its arena (and may belong to another thread at once). */
static inline void release_local(hak_heap_t *heap, hak_page_t *page) {
  if (hak_unlikely(hak_page_used_dec_is_zero(page)) && !hak_page_keep_when_empty(page)) hak_heap_retire_page(heap, page);
}

static inline void free_local(hak_heap_t *heap, hak_page_t *page, hak_block_t *b) {
  push_local(page, b);
  release_local(heap, page);
}

/* HAKMEM_STATS: every free comes here, and is counted on the freeing
 * thread's heap (which a thread that only frees may not have yet). */
static HAK_NOINLINE hak_heap_t *count_free(hak_heap_t *heap, size_t bin, bool remote) {
  bool had_none = heap == &hak_heap_empty;
  if (had_none && (heap = hak_heap_thread_init()) == NULL) return &hak_heap_empty;
  hak_counter_inc(&heap->stats[bin].frees);
  if (remote) hak_counter_inc(&heap->stats[bin].remote_frees);
  if (had_none) hak_heap_release(heap);
  return heap;
}

/* Every free of a block in a page when calls are counted (HAKMEM_STATS),
 * or tracked under memcheck (tracking.h). */
static HAK_NOINLINE void free_counted(hak_heap_t *heap, hak_page_t *page, hak_block_t *b, bool local) {
  heap = count_free(heap, page->bin, !local);
  if (hak_tracking) {   /* free now, but its link and tag are ours to write */
    hak_track_free(b, page->block_size, true);
    hak_track_open(b);
  }
  if (local) {
    push_local(page, b);
    if (hak_tracking) hak_track_close(b);   /* before the page may change hands */
    release_local(heap, page);
  } else {
    free_remote(page, b);   /* its link stays open until its owner gathers it */
  }
}

/* A free into a page this heap abandoned full, which nobody took since: take
 * it back, so that its further frees are local again. */
static bool take_back(hak_heap_t *heap, hak_page_t *page) {
  if (heap == &hak_heap_empty || !hak_page_try_readopt(heap, page)) return false;
  hak_heap_queue_push_back(heap, page);
  return true;
}

/* Whether a free into this page is local: the heap owns it, or abandoned it
 * full and takes it back now. */
static bool owned_or_taken_back(hak_heap_t *heap, hak_page_t *page) {
  uintptr_t mine = (uintptr_t)heap, owner = HAK_OWNER_UNCOUNTED(hak_page_owner(page));
  return owner == mine || (owner == (mine | HAK_OWNER_ABANDONED) && take_back(heap, page));
}

/* The frees free_in_slice does not take first: large and huge blocks,
 * counted frees, and every misuse (found here exactly). Out of line, so
 * that its search stays inlined in it. */
static HAK_NOINLINE void free_searched(void *p, hak_heap_t *heap) {
  hak_block_ref_t ref;
  hak_block_find(HAK_OP_FREE, p, &ref);
  hak_page_t *page = ref.page;
  if (ref.kind != HAK_SPAN_PAGE) {
    if (hak_owner_counted) count_free(heap, 0, false);
    if (hak_unlikely(hak_tracking)) hak_track_free(p, ref.usable, false);
    /* Each gives the block back only if it is still as found: another
     * thread's free (or realloc) of it may have come first. */
    bool given_back;
    if (ref.seg == NULL) given_back = hak_giant_free(p);
    else if (ref.kind == HAK_SPAN_LARGE) given_back = hak_large_free(page, ref.usable);
    else given_back = hak_huge_free(ref.seg, page);
    if (hak_unlikely(!given_back)) hak_report_raced(HAK_OP_FREE, p);
    return;
  }
  hak_block_t *b = p;
  bool local = owned_or_taken_back(heap, page);
  if (hak_unlikely(hak_owner_counted)) {
    free_counted(heap, page, b, local);
  } else if (local) {
    free_local(heap, page, b);
  } else {
    free_remote(page, b);
  }
}

/* A medium block this thread freed waits in heap->recent (its class's
 * ring of the last HAK_RECENT_DEPTH) until a malloc of the class takes it
 * back, newest first (while its lines are still in this core's cache: a
 * page's free list hands out blocks freed long ago), or newer frees push it
 * out to its page. Meanwhile it is tagged free (so a second free is caught)
 * and still counted used by its page (so the page stays; it may change
 * hands if it goes full and is abandoned). kept_release gives such a block
 * (or one of heap->foreign, below) back to its page. */
static void kept_release(hak_heap_t *heap, hak_block_t *b) {
  hak_page_t *page = hak_page_of(hak_segment_of(b), b);
  if (owned_or_taken_back(heap, page)) {
    link_local(page, b);
    release_local(heap, page);
  } else {
    hak_page_free_remote(page, b);
  }
}

/* How many of ring i's blocks lie in the page's span. */
static unsigned recent_in_page(const hak_heap_t *heap, size_t i, const hak_page_t *page) {
  const uint8_t *start = hak_page_area(page), *end = start + ((size_t)page->slice_count << HAK_SLICE_SHIFT);
  const hak_recent_t *r = &heap->recent[i];
  unsigned n = 0;
  for (unsigned k = 0; k < heap->recent_count[i]; k++)
    n += (const uint8_t *)r->slot[k] >= start && (const uint8_t *)r->slot[k] < end;
  return n;
}

/* Give ring i's oldest blocks back to their pages until `keep` are left
 * (the newest, moved down to its first slots). */
static void recent_release_down_to(hak_heap_t *heap, size_t i, unsigned keep) {
  hak_recent_t *r = &heap->recent[i];
  unsigned count = heap->recent_count[i];
  if (count <= keep) return;
  unsigned drop = count - keep;
  for (unsigned k = 0; k < drop; k++) kept_release(heap, r->slot[k]);
  for (unsigned k = 0; k < keep; k++) r->slot[k] = r->slot[drop + k];
  heap->recent_count[i] = (uint8_t)keep;
}

/* If nothing of the page is in use but blocks in ring i, let the ring go
 * now, so that the page goes back to its arena: kept, those blocks would
 * pin it for as long as the thread allocates nothing of the class (an idle
 * thread: for ever; 16 such threads held 38 MiB after malloc_trim). */
static HAK_NOINLINE void release_if_only_kept(hak_heap_t *heap, size_t i, const hak_page_t *page) {
  if (hak_page_used(page) == recent_in_page(heap, i, page)) recent_release_down_to(heap, i, 0);
}

/* A full ring i: its oldest block goes back to its page (which may be b's,
 * so the test of release_if_only_kept comes after). */
static HAK_NOINLINE void recent_evict(hak_heap_t *heap, size_t i, hak_page_t *page, hak_block_t *oldest) {
  kept_release(heap, oldest);
  if (hak_unlikely(hak_page_used(page) <= HAK_RECENT_DEPTH)) release_if_only_kept(heap, i, page);
}

/* b into the ring of its class, `bin`. (Inlined in its two callers, each
 * of whose calls is in tail position, so that they save no registers.) */
static inline __attribute__((always_inline)) void keep_recent(hak_heap_t *heap, hak_page_t *page, size_t bin,
                                                              hak_block_t *b) {
  hak_assert(!hak_owner_counted && !hak_tracking);   /* (counted and tracked frees keep nothing: malloc_medium
                                                        pops the rings uncounted, untracked) */
  mark_free(b, page);
  size_t i = bin - HAK_RECENT_FIRST;
  hak_recent_t *r = &heap->recent[i];
  unsigned count = heap->recent_count[i];
  if (count == HAK_RECENT_DEPTH) {
    hak_block_t *oldest = r->slot[0];
    for (unsigned k = 1; k < HAK_RECENT_DEPTH; k++) r->slot[k - 1] = r->slot[k];
    r->slot[HAK_RECENT_DEPTH - 1] = b;
    recent_evict(heap, i, page, oldest);
    return;
  }
  r->slot[count] = b;
  heap->recent_count[i] = (uint8_t)++count;
  if (hak_unlikely(hak_page_used(page) <= count)) release_if_only_kept(heap, i, page);
}

/* Give the blocks kept in heap->recent back to their pages, all but the
 * newest `keep` of each class: all at thread exit and on malloc_trim, all
 * but one at the heartbeat (alloc.c), so blocks of classes the thread has
 * stopped using (a buffer realloc grew past them) do not stay for good. */
void hak_heap_flush_recent(hak_heap_t *heap, unsigned keep) {
  for (size_t i = 0; i < HAK_RECENT_BINS; i++) recent_release_down_to(heap, i, keep);
}

/* ------------------------------------------------------------ foreign cache */

/* A thread whose frees are mostly of other threads' blocks (it consumes
 * what others allocate) keeps those blocks for its own next mallocs of
 * their class, newest first, as tcmalloc and jemalloc keep every block a
 * thread frees: the program has just used them on this core, whereas their
 * owner's next use would take each of their lines back across cores. A
 * thread whose frees are mostly of its own blocks sends other threads'
 * back: kept, each would be another thread's block again at its next
 * free, and kept again, until nearly every free went this way, writing
 * into pages whose owners allocate their neighbours (design.md §5.5).
 * Which kind of thread it is, the heartbeat decides from the window before
 * (hak_heap_foreign_heartbeat).
 *
 * A kept block is tagged free (a second free is caught) and still counted
 * used by its page (so the page stays, and may change hands), as one in
 * heap->recent; medium blocks wait in heap->recent itself, small ones in
 * heap->foreign (internal.h). Bounded per class, and given back to their
 * pages at the heartbeat (the classes the thread took none of since the
 * one before, or all once it stops keeping), at its exit, and by
 * hak_collect. Not in the secure variant (internal.h). */
#if HAKMEM_SECURE
static inline void free_foreign(hak_heap_t *heap, hak_page_t *page, hak_block_t *b) {
  (void)heap;
  free_remote(page, b);
}
#else
/* How many of a class's kept blocks lie in `page` (a one-slice page). */
static unsigned foreign_in_page(const hak_page_t *f, const hak_page_t *page) {
  unsigned n = 0;
  for (const hak_block_t *b = f->free; b != NULL; b = b->next) n += hak_page_of(hak_segment_of(b), b) == page;
  return n;
}

/* A class's kept blocks back to their pages; its direct entries lead to
 * its pages again. */
static void flush_class(hak_heap_t *heap, size_t bin) {
  hak_page_t *f = &heap->foreign[bin];
  while (f->free != NULL) {
    hak_block_t *b = f->free;
    f->free = b->next;
    kept_release(heap, b);
  }
  hak_heap_foreign_reset(heap, bin);
}

/* How many blocks each small class keeps at most: HAK_FOREIGN_BLOCKS, and
 * no more than HAK_FOREIGN_BYTES (rounded up to a block). Set at process
 * start; one load on the free path instead of two bounds tested. */
static uint8_t foreign_cap[HAK_FOREIGN_BINS];

void hak_foreign_init(void) {
  for (size_t bin = 1; bin < HAK_FOREIGN_BINS; bin++) {
    size_t by_bytes = (HAK_FOREIGN_BYTES + hak_bin_size(bin) - 1) / hak_bin_size(bin);
    foreign_cap[bin] = (uint8_t)(by_bytes < HAK_FOREIGN_BLOCKS ? by_bytes : HAK_FOREIGN_BLOCKS);
  }
}

/* b onto its class's list f, which held `held` blocks. Half full, the
 * class's mallocs take from there until it runs out (switching at the
 * first block would switch back and forth). */
static inline void foreign_push(hak_heap_t *heap, hak_page_t *f, size_t bin, hak_page_t *page, hak_block_t *b,
                                size_t held) {
  mark_free(b, page);
  b->next = f->free;
  f->free = b;
  f->capacity++;
  held++;
  if (!f->alone && held * 2 >= foreign_cap[bin]) {
    f->alone = true;
    hak_heap_update_direct(heap, bin);
  }
}

/* b may be its page's last block in use but those kept in its class's
 * list: kept, they would hold the page for nothing, so they go back with b
 * (as release_if_only_kept does for heap->recent). b is checked first: if
 * it is kept already (a double free), the kept blocks sent back before the
 * check could be handed out by the page's owner, b among them, while the
 * check still ran. */
static HAK_NOINLINE void keep_unless_last(hak_heap_t *heap, hak_page_t *f, size_t bin, hak_page_t *page,
                                          hak_block_t *b, size_t held) {
  if (foreign_in_page(f, page) + 1 >= hak_page_used(page)) {
    mark_free(b, page);
    flush_class(heap, bin);
    hak_page_free_remote(page, b);
  } else {
    foreign_push(heap, f, bin, page, b, held);
  }
}

/* b, checked, of a page of another heap or of nobody, freed by a thread
 * that keeps such blocks (heap->keeps_foreign): kept if its class has
 * room, else sent to its page. (Every call in tail position.) */
static HAK_NOINLINE void keep_or_send(hak_heap_t *heap, hak_page_t *page, hak_block_t *b) {
  size_t bin = atomic_load_explicit(&page->bin, memory_order_relaxed);
  if (hak_bin_has_recent(bin)) {
    keep_recent(heap, page, bin, b);
    return;
  }
  if (bin >= HAK_FOREIGN_BINS) {   /* medium classes above 32 KiB, the shared heap's own: none kept */
    free_remote(page, b);
    return;
  }
  hak_page_t *f = &heap->foreign[bin];
  size_t held = hak_foreign_held(f);
  if (held >= foreign_cap[bin]) free_remote(page, b);
  else if (hak_unlikely(hak_page_used(page) <= held + 1)) keep_unless_last(heap, f, bin, page, b, held);
  else foreign_push(heap, f, bin, page, b, held);
}

/* A checked block of a page of another heap or of nobody: counted in
 * the window (hak_heap_foreign_heartbeat), then kept or sent to its page.
 * (The keeping out of line: inlined, it made hak_free_generic save six
 * registers on every call.) */
static inline void free_foreign(hak_heap_t *heap, hak_page_t *page, hak_block_t *b) {
  if (heap != &hak_heap_empty) {   /* (a thread with no heap: nothing to count, nowhere to keep) */
    heap->foreign_frees++;
    if (heap->keeps_foreign) {
      keep_or_send(heap, page, b);
      return;
    }
  }
  free_remote(page, b);
}

/* The class's kept blocks ran out (malloc_slow) or went back: its direct
 * entries lead to its pages again. */
void hak_heap_foreign_reset(hak_heap_t *heap, size_t bin) {
  hak_page_t *f = &heap->foreign[bin];
  f->capacity = f->reserved = 0;
  f->alone = false;
  atomic_store_explicit(&f->used, 0, memory_order_relaxed);
  hak_heap_update_direct(heap, bin);
}

/* The kept blocks back to their pages: every class's, or (`idle_only`)
 * those of the classes the thread took none of since the last heartbeat
 * (`reserved` holds the pops it saw then; sending back every class's at
 * each heartbeat would send back blocks the thread is about to take). */
static void flush_foreign(hak_heap_t *heap, bool idle_only) {
  for (size_t bin = 1; bin < HAK_FOREIGN_BINS; bin++) {
    hak_page_t *f = &heap->foreign[bin];
    if (f->free == NULL && !f->alone) continue;   /* (nothing kept; not `capacity`, which wraps) */
    if (idle_only && f->reserved != hak_page_used(f)) {
      f->reserved = hak_page_used(f);
      continue;
    }
    flush_class(heap, bin);
  }
}

/* All kept blocks back (hak_collect, thread exit). (The medium ones, in
 * heap->recent, go with hak_heap_flush_recent.) */
void hak_heap_flush_foreign(hak_heap_t *heap) {
  if (heap->foreign != NULL) flush_foreign(heap, false);
}

#define FOREIGN_MAP hak_align_up(HAK_FOREIGN_BINS * sizeof(hak_page_t), HAK_OS_PAGE)

/* Thread exit: all kept blocks back, and heap->foreign unmapped. */
void hak_heap_foreign_done(hak_heap_t *heap) {
  hak_heap_flush_foreign(heap);
  if (heap->foreign != NULL) hak_os_free(heap->foreign, FOREIGN_MAP);
  heap->foreign = NULL;
  heap->keeps_foreign = false;
}

/* At the heartbeat: whether the thread keeps other threads' blocks until
 * the next one, from the window since the last. It keeps them if at least
 * half as many of its frees were of other threads' blocks as it made
 * mallocs (each fast one took one off the heartbeat, each slow one
 * HAK_HEARTBEAT_SLOW, and slow ones are counted). */
void hak_heap_foreign_heartbeat(hak_heap_t *heap) {
  uint32_t mallocs = HAK_HEARTBEAT - (HAK_HEARTBEAT_SLOW - 1) * heap->slow_mallocs;
  bool kept = heap->keeps_foreign, keep = heap->foreign_frees * 2 >= mallocs;
  heap->foreign_frees = heap->slow_mallocs = 0;
  if (keep && heap->foreign == NULL) {   /* (zero: nothing kept, no direct entry leads there) */
    int saved = errno;   /* (refused: nothing is kept, and the malloc at the heartbeat goes on) */
    heap->foreign = hak_os_alloc_aligned(FOREIGN_MAP, HAK_OS_PAGE);
    errno = saved;
  }
  heap->keeps_foreign = keep && heap->foreign != NULL;
  if (kept) flush_foreign(heap, heap->keeps_foreign);
}
#endif

/* A checked block of a page this heap owns: a medium one waits in
 * heap->recent, the rest go onto their page's free list. (The ring's
 * classes all have pages of several slices: hak_page_slices_for. A tool's
 * tracking never gets here: it counts calls, so no owner word names a heap
 * alone, keep_recent's assertion.) */
static inline void owned_block(hak_heap_t *heap, hak_page_t *page, hak_block_t *b) {
  size_t bin = atomic_load_explicit(&page->bin, memory_order_relaxed);
  if (hak_bin_has_recent(bin))
    keep_recent(heap, page, bin, b);
  else free_local(heap, page, b);
}

/* A checked block of a full page this heap abandoned: taken back if
 * nobody took it since, else (it is another heap's now) searched again. */
static HAK_NOINLINE void free_taken_back(void *p, hak_heap_t *heap, hak_page_t *page) {
  if (take_back(heap, page)) owned_block(heap, page, (hak_block_t *)p);
  else free_searched(p, heap);
}

/* A free into a page this heap owns, or owned last and abandoned full: a
 * live page of blocks, so hak_page_is_block_start alone checks p exactly.
 * (Every call in tail position: it saves no registers.) */
static HAK_NOINLINE void free_own(void *p, hak_heap_t *heap, hak_page_t *page, uintptr_t owner) {
  if (hak_unlikely(!hak_page_is_block_start(page, p))) free_searched(p, heap);
  else if (hak_likely(owner == (uintptr_t)heap)) owned_block(heap, page, (hak_block_t *)p);
  else free_taken_back(p, heap, page);
}

/* A free of a pointer into a mapped segment that the fast path does not
 * take (but the owner's frees into its pages of several slices: free_block
 * sends those to free_own): `slice` is p's. Most are of another thread's
 * page (or of nobody's): free_foreign after the exact check (the fast
 * path's for a one-slice page, hak_page_is_block_start for one of several
 * slices; the owner word's bit sends on pages whose calls are counted or
 * tracked); of this thread's full pages it abandoned: free_own; the rest,
 * free_searched. */
static HAK_NOINLINE void free_in_slice(void *p, hak_heap_t *heap, const hak_slice_t *slice) {
  hak_page_t *page = slice->page;
  uintptr_t owner = hak_slice_owner(slice);
  if ((owner & ~(uintptr_t)HAK_OWNER_ABANDONED) == (uintptr_t)heap) {
    free_own(p, heap, page, owner);
    return;
  }
  if ((owner & HAK_OWNER_COUNTED) == 0 && hak_block_starts(slice, p)) {
    free_foreign(heap, page, (hak_block_t *)p);
    return;
  }
  free_searched(p, heap);
}

/* Every free the fast path does not take, and the other layers' frees. */
void hak_free_generic(void *p, hak_heap_t *heap) {
  hak_segment_t *seg = hak_segment_lookup(p);
  if (hak_likely(seg != NULL)) free_in_slice(p, heap, hak_slice_at(seg, p));
  else free_searched(p, heap);
}

/* The fast path: a block this thread's page handed out, checked exactly
 * (hak_block_check) in one multiply and compare. */
static inline void free_block(void *p, hak_heap_t *heap) {
  hak_segment_t *seg = hak_segment_lookup(p);
  if (hak_unlikely(seg == NULL)) {
    if (p != NULL) free_searched(p, heap);
    return;
  }
  const hak_slice_t *slice = hak_slice_at(seg, p);
  if (hak_likely(hak_slice_owned_by(slice, heap))) {
    hak_page_t *page = slice->page;
    if (hak_likely(hak_block_check(slice, p))) free_local(heap, page, (hak_block_t *)p);
    else free_own(p, heap, page, (uintptr_t)heap);   /* a page of several slices, or a misuse */
    return;
  }
  free_in_slice(p, heap, slice);
}

void hak_free(void *p) {
#if HAKMEM_SECURE   /* checks the canary, then the quarantine frees it later */
  hak_secure_free_plain(p);
#else
  free_block(p, hak_heap_get());
#endif
}

/* ---------------------------------------------------- C++ operator delete */

/* The plain and aligned delete are free in the default build (exports.h).
 * Every other form is defined by the C++ runtime as a call of one of the
 * unsized deletes (hak_cxx_form_t): in a program that replaced that one
 * (cxx.c), the call is made. Otherwise, the secure variant checks each form
 * against the operator new that allocated the block (secure.h: allocation
 * families), and a sized one's size against the size asked for. (The
 * alignment argument is ignored: the family says the block came from an
 * aligned new.) */
#if HAKMEM_SECURE
void hak_delete(void *p) { hak_secure_delete(p); }
void hak_delete_aligned(void *p) { hak_secure_delete_aligned(p); }
#define DELETE_OWN(secure_call)      secure_call
#define DELETE_OWN_CALL(secure_call) secure_call
#else
#define DELETE_OWN(secure_call)      free_block(p, hak_heap_get())
#define DELETE_OWN_CALL(secure_call) hak_free(p)
#endif

/* (The check out of line, and jumped to: the form then keeps nothing in
 * registers across a call.) */
#define DELETE_FORM(name, params, args, callee, align, secure_call)   \
  static HAK_NOINLINE void name##_checked params {                    \
    if (hak_cxx_replaced(callee)) hak_cxx_delete(callee, p, align);   \
    else DELETE_OWN_CALL(secure_call);                                \
  }                                                                   \
  void name params {                                                  \
    if (hak_cxx_maybe_replaced()) name##_checked args;                \
    else DELETE_OWN(secure_call);                                     \
  }
DELETE_FORM(hak_delete_array, (void *p), (p), HAK_CXX_DELETE, 0, hak_secure_delete_array(p))
DELETE_FORM(hak_delete_sized, (void *p, size_t size), (p, size), HAK_CXX_DELETE, 0, hak_secure_delete_sized(p, size))
DELETE_FORM(hak_delete_nothrow, (void *p, const void *tag), (p, tag), HAK_CXX_DELETE, 0, hak_secure_delete(p))
DELETE_FORM(hak_delete_array_sized, (void *p, size_t size), (p, size), HAK_CXX_DELETE_ARRAY, 0,
            hak_secure_delete_array_sized(p, size))
DELETE_FORM(hak_delete_array_nothrow, (void *p, const void *tag), (p, tag), HAK_CXX_DELETE_ARRAY, 0,
            hak_secure_delete_array(p))
DELETE_FORM(hak_delete_array_aligned, (void *p, size_t align), (p, align), HAK_CXX_DELETE_ALIGNED, align,
            hak_secure_delete_array_aligned(p))
DELETE_FORM(hak_delete_aligned_sized, (void *p, size_t size, size_t align), (p, size, align), HAK_CXX_DELETE_ALIGNED,
            align, hak_secure_delete_aligned_sized(p, size))
DELETE_FORM(hak_delete_aligned_nothrow, (void *p, size_t align, const void *tag), (p, align, tag),
            HAK_CXX_DELETE_ALIGNED, align, hak_secure_delete_aligned(p))
DELETE_FORM(hak_delete_array_aligned_sized, (void *p, size_t size, size_t align), (p, size, align),
            HAK_CXX_DELETE_ARRAY_ALIGNED, align, hak_secure_delete_array_aligned_sized(p, size))
DELETE_FORM(hak_delete_array_aligned_nothrow, (void *p, size_t align, const void *tag), (p, align, tag),
            HAK_CXX_DELETE_ARRAY_ALIGNED, align, hak_secure_delete_array_aligned(p))

#if HAKMEM_SECURE
/* (Out of line: inlined into hak_free_released, it cost the secure
 * variant's free 1-2 instructions a pair on one-slice pages, which never
 * come here.) */
static HAK_NOINLINE void free_owned_block(hak_heap_t *heap, hak_page_t *page, hak_block_t *b) {
  owned_block(heap, page, b);
}

/* A block leaving the quarantine takes the fast path, with less to check:
 * it is the start of a block of an arena segment (live and exactly found
 * when it entered, secure.c: giant and huge blocks skip the quarantine),
 * so its segment is found by masking, and a one-slice page
 * this heap owns needs no block check; and its second word held the
 * quarantine's tag (checked as it left), not the free tag. */
void hak_free_released(void *p, hak_heap_t *heap) {
  const hak_slice_t *slice = hak_slice_at(hak_segment_of(p), p);
  hak_page_t *page = slice->page;
  hak_block_t *b = p;
  if (hak_likely(hak_slice_owned_by(slice, heap))) {
    if (hak_likely(page->slice_count == 1)) {
      b->free_tag = hak_free_tag(page);
      link_local(page, b);
      release_local(heap, page);
      return;
    }
    if (page->span_kind == HAK_SPAN_PAGE) {   /* as free_own, without its search */
      free_owned_block(heap, page, b);
      return;
    }
  }
  b->free_tag = 0;   /* not a quarantine tag any more: a large block's memory is handed out as it is */
  hak_free_generic(p, heap);
}
#endif

/* ------------------------------------------------------------ sized free */

/* C23 free_sized and free_aligned_sized. hakmem finds a block's size from
 * its address, so the size given is only checked, in the debug and secure
 * builds. The secure variant knows the size each block was asked for (its
 * usable size): the size given must be that one (secure.c, as for the sized
 * deletes). The debug build knows the block: the size must fit it, and the
 * block must be one a request of that size (and alignment) can be served
 * from. realloc keeps a block it shrinks to half or more of its usable
 * size, so a block may hold up to twice its size. */
#if HAKMEM_DEBUG && !HAKMEM_SECURE
static void check_sized_free(const char *call, const void *p, size_t align, size_t size) {
  if (p == NULL) return;
  hak_block_ref_t ref;
  hak_block_find(HAK_OP_FREE, p, &ref);   /* a freed or interior p: reported as the free it is */
  size_t usable = ref.usable;
  /* An aligned block is carved from hak_aligned_request (alloc.c); a
   * block of the shared heap (whole cache lines, so a multiple of them)
   * from hak_shared_request of it. A small block holds at most the class
   * of that (a thread heap's classes hold more than hak_good_size from 1
   * to 4 KiB). */
  size_t request = align > HAK_ALIGN ? hak_aligned_request(size, align) : size, most;
  if (request <= HAK_SMALL_MAX) {
    size_t own = hak_bin_size(hak_bin_of(request)), shared = hak_shared_block_size(request);
    most = usable % HAK_SHARED_LINE == 0 && shared > own ? shared : own;
  } else {
    most = hak_good_size(request);
  }
  if (size > usable || (usable / 2 > size && (most == 0 || usable > most)))
    hak_fatal("%s of %p with size %zu, but its block holds %zu bytes", call, p, size, usable);
}
#else
static inline void check_sized_free(const char *call, const void *p, size_t align, size_t size) {
  (void)call, (void)p, (void)align, (void)size;
}
#endif

void hak_free_sized(void *p, size_t size) {
#if HAKMEM_SECURE
  hak_secure_free_sized(p, size);
#else
  check_sized_free("free_sized", p, HAK_ALIGN, size);
  hak_free(p);
#endif
}

void hak_free_aligned_sized(void *p, size_t align, size_t size) {
#if HAKMEM_SECURE
  (void)align;   /* (aligned_alloc's blocks are malloc's family) */
  hak_secure_free_sized(p, size);
#else
  check_sized_free("free_aligned_sized", p, align, size);
  hak_free(p);
#endif
}

HAK_DEFINE_EXPORTS(HAK_EXPORTS_FREE)
HAK_DEFINE_WEAK_EXPORTS(HAK_EXPORTS_DELETE)
