/* Process start-up, fork and exit.
 *
 * Initialisation runs on the first allocation (which may come from another
 * library's constructor, before ours), the first registration of a fork
 * handler (below), or our constructor, whichever is first. Its core steps
 * call nothing that allocates; the registrations that might (pthread key,
 * atfork handlers) come after the allocator is ready, so a malloc they make
 * is served normally instead of recursing. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <sys/auxv.h>
#include "internal.h"
#include "exports.h"

_Atomic int hak_init_state;

/* ------------------------------------------------------------ fork
 *
 * fork() in a multi-threaded process: hold every allocator lock across it,
 * so the child never inherits a lock held by a thread that does not exist
 * there. Taken in the order the allocator nests them: huge blocks' resizes
 * (huge.c), report, shared heap, heaps, reclaim, arenas, huge cache and
 * giant list.
 *
 * Two other locks order against ours:
 * - stdio's list lock, which glibc's fork takes itself, but only after the
 *   atfork prepare handlers. A thread in fflush(NULL) holds it while it
 *   waits for a FILE whose owner is in getline -> realloc, which may wait
 *   for one of our locks: taken after ours, that is a cycle. So the prepare
 *   handler takes the list lock first (it is recursive: glibc's own take in
 *   fork is then a count). The parent gives back our count; in the child,
 *   glibc resets the lock (done again here: harmless if it did). Without
 *   those glibc symbols (another C library) the step is skipped.
 * - any lock the interrupted code holds, when fork() is called from a signal
 *   handler. A single-threaded process takes no lock at all (as glibc's
 *   malloc does): no other thread can be inside the allocator, and the child
 *   is an exact copy of the interrupted parent, whose locks are released by
 *   the interrupted code itself if the handler returns. Nor does a thread
 *   that holds an allocator lock itself (hak_locks_held): the signal
 *   interrupted it inside the allocator, and waiting would never end. That
 *   matters even for programs that never start a thread, once hakmem's own
 *   purger runs (purge.c). Its child inherits the interrupted code's locks
 *   (as the single-threaded one does) and any the purger held at that
 *   instant: such a child should only exec or _exit, as POSIX asks of a
 *   child forked from a signal handler anyway. */
extern void _IO_list_lock(void) __attribute__((weak));
extern void _IO_list_unlock(void) __attribute__((weak));
extern void _IO_list_resetlock(void) __attribute__((weak));
/* Whether this thread's fork_prepare took the locks: the parent and child
 * handlers of the same fork must agree with it. Per thread, since threads
 * may fork concurrently; the child inherits the forking thread's copy. */
static __thread bool fork_locked;

__thread unsigned hak_locks_held;

static void fork_prepare(void) {
  fork_locked = !hak_single_threaded() && hak_locks_held == 0;
  if (!fork_locked) return;
  if (_IO_list_lock) _IO_list_lock();
  hak_huge_resize_fork_prepare();
  hak_stats_fork_prepare();
  hak_heaps_fork_prepare();
  hak_reclaim_fork_prepare();
  hak_segments_fork_prepare();
  hak_huge_fork_prepare();
}
static void fork_parent(void) {
  if (!fork_locked) return;
  hak_huge_fork_parent();
  hak_segments_fork_parent();
  hak_reclaim_fork_parent();
  hak_heaps_fork_parent();
  hak_stats_fork_parent();
  hak_huge_resize_fork_parent();
  if (_IO_list_unlock) _IO_list_unlock();
}
static void fork_child(void) {
  if (fork_locked) {
    hak_huge_fork_child();
    hak_segments_fork_child();
    hak_reclaim_fork_child();
    hak_heaps_fork_child();
    hak_stats_fork_child();
    hak_huge_resize_fork_child();
    if (_IO_list_resetlock) _IO_list_resetlock();
  }
  /* After the locks: the child has no purger thread (yet), and marking
   * its thread as the process's main one (pthread_setspecific) may
   * allocate, which waited on a lock still held when it came first. */
  hak_purger_fork_child();
#if HAKMEM_SECURE
  hak_secure_fork_child();
#endif
}

/* The order of the handlers. glibc runs the prepare handlers in the
 * reverse order of their registration, the parent and child ones in that
 * order. hakmem's must run after every other prepare handler: one may take
 * a lock that its library's threads hold while they allocate, and wait for
 * it while our prepare handler holds the allocator's locks, which those
 * threads wait for. And before every other parent and child handler, which
 * may allocate. So ours must be registered first, though a library's
 * constructor may register its own before hakmem starts (before the first
 * allocation: the program's own libraries, when hakmem is preloaded).
 * pthread_atfork is a stub glibc links into each object that calls it,
 * which calls __register_atfork: hakmem defines that name too (exports.h),
 * so the first registration of any library starts hakmem, whose handlers go
 * to glibc's __register_atfork first. (glibc's own malloc takes its locks
 * in fork itself, after every handler.) */
typedef int register_atfork_fn(void (*)(void), void (*)(void), void (*)(void), void *);
#define REGISTER_UNKNOWN ((register_atfork_fn *)1)   /* not looked up yet */
static _Atomic(register_atfork_fn *) next_register_atfork = REGISTER_UNKNOWN;
static _Atomic bool fork_handlers_registered;
/* This thread is starting hakmem (hak_process_init, up to the end of
 * fork_handlers_register): a registration that reaches hakmem's
 * __register_atfork from inside that (another copy of hakmem preloaded
 * too, whose registration goes on to ours) must not wait for it. */
static __thread bool starting_here;

/* From hak_process_init, once, after "ready" (a lookup may allocate). */
static void fork_handlers_register(void) {
  int err = pthread_atfork(fork_prepare, fork_parent, fork_child);
  atomic_store_explicit(&fork_handlers_registered, true, memory_order_release);
  /* Without the handlers, a child forked while another thread holds an
   * allocator lock inherits it held: the child may deadlock. Nothing else
   * changes; say so once. */
  if (err != 0)
    hak_message("hakmem: warning: pthread_atfork failed (error %d): a child forked while other threads "
                "allocate may deadlock\n", err);
}

/* __register_atfork: hakmem's registration goes on to glibc's at once;
 * another's after hakmem's. With no such function after hakmem's (a
 * static program that links no fork, so not glibc's either; another C
 * library's pthread_atfork does not come here), no fork runs handlers:
 * nothing to do. */
__attribute__((unused)) static int hak_register_atfork(void (*prepare)(void), void (*parent)(void),
                                                       void (*child)(void), void *dso) {
  if (prepare != fork_prepare && !starting_here) {
    hak_process_init();
    /* (Another thread is starting hakmem. Rarely so: another object's
     * registration comes here only where hakmem precedes the C library,
     * preloaded or linked, and hakmem then starts before a second thread,
     * whose creation allocates.) */
    while (!atomic_load_explicit(&fork_handlers_registered, memory_order_acquire)) sched_yield();
  }
  register_atfork_fn *next = atomic_load_explicit(&next_register_atfork, memory_order_acquire);
  if (next == REGISTER_UNKNOWN) {
    next = (register_atfork_fn *)dlsym(RTLD_NEXT, "__register_atfork");
    atomic_store_explicit(&next_register_atfork, next, memory_order_release);
  }
  return next != NULL ? next(prepare, parent, child, dso) : 0;
}

void hak_process_init(void) {
  if (hak_likely(atomic_load_explicit(&hak_init_state, memory_order_acquire) == 2)) return;
  int expected = 0;
  if (!atomic_compare_exchange_strong(&hak_init_state, &expected, 1)) {
    while (atomic_load_explicit(&hak_init_state, memory_order_acquire) != 2) sched_yield();
    return;
  }
  starting_here = true;
  hak_options_init();
  /* Built for 4 KiB OS pages (HAK_OS_PAGE): on a kernel with larger ones
   * (arm64 or ppc64 with 16 or 64 KiB), valloc's alignment, purges and
   * guard pages would be wrong. Said once at start; getauxval does not
   * allocate. */
  unsigned long os_page = getauxval(AT_PAGESZ);
  if (os_page != 0 && os_page != HAK_OS_PAGE)
    hak_message("hakmem: warning: the OS page is %lu bytes, hakmem is built for %d: not supported\n", os_page,
                HAK_OS_PAGE);
  bool tracked = hak_tracking_init();   /* valgrind: every call on the generic paths (tracking.h) */
  hak_owner_counted = hak_option(HAK_OPT_STATS) != HAK_STATS_OFF || tracked ? HAK_OWNER_COUNTED : 0;
  hak_arenas_init();
  hak_heap_direct_init();
  hak_foreign_init();
  hak_heap_key_create();   /* before "ready": every heap made after must register for thread exit */
#if HAKMEM_SECURE
  hak_secure_keys_init();   /* before "ready": the fast paths read them unchecked */
#endif
  atomic_store_explicit(&hak_init_state, 2, memory_order_release);
  hak_purger_init();   /* after "ready": its pthread_setspecific may allocate */
  fork_handlers_register();
  starting_here = false;
  hak_verbose("hakmem: ready (%u arenas, purge delay %ld ms)\n",
              hak_arena_count(), hak_option(HAK_OPT_PURGE_DELAY));
}

__attribute__((constructor(101))) static void hak_init_on_load(void) { hak_process_init(); }

__attribute__((destructor)) static void hak_done_on_exit(void) {
  hak_assert(hak_arenas_are_valid());
  hak_stats_at_exit();
}

int hak_version(void) { return HAKMEM_VERSION; }

HAK_DEFINE_WEAK_EXPORTS(HAK_EXPORTS_INIT)
