/* Thread heaps: one per thread, created on its first allocation, given up
 * when the thread exits (its pages abandoned for other threads to adopt),
 * and recycled for the next thread. */
#include <errno.h>
#include <string.h>
#include "internal.h"

/* Every thread starts on the empty heap: its direct table points at the
 * empty page, so the first malloc falls into the slow path, which creates
 * the thread's real heap. No branch on "initialised?" in the fast path. */
hak_heap_t hak_heap_empty = { .direct = { [0 ... HAK_DIRECT - 1] = &hak_page_empty } };
__thread hak_heap_t *hak_tls_heap = &hak_heap_empty;

static pthread_mutex_t heaps_lock = PTHREAD_MUTEX_INITIALIZER;
static hak_heap_t *heaps_live;            /* every thread's heap, and the shared heap (heaps_lock) */
static hak_heap_t *heaps_spare;           /* heaps of exited threads, for reuse */
static pthread_key_t heap_key;            /* its destructor runs at thread exit */
static _Atomic(bool) heap_key_ready;

/* The shared heap: one heap, under a lock, never given up, for the
 * threads that have no heap of their own.
 *
 * A thread's first small blocks come from it (HAK_YOUNG_ALLOCS of them): a
 * heap of its own costs a thread its heap struct and a page per size class
 * it touches, which only pays once it allocates more than a few blocks. So
 * a thousand threads that each hold a few blocks share pages, as they would
 * under glibc, and a short-lived thread neither builds nor gives up a heap.
 * Its frees take the cross-thread way (the pages are the shared heap's),
 * and the shared heap gathers them when it allocates again. A medium or
 * larger request makes the thread's own heap at once: blocks of up to
 * 1 MiB left in the shared heap's pages by a thread that moved on would
 * keep whole spans from their arena until then. (The `large` workload,
 * single-threaded: 1.37x the time and +17 MiB of peak RSS when its first
 * 64 blocks of 64 KiB-32 MiB came from the shared heap.)
 *
 * Its small blocks are whole cache lines (hak_shared_request): blocks of
 * two threads side by side on one line would make each thread's writes
 * take the line from the other (false sharing, which a heap per thread
 * exists to avoid). In the lab's `falseshare` (two threads each writing an
 * 8-byte block of their own) that line cost hakmem 1.16x mimalloc 3's
 * time; whole lines cost 1,000 threads holding 10 blocks of 16 B - 3 KiB
 * about 20 KiB more in all (fewer classes in use offset the rounding).
 * From 1 to 4 KiB its classes step by one line (hak_shared_bin_of), where
 * a thread heap's are 128 or 256 bytes apart: those 1,000 threads then
 * take 25,540 KiB instead of 26,040 (glibc: 25,700), and the one page per
 * class that the extra classes cost is paid once, not by every thread.
 *
 * A thread may also still allocate after its heap was given up at exit: in
 * the destructor of a pthread key that comes after ours in the same round,
 * or in a later round (POSIX runs them again while some destructor sets a
 * key, up to PTHREAD_DESTRUCTOR_ITERATIONS times), or in libc's own
 * clean-up. A heap made for it then might never be given up, since no round
 * may be left to run our destructor again. So from then on it uses the
 * shared heap too. (Left out: a thread whose first heap is made in the
 * last round, after our key, still unset, was passed over. Its heap is
 * registered too late, and kept.)
 *
 * A thread that so far allocated only from the shared heap has no heap to
 * give up, yet its key holds the shared heap (heap_key_set at its first
 * allocation), so that our destructor runs at its exit all the same and
 * marks it given up. Else libc's clean-up after every destructor
 * (__libc_thread_freeres, freeing the thread's dlerror state) would make it
 * a heap in a free that needs one (secure quarantine, counted calls): one
 * heap kept per such thread, 1,500 heaps after 3,000 threads. */
static __thread unsigned thread_shared_allocs;   /* allocations made on the shared heap, up to HAK_YOUNG_ALLOCS */
static __thread bool thread_heap_given_up;
static pthread_mutex_t shared_heap_lock = PTHREAD_MUTEX_INITIALIZER;   /* before heaps_lock */
/* Page-aligned like every heap: a page's owner word keeps flags in the low bits. */
static hak_heap_t shared_heap __attribute__((aligned(HAK_OS_PAGE)));
static bool shared_heap_ready;            /* (shared_heap_lock) */

static void heap_key_destructor(void *heap) {
  thread_heap_given_up = true;
  if (heap != &shared_heap) hak_heap_thread_done(heap);
}

/* (May allocate, for a key past glibc's first 32: not under a heap lock.) */
static void heap_key_set(hak_heap_t *heap) {
  if (atomic_load_explicit(&heap_key_ready, memory_order_acquire)) pthread_setspecific(heap_key, heap);
}

/* Without the key, thread exit cannot give up a heap: its pages keep their
 * memory (blocks freed into them still serve nobody) and the heap is not
 * reused. The allocator still works; say so once. */
void hak_heap_key_create(void) {
  int err = pthread_key_create(&heap_key, heap_key_destructor);
  if (err != 0) {
    hak_message("hakmem: warning: pthread_key_create failed (error %d): threads that exit will keep "
                "their heaps and the memory of their pages\n", err);
    return;
  }
  atomic_store_explicit(&heap_key_ready, true, memory_order_release);
}

/* The direct entries of each class: [direct_first[bin], direct_last[bin]],
 * empty (first > last) for classes above HAK_SMALL_MAX and the shared
 * heap's own (which it serves on its slow path only). */
static uint8_t direct_first[HAK_BINS], direct_last[HAK_BINS];

void hak_heap_direct_init(void) {
  for (size_t bin = 1; bin < HAK_BINS; bin++) {
    size_t size = hak_bin_size(bin);
    direct_first[bin] = 1;
    if (size > HAK_SMALL_MAX || bin >= HAK_CLASS_BINS) continue;
    direct_first[bin] = (uint8_t)(bin == 1 ? 0 : hak_direct_index(hak_bin_size(bin - 1) + 1));
    direct_last[bin] = (uint8_t)hak_direct_index(size);
  }
}

void hak_heap_update_direct(hak_heap_t *heap, size_t bin) {
  if (hak_owner_counted) return;   /* counting: every malloc goes generic */
  hak_page_t *page = heap->queues[bin].first;
  if (page == NULL) page = &hak_page_empty;
#if !HAKMEM_SECURE
  if (heap->keeps_foreign && bin < HAK_FOREIGN_BINS && heap->foreign[bin].alone) page = &heap->foreign[bin];
#endif
  for (size_t i = direct_first[bin]; i <= direct_last[bin]; i++) heap->direct[i] = page;
}

static void heaps_link(hak_heap_t *heap) {
  heap->list_prev = NULL;
  heap->list_next = heaps_live;
  if (heaps_live) heaps_live->list_prev = heap;
  heaps_live = heap;
}

static void heaps_unlink(hak_heap_t *heap) {
  if (heap->list_prev) heap->list_prev->list_next = heap->list_next; else heaps_live = heap->list_next;
  if (heap->list_next) heap->list_next->list_prev = heap->list_prev;
}

/* `zeroed`: the heap's memory is all zero already (fresh from the OS, or
 * the shared heap's static storage), so clearing it would only make its
 * untouched pages resident: a thread that uses a few classes touches the
 * entries of those, not all of its 7 KiB. A recycled heap is cleared. */
static void heap_setup(hak_heap_t *heap, hak_arena_t *arena, bool zeroed) {
  if (!zeroed) memset(heap, 0, sizeof *heap);
  for (size_t i = 0; i < HAK_DIRECT; i++) heap->direct[i] = &hak_page_empty;
  heap->arena = arena;
  heap->heartbeat = HAK_HEARTBEAT;
  hak_lock(&heaps_lock);
  heaps_link(heap);
  hak_unlock(&heaps_lock);
}

static hak_heap_t *shared_heap_acquire(void) {
  hak_lock(&shared_heap_lock);
  if (!shared_heap_ready) {
    heap_setup(&shared_heap, hak_arena_first(), true);
    shared_heap.shared = true;
    shared_heap_ready = true;
  }
  return &shared_heap;
}

hak_heap_t *hak_heap_thread_init(void) {
  hak_process_init();
  if (hak_unlikely(thread_heap_given_up)) return shared_heap_acquire();
  hak_lock(&heaps_lock);
  hak_heap_t *heap = heaps_spare;
  if (heap) heaps_spare = heap->list_next;
  hak_unlock(&heaps_lock);
  bool zeroed = heap == NULL;
  if (heap == NULL) {
    /* Heaps come straight from the OS: malloc cannot be used to make malloc.
     * errno stays as it was even if none can be made: a free asking for a
     * heap (to count a call, or to quarantine a block) keeps it, and an
     * allocation that fails says ENOMEM itself. */
    int saved = errno;
    heap = hak_os_alloc_or_short(hak_align_up(sizeof(hak_heap_t), HAK_OS_PAGE), HAK_OS_PAGE);
    errno = saved;
    if (heap == NULL) return NULL;
  }
  heap_setup(heap, hak_arena_for_new_heap(), zeroed);
  hak_tls_heap = heap;   /* before setspecific, which may itself allocate */
  heap_key_set(heap);
  return heap;
}

/* (Not under a tool, tracking.h: a tool sees a freed block closed once it
 * is on its owner's lists, and a cross-thread free reaches them only when
 * the owner gathers it. Under a tool every thread gets its heap at once.) */
hak_heap_t *hak_heap_for_allocation(size_t *size) {
  bool small = *size <= HAK_SMALL_MAX && !hak_tracking;
  hak_heap_t *heap;
  if (small && thread_shared_allocs < HAK_YOUNG_ALLOCS) {
    hak_process_init();
    if (thread_shared_allocs++ == 0) heap_key_set(&shared_heap);   /* our destructor runs at its exit */
    heap = shared_heap_acquire();
  } else {
    heap = hak_heap_thread_init();   /* the shared heap too, once the thread's was given up */
  }
  if (small && heap == &shared_heap) *size = hak_shared_request(*size);
  return heap;
}

void hak_heap_release(hak_heap_t *heap) {
  if (heap == &shared_heap) hak_unlock(&shared_heap_lock);
}

hak_heap_t *hak_heap_shared(void) {
  hak_process_init();
  return shared_heap_acquire();
}

static void queue_remove(hak_heap_t *heap, hak_page_t *page);   /* below: page queues */

/* Thread exit: abandon every page (empty ones go back to the arena, the
 * others to their reclaim queues), keep the counters, recycle the heap. */
void hak_heap_thread_done(hak_heap_t *heap) {
  if (heap == NULL || heap == &hak_heap_empty) return;
#if HAKMEM_SECURE
  hak_quarantine_hand_over(heap);   /* its blocks wait on in the shared heap's quarantine */
#endif
  hak_heap_flush_recent(heap, 0);   /* its blocks back in their pages, before those are abandoned */
  hak_heap_foreign_done(heap);
  if (hak_tls_heap == heap) hak_tls_heap = &hak_heap_empty;
  for (size_t bin = 1; bin < HAK_BINS; bin++) {
    hak_page_t *page;
    while ((page = heap->queues[bin].first) != NULL) {
      queue_remove(heap, page);
      hak_page_abandon_at_exit(page);
    }
  }
  hak_lock(&heaps_lock);   /* merge and unlink at once: a report counts it once */
  hak_stats_merge_exited(heap);
  heaps_unlink(heap);
  heap->list_next = heaps_spare;
  heaps_spare = heap;
  hak_unlock(&heaps_lock);
}

/* ------------------------------------------------------------ page queues */

/* The queues and the direct table that mirrors their heads change together,
 * here only; so does page->alone, of each page whose links they change. */

static void queue_note_alone(hak_page_t *page) {
  if (page != NULL) page->alone = page->next == NULL && page->prev == NULL && page->slice_count == 1;
}

static void queue_push_front(hak_heap_t *heap, hak_page_t *page) {
  hak_page_queue_t *q = &heap->queues[page->bin];
  page->prev = NULL;
  page->next = q->first;
  if (q->first) q->first->prev = page;
  else q->last = page, heap->queued_bins[page->bin / 64] |= (uint64_t)1 << (page->bin % 64);
  q->first = page;
  queue_note_alone(page);
  queue_note_alone(page->next);
  hak_heap_update_direct(heap, page->bin);
}

void hak_heap_queue_push_back(hak_heap_t *heap, hak_page_t *page) {
  hak_page_queue_t *q = &heap->queues[page->bin];
  if (q->first == NULL) { queue_push_front(heap, page); return; }
  page->next = NULL;
  page->prev = q->last;
  q->last->next = page;
  q->last = page;
  queue_note_alone(page);
  queue_note_alone(page->prev);
}

/* The first page of a queue of two or more goes to its back (no page's
 * `alone` changes). */
static void queue_first_to_back(hak_heap_t *heap, hak_page_queue_t *q) {
  hak_page_t *page = q->first;
  q->first = page->next;
  q->first->prev = NULL;
  page->next = NULL;
  page->prev = q->last;
  q->last->next = page;
  q->last = page;
  hak_heap_update_direct(heap, page->bin);
}

static void queue_remove(hak_heap_t *heap, hak_page_t *page) {
  hak_page_queue_t *q = &heap->queues[page->bin];
  bool was_first = q->first == page;
  if (page->prev) page->prev->next = page->next; else q->first = page->next;
  if (page->next) page->next->prev = page->prev; else q->last = page->prev;
  queue_note_alone(page->prev);
  queue_note_alone(page->next);
  page->next = page->prev = NULL;
  page->alone = false;   /* out of every queue */
  if (q->first == NULL) heap->queued_bins[page->bin / 64] &= ~((uint64_t)1 << (page->bin % 64));
  if (was_first) hak_heap_update_direct(heap, page->bin);
}

/* ------------------------------------------------------------ finding pages */

/* A page of `bin` whose free list is not empty, owned by `heap`, first in
 * its queue. Slow path of malloc: own pages first, then pages others gave
 * up, then a fresh span. NULL when out of memory. */
hak_page_t *hak_heap_page_for_bin(hak_heap_t *heap, size_t bin) {
  hak_page_queue_t *q = &heap->queues[bin];
  bool shared = heap == &shared_heap;   /* its pages carve an OS page at a time (hak_page_extend) */
  hak_page_t *page = q->first;
  while (page != NULL) {
    hak_assert(page == q->first);   /* (those before it went to the back, or were abandoned) */
    hak_page_t *next = page->next;
    hak_page_gather_frees(page);
    if (page->free == NULL && page->capacity < page->reserved) hak_page_extend(page, shared);
    if (page->free != NULL) {
      if (page->kept) page->kept = false;   /* (its line is the one remote frees write) */
      return page;
    }
    if (!page->kept && !page->took_remote && next != NULL) {
      /* Full for the first time, no block of it freed by another thread
       * yet, and other pages to try: kept, at the back, as the blocks its
       * owner frees meanwhile go straight back into it (docs/design.md
       * §5.7). */
      page->kept = true;
      heap->kept_bins[bin / 64] |= (uint64_t)1 << (bin % 64);
      queue_first_to_back(heap, q);
    } else {
      /* Full again, alone, or freed into by other threads: abandon it, so
       * that whoever allocates next reuses what is freed into it. */
      queue_remove(heap, page);
      hak_page_abandon(page, heap, false);
    }
    page = next;
  }

  /* A published page always has room: a remote free put a block in it, or
   * its owner abandoned it with free blocks. The shared heap takes back only
   * pages it abandoned itself (in its own classes nobody else would): a
   * thread heap's page is carved, so resident, far past the few blocks
   * young threads take, and the shared heap, never given up, would keep it
   * (`respawn`, one thread a generation: 14 thread-heap pages of 1-4 KiB
   * blocks held 0.8 MiB resident for 0.17 MiB live, and peak RSS was 6.6
   * MiB, 6.0 without them). */
  if ((page = hak_reclaim_adopt(heap, bin, shared)) != NULL) {
    if (page->free == NULL && page->capacity == page->reserved)
      hak_fatal("internal error: adopted page %p has no free block", (void *)page);
    if (page->free == NULL) hak_page_extend(page, shared);
    queue_push_front(heap, page);
    return page;
  }

  /* A heap's first page of a class is often its only one, partly used, as
   * are the shared heap's: such a page stays out of huge-page stretches
   * (segment.c). So does a page of medium blocks, unless the program is
   * seen to write most of those it gets: a buffer sized for the worst
   * case may be touched in its first bytes only, and a huge page would
   * make all of it resident. */
  uint64_t *paged = &heap->paged_bins[bin / 64], bit = (uint64_t)1 << (bin % 64);
  bool medium = hak_bin_size(bin) > HAK_SMALL_MAX, sparse = shared || !(*paged & bit), resident;
  if (medium && !sparse) sparse = !hak_medium_use_is_dense();
  page = hak_span_alloc(heap->arena, hak_page_slices_for(bin), 1, HAK_SPAN_PAGE, sparse, &resident);
  if (page == NULL) return NULL;
  *paged |= bit;
  hak_page_init(heap, page, bin);
  hak_page_extend(page, shared);
  if (medium && !resident) hak_medium_use_probe(page);   /* its first block goes out now, plain */
  queue_push_front(heap, page);
  hak_page_stat_inc(&hak_page_stats[bin].pages_new);
  return page;
}

/* At the heartbeat, of the kept pages at the back of each queue (the
 * others wait until they are there), those other threads have freed into
 * are abandoned, published at once, as their owner would reach them late or
 * never (docs/design.md §5.7). */
void hak_heap_abandon_kept(hak_heap_t *heap) {
  for (size_t w = 0; w < sizeof heap->kept_bins / sizeof heap->kept_bins[0]; w++) {
    for (uint64_t bits = heap->kept_bins[w]; bits != 0; bits &= bits - 1) {
      size_t bin = w * 64 + (size_t)__builtin_ctzll(bits);
      hak_page_queue_t *q = &heap->queues[bin];
      for (hak_page_t *page = q->last, *prev; page != NULL && page->kept && page != q->first; page = prev) {
        prev = page->prev;
        if (hak_xlist_first(atomic_load_explicit(&page->xthread_free, memory_order_relaxed)) == NULL) continue;
        queue_remove(heap, page);
        hak_page_abandon(page, heap, false);
      }
      if (q->last == NULL || !q->last->kept) heap->kept_bins[w] &= ~((uint64_t)1 << (bin % 64));
    }
  }
}

/* Every IDLE_LOOK_EVERY heartbeats the owner looks at each class with
 * pages in its queue. A class whose first page's list head and use were
 * the same at IDLE_LOOKS looks in a row (its mark, `free + used`: a guess,
 * blind to frees into its other pages, and a steady free-then-malloc may
 * look the same each time) is taken as idle, and its pages whose blocks
 * other threads have all freed go back to the arena (but a page alone in
 * its queue, as a local free keeps it): their owner would gather those
 * frees only at its next malloc of the class, which may never come. A
 * thread busy with other classes held, for good, 19 MiB of 64-byte blocks
 * its consumers had freed (an attack helper's producers). A wrong guess
 * costs only a page made again: what goes is exactly the pages with
 * nothing live. Pages with blocks still live stay (the purger gives back
 * the whole OS pages inside their freed blocks, hak_page_purge_held):
 * published instead, other threads adopting them fragmented `respawn`
 * (peak RSS +11%). Not the shared heap's pages: its classes (young
 * threads' first blocks, one line apart) are each used now and then, by
 * whichever thread is young, and a page retired there was soon made again
 * (`respawn`: 55 retired, peak RSS +5%). (docs/design.md §5.7) */
#define IDLE_LOOKS 3        /* the first sets the mark, the other two find it unchanged */
#define IDLE_LOOK_EVERY 4   /* heartbeats (a look at every one cost larson-32k 0.5% more instructions) */

/* One look at the class whose queue starts with `page`. */
static void retire_idle_in(hak_heap_t *heap, hak_page_t *page) {
  uintptr_t mark = (uintptr_t)page->free + hak_page_used(page) + 1;   /* (never 0, a fresh page's) */
  if (page->beat_mark != mark) {
    page->beat_mark = mark;
    page->idle_looks = 1;
    return;
  }
  if (page->idle_looks < IDLE_LOOKS && ++page->idle_looks < IDLE_LOOKS) return;   /* (saturates) */
  for (hak_page_t *next; page != NULL; page = next) {
    next = page->next;
    uintptr_t xfree = atomic_load_explicit(&page->xthread_free, memory_order_relaxed);
    if (hak_xlist_first(xfree) == NULL || hak_xlist_count(xfree) != hak_page_used(page)) continue;
    hak_page_gather_frees(page);
    if (hak_page_used(page) == 0 && !hak_page_keep_when_empty(page)) hak_heap_retire_page(heap, page);
  }
}

void hak_heap_retire_idle(hak_heap_t *heap) {
  if (heap->shared || ++heap->beats % IDLE_LOOK_EVERY != 0) return;
  for (size_t w = 0; w < sizeof heap->queued_bins / sizeof heap->queued_bins[0]; w++)
    for (uint64_t bits = heap->queued_bins[w]; bits != 0; bits &= bits - 1)
      retire_idle_in(heap, heap->queues[w * 64 + (size_t)__builtin_ctzll(bits)].first);
}

/* Free every page of the heap that holds no live block (hak_collect). */
void hak_heap_free_empty_pages(hak_heap_t *heap) {
  for (size_t bin = 1; bin < HAK_BINS; bin++) {
    hak_page_t *page = heap->queues[bin].first;
    while (page != NULL) {
      hak_page_t *next = page->next;
      hak_page_gather_frees(page);
      if (hak_page_used(page) == 0) hak_heap_retire_page(heap, page);
      page = next;
    }
  }
}

/* All blocks of an owned page are free again, and it is not one to keep
 * (hak_page_keep_when_empty): return it to the arena. */
void hak_heap_retire_page(hak_heap_t *heap, hak_page_t *page) {
  hak_assert(hak_page_used(page) == 0 && hak_page_is_valid(page));
  queue_remove(heap, page);
  hak_page_free_span(page);
}

void hak_heaps_visit(hak_heap_visit_fn *fn, void *arg) {
  hak_lock(&heaps_lock);
  fn(NULL, arg);
  for (hak_heap_t *h = heaps_live; h != NULL; h = h->list_next) fn(h, arg);
  hak_unlock(&heaps_lock);
}

void hak_heaps_fork_prepare(void) {
  pthread_mutex_lock(&shared_heap_lock);
  pthread_mutex_lock(&heaps_lock);
}
void hak_heaps_fork_parent(void) {
  pthread_mutex_unlock(&heaps_lock);
  pthread_mutex_unlock(&shared_heap_lock);
}
/* In the child only the forking thread exists. The other threads' heaps
 * stay as they were (a page could be mid-update): their pages keep working
 * for frees (which go the cross-thread way) and are never allocated from. */
void hak_heaps_fork_child(void) {
  pthread_mutex_init(&heaps_lock, NULL);
  pthread_mutex_init(&shared_heap_lock, NULL);
}

