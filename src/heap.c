/* Thread heaps: one per thread, created on its first allocation, given up
 * when the thread exits (its pages abandoned for other threads to adopt),
 * and recycled for the next thread. */
#include <string.h>
#include "internal.h"

/* Every thread starts on the empty heap: its direct table points at the
 * empty page, so the first malloc falls into the slow path, which creates
 * the thread's real heap. No branch on "initialised?" in the fast path. */
hak_heap_t hak_heap_empty = { .direct = { [0 ... HAK_DIRECT - 1] = &hak_page_empty } };
__thread hak_heap_t *hak_tls_heap = &hak_heap_empty;

static pthread_mutex_t heaps_lock = PTHREAD_MUTEX_INITIALIZER;
static hak_heap_t *heaps_live;            /* every thread's heap (heaps_lock) */
static hak_heap_t *heaps_spare;           /* heaps of exited threads, for reuse */
static pthread_key_t heap_key;            /* its destructor runs at thread exit */
static _Atomic(bool) heap_key_ready;

static void heap_key_destructor(void *heap) { hak_heap_thread_done(heap); }

void hak_heap_key_create(void) {
  if (pthread_key_create(&heap_key, heap_key_destructor) == 0)
    atomic_store_explicit(&heap_key_ready, true, memory_order_release);
}

/* The direct entries of each class: [direct_first[bin], direct_last[bin]],
 * empty (first > last) for classes above HAK_MID_MAX. */
static uint8_t direct_first[HAK_BINS], direct_last[HAK_BINS];

void hak_heap_direct_init(void) {
  for (size_t bin = 1; bin < HAK_BINS; bin++) {
    size_t size = hak_bin_size(bin);
    direct_first[bin] = 1;
    if (size > HAK_MID_MAX) continue;
    direct_first[bin] = (uint8_t)(bin == 1 ? 0 : hak_direct_index(hak_bin_size(bin - 1) + 1));
    direct_last[bin] = (uint8_t)hak_direct_index(size);
  }
}

void hak_heap_update_direct(hak_heap_t *heap, size_t bin) {
  if (hak_owner_counted) return;   /* counting: every malloc goes generic */
  hak_page_t *page = heap->queues[bin].first;
  if (page == NULL) page = &hak_page_empty;
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

hak_heap_t *hak_heap_thread_init(void) {
  hak_process_init();
  pthread_mutex_lock(&heaps_lock);
  hak_heap_t *heap = heaps_spare;
  if (heap) heaps_spare = heap->list_next;
  pthread_mutex_unlock(&heaps_lock);
  if (heap == NULL) {
    /* Heaps come straight from the OS: malloc cannot be used to make malloc. */
    heap = hak_os_alloc_aligned(hak_align_up(sizeof(hak_heap_t), HAK_OS_PAGE), HAK_OS_PAGE);
    if (heap == NULL) return NULL;
  }
  memset(heap, 0, sizeof *heap);
  for (size_t i = 0; i < HAK_DIRECT; i++) heap->direct[i] = &hak_page_empty;
  heap->arena = hak_arena_for_new_heap();
  pthread_mutex_lock(&heaps_lock);
  heaps_link(heap);
  pthread_mutex_unlock(&heaps_lock);
  hak_tls_heap = heap;   /* before setspecific, which may itself allocate */
  if (atomic_load_explicit(&heap_key_ready, memory_order_acquire)) pthread_setspecific(heap_key, heap);
  return heap;
}

/* Thread exit: give up every page (empty ones go back to the arena, the
 * others to their reclaim queues), keep the counters, recycle the heap. */
void hak_heap_thread_done(hak_heap_t *heap) {
  if (heap == NULL || heap == &hak_heap_empty) return;
  if (hak_tls_heap == heap) hak_tls_heap = &hak_heap_empty;
  for (size_t bin = 1; bin < HAK_BINS; bin++) {
    hak_page_t *page;
    while ((page = heap->queues[bin].first) != NULL) hak_page_give_up(heap, page);
  }
  pthread_mutex_lock(&heaps_lock);   /* merge and unlink at once: a report counts it once */
  hak_stats_merge_exited(heap);
  heaps_unlink(heap);
  heap->list_next = heaps_spare;
  heaps_spare = heap;
  pthread_mutex_unlock(&heaps_lock);
}

void hak_heaps_visit(hak_heap_visit_fn *fn, void *arg) {
  pthread_mutex_lock(&heaps_lock);
  for (hak_heap_t *h = heaps_live; h != NULL; h = h->list_next) fn(h, arg);
  pthread_mutex_unlock(&heaps_lock);
}

void hak_heaps_fork_prepare(void) { pthread_mutex_lock(&heaps_lock); }
void hak_heaps_fork_parent(void) { pthread_mutex_unlock(&heaps_lock); }
/* In the child only the forking thread exists. The other threads' heaps
 * stay as they were (a page could be mid-update): their pages keep working
 * for frees (which go the cross-thread way) and are never allocated from. */
void hak_heaps_fork_child(void) { pthread_mutex_init(&heaps_lock, NULL); }
