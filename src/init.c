/* Process start-up, fork and exit.
 *
 * Initialisation runs on the first allocation (which may come from another
 * library's constructor, before ours) or from our constructor, whichever is
 * first. Its core steps call nothing that allocates; the registrations that
 * might (pthread key, atfork handlers) come after the allocator is ready, so
 * a malloc they make is served normally instead of recursing. */
#include <sched.h>
#include "internal.h"

_Atomic int hak_init_state;
uintptr_t hak_tag_secret;

/* fork(): hold every allocator lock across it, so the child never inherits
 * a lock held by a thread that does not exist there. Taken in the order the
 * allocator nests them: report, heaps, exited counters, reclaim, arenas,
 * huge cache and giant list. */
static void fork_prepare(void) {
  hak_stats_fork_prepare();
  hak_heaps_fork_prepare();
  hak_stats_fork_exited_prepare();
  hak_reclaim_fork_prepare();
  hak_segments_fork_prepare();
  hak_huge_fork_prepare();
}
static void fork_parent(void) {
  hak_huge_fork_parent();
  hak_segments_fork_parent();
  hak_reclaim_fork_parent();
  hak_stats_fork_exited_parent();
  hak_heaps_fork_parent();
  hak_stats_fork_parent();
}
static void fork_child(void) {
  hak_purger_fork_child();
  hak_huge_fork_child();
  hak_segments_fork_child();
  hak_reclaim_fork_child();
  hak_heaps_fork_child();
  hak_stats_fork_child();
}

void hak_process_init(void) {
  if (hak_likely(atomic_load_explicit(&hak_init_state, memory_order_acquire) == 2)) return;
  int expected = 0;
  if (!atomic_compare_exchange_strong(&hak_init_state, &expected, 1)) {
    while (atomic_load_explicit(&hak_init_state, memory_order_acquire) != 2) sched_yield();
    return;
  }
  hak_options_init();
  hak_owner_counted = hak_option(HAK_OPT_STATS) != HAK_STATS_OFF ? HAK_OWNER_COUNTED : 0;
  hak_tag_secret = (uintptr_t)hak_random_u64() | 1;   /* odd: a tag is never 0 */
  hak_arenas_init();
  hak_heap_direct_init();
  hak_heap_key_create();   /* before "ready": every heap made after must register for thread exit */
  atomic_store_explicit(&hak_init_state, 2, memory_order_release);

  pthread_atfork(fork_prepare, fork_parent, fork_child);
  hak_verbose("hakmem: ready (%u arenas, purge delay %ld ms)\n",
              hak_arena_count(), hak_option(HAK_OPT_PURGE_DELAY));
}

__attribute__((constructor(101))) static void hak_init_on_load(void) { hak_process_init(); }

__attribute__((destructor)) static void hak_done_on_exit(void) { hak_stats_at_exit(); }
