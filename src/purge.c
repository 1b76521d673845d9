/* Memory return: when freed memory goes back to the OS, and who returns it.
 *
 * One clock, hak_clock_ms (monotonic milliseconds), times all of it:
 * - a free span of an arena is purged once it has been free for the arena's
 *   delay. The delay adapts to reuse (as jemalloc's and tcmalloc's decay
 *   do, more simply): it starts at HAKMEM_PURGE_DELAY; when the arena takes
 *   back slices it purged less than HAK_PURGE_CALM ago, the purge came too
 *   early and the delay doubles, up to HAK_PURGE_DELAY_MAX; after
 *   HAK_PURGE_CALM without such a refault it falls back to the option's.
 *   So memory that is reused soon stays, and memory left unused goes within
 *   HAK_PURGE_DELAY_MAX however the program behaved before;
 * - the huge-block cache is purged once unused for HAKMEM_PURGE_DELAY
 *   (huge.c);
 * - published pages are swept (the empty ones freed, see hak_reclaim_sweep)
 *   at most once per HAKMEM_PURGE_DELAY, when a page was published or a
 *   block freed into a published page since the last sweep;
 * - blocks freed into pages their owners hold have their interiors purged
 *   (hak_page_purge_held) at most once per HAK_PURGE_CALM, when such a free
 *   happened since: a living owner that stopped allocating never gathers
 *   them. (What it cannot reach: the small blocks themselves, and the one
 *   empty page per class an owner keeps; taking those needs the owner.)
 *
 * Who: a background purger thread (HAKMEM_BACKGROUND=1, the default), so
 * that memory goes back on time even if the program never calls the
 * allocator again (docs/design.md §7a). It
 * - starts lazily, from an allocation's slow path with no lock held, once
 *   hakmem holds HAK_PURGER_START_BYTES or has memory to return, in a
 *   program that started a thread of its own: a small program, or one that
 *   never started a thread, never has it, and a program that counts its
 *   threads at start-up does not see it. Never from free: glibc frees
 *   thread control blocks under the lock its pthread_create takes;
 * - sleeps on a futex while nothing is pending (the note that makes work
 *   pending wakes it, once per transition), and until the earliest deadline
 *   otherwise: no polling when idle;
 * - has every signal blocked and a small stack, and takes only the locks a
 *   slow path takes (arena, huge cache, reclaim queues): the fast paths
 *   never see it;
 * - does not exist in a forked child: the child creates its own the same
 *   lazy way;
 * - ends when the main thread leaves by pthread_exit (purger_retire): glibc
 *   ends such a process, with exit(0), when its last thread ends, and a
 *   purger that never ended kept it alive for ever (with every signal
 *   blocked, only SIGKILL stopped it). So it starts only once the main
 *   thread is marked to retire it (main_thread_known).
 * Without it (HAKMEM_BACKGROUND=0, under memcheck, or pthread_create
 * failed), malloc's slow path does the same work at the heartbeat
 * (internal.h), as a fallback. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "internal.h"

#define HAK_PURGE_CALM          1000                 /* ms without a refault before the delay falls back */
#define HAK_PURGER_START_BYTES  ((int64_t)8 << 20)   /* committed memory that starts the purger */
#define HAK_PURGER_STACK        ((size_t)64 << 10)
#define HAK_SWEEP_RETRY         10                   /* ms: least wait before sweeping what was left */

_Atomic(bool) hak_work_pending;
_Atomic(bool) hak_sweep_news;

/* ------------------------------------------------------------ the delay */

static uint64_t option_delay(void) {
  long d = hak_option(HAK_OPT_PURGE_DELAY);
  return d > 0 ? (uint64_t)d : 0;
}

void hak_purge_clock_init(hak_purge_clock_t *c) {
  *c = (hak_purge_clock_t){ .delay = option_delay() };
}

/* When a span freed now is purged. Caller holds the arena lock. */
uint64_t hak_purge_deadline(hak_purge_clock_t *c, uint64_t now) {
  if (c->delay > option_delay() && now >= c->refault_at + HAK_PURGE_CALM) c->delay = option_delay();
  return now + c->delay;
}

/* The arena takes back slices it purged: if that was recent, the delay was
 * too short for how this program reuses memory. Caller holds the lock. */
void hak_purge_clock_refault(hak_purge_clock_t *c, uint64_t now) {
  uint64_t base = option_delay();
  /* Once per purge (the first refault after it), so the delay grows with
   * the number of purges that came too early, not with their size. */
  if (base == 0 || now >= c->purged_at + HAK_PURGE_CALM || c->refault_at >= c->purged_at) return;
  uint64_t delay = c->delay * 2;
  if (delay > HAK_PURGE_DELAY_MAX) delay = HAK_PURGE_DELAY_MAX;
  c->delay = delay > base ? delay : base;
  c->refault_at = now;
}

/* ------------------------------------------------------------ due work */

static _Atomic(uint64_t) swept_at;   /* ms: when the last sweep began */

void hak_note_sweep_news_slow(void) {
  atomic_store_explicit(&hak_sweep_news, true, memory_order_seq_cst);
  uint64_t at = atomic_load_explicit(&swept_at, memory_order_relaxed) + option_delay();
  uint64_t now = hak_clock_ms();
  hak_note_pending_work(at > now ? at : now);
}

/* Sweep the published pages if there is news and the last sweep is a
 * delay old. Returns when a sweep is due, or 0. */
static uint64_t sweep_due(hak_heap_t *heap, uint64_t now, bool wait) {
  long delay = hak_option(HAK_OPT_PURGE_DELAY);
  if (delay < 0 || !atomic_load_explicit(&hak_sweep_news, memory_order_relaxed)) return 0;
  uint64_t at = atomic_load_explicit(&swept_at, memory_order_relaxed) + (uint64_t)delay;
  if (now < at) return at;
  /* Cleared before the sweep looks: news during it is kept for the next. */
  atomic_store_explicit(&hak_sweep_news, false, memory_order_seq_cst);
  atomic_store_explicit(&swept_at, now, memory_order_relaxed);
  if (hak_reclaim_sweep(heap, wait, false)) return 0;
  atomic_store_explicit(&hak_sweep_news, true, memory_order_relaxed);   /* the rest later */
  return now + (delay > HAK_SWEEP_RETRY ? (uint64_t)delay : HAK_SWEEP_RETRY);
}

_Atomic(bool) hak_held_news;
static _Atomic(uint64_t) held_purged_at;   /* ms: when blocks held in pages were last purged */

void hak_note_held_frees_slow(void) {
  atomic_store_explicit(&hak_held_news, true, memory_order_seq_cst);
  hak_note_pending_work(atomic_load_explicit(&held_purged_at, memory_order_relaxed) + HAK_PURGE_CALM);
}

static void purge_held_in_span(const hak_page_t *span, void *arg) {
  *(size_t *)arg += hak_page_purge_held((hak_page_t *)span);
}

/* Blocks freed into pages whose owners have not gathered them are purged
 * (hak_page_purge_held), at most once per HAK_PURGE_CALM: an owner that
 * allocates again soon would fault them back in, one that has stopped
 * would hold them for ever. Walks every arena's spans, so only from the
 * purger. Returns when it is due, or 0. */
static uint64_t held_due(uint64_t now) {
  if (hak_option(HAK_OPT_PURGE_DELAY) < 0 || !atomic_load_explicit(&hak_held_news, memory_order_relaxed)) return 0;
  uint64_t at = atomic_load_explicit(&held_purged_at, memory_order_relaxed) + HAK_PURGE_CALM;
  if (now < at) return at;
  atomic_store_explicit(&hak_held_news, false, memory_order_seq_cst);
  atomic_store_explicit(&held_purged_at, now, memory_order_relaxed);
  size_t purged = 0;
  hak_arenas_visit_spans(purge_held_in_span, &purged);
  atomic_fetch_add_explicit(&hak_stat_purged, (int64_t)purged, memory_order_relaxed);
  return 0;
}

/* Do what is due now. Returns the earliest deadline still pending, or 0.
 * The sweep goes first (but for the secure variant's tick of exited
 * threads' quarantined blocks): the spans it frees join the purges. */
static uint64_t purge_due(hak_heap_t *heap, uint64_t now, bool wait) {
  uint64_t next = 0;
#if HAKMEM_SECURE   /* (first: the pages of the blocks it lets go may empty, for the sweep) */
  next = hak_quarantine_shared_due(now, wait);
#endif
  if (heap != NULL) next = hak_earliest(next, sweep_due(heap, now, wait));
  if (wait) next = hak_earliest(next, held_due(now));   /* the purger only: it walks every span */
  next = hak_earliest(next, hak_arenas_purge_due(now, wait));
  return hak_earliest(next, hak_huge_cache_decay(now, wait));
}

/* ------------------------------------------------------------ the purger */

enum { PURGER_NONE, PURGER_STARTING, PURGER_RUNNING, PURGER_OFF };
static _Atomic int purger_state;           /* OFF for good, but in a forked child */
static _Atomic(bool) purger_retired;       /* for good: the main thread left (purger_retire) */
static pthread_t purger_thread;            /* while RUNNING (joinable: see purger_retire) */
static _Atomic(pid_t) purger_tid;          /* its kernel thread id (purger_end) */
#define PURGER_IDLE UINT64_MAX
static _Atomic(uint64_t) purger_wake_at;   /* ms it sleeps until; PURGER_IDLE: until woken; 0: awake */
static _Atomic(uint32_t) purger_futex;     /* bumped by each wake-up */

/* Pairs with purger_sleep, seq_cst on both sides: either the note sees the
 * purger asleep, or the purger sees the note before sleeping. A note due
 * no earlier than the purger's own wake-up leaves it asleep. */
void hak_note_pending_work(uint64_t due) {
  atomic_store_explicit(&hak_work_pending, true, memory_order_seq_cst);
  uint64_t at = atomic_load_explicit(&purger_wake_at, memory_order_seq_cst);
  if (at != 0 && due < at && atomic_exchange_explicit(&purger_wake_at, 0, memory_order_seq_cst) != 0) {
    atomic_fetch_add_explicit(&purger_futex, 1, memory_order_seq_cst);
    syscall(SYS_futex, &purger_futex, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
  }
}

/* Sleep until `next` (0: until a note wakes it). */
static void purger_sleep(uint64_t next, uint64_t now) {
  uint32_t seq = atomic_load_explicit(&purger_futex, memory_order_seq_cst);
  atomic_store_explicit(&purger_wake_at, next != 0 ? next : PURGER_IDLE, memory_order_seq_cst);
  /* Seen OFF, or the retiring thread's wake-up comes after the load of seq. */
  if (!atomic_load_explicit(&hak_work_pending, memory_order_seq_cst) &&
      atomic_load_explicit(&purger_state, memory_order_seq_cst) != PURGER_OFF) {
    struct timespec ts, *timeout = NULL;
    if (next != 0) {
      uint64_t ms = next > now ? next - now : 1;
      ts = (struct timespec){ (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
      timeout = &ts;
    }
    syscall(SYS_futex, &purger_futex, FUTEX_WAIT_PRIVATE, seq, timeout, NULL, 0);
  }
  atomic_store_explicit(&purger_wake_at, 0, memory_order_seq_cst);
}

static void *purger_main(void *arg) {
  (void)arg;
  pthread_setname_np(pthread_self(), "hakmem-purger");
  atomic_store_explicit(&purger_tid, (pid_t)syscall(SYS_gettid), memory_order_relaxed);
  hak_heap_t *heap = hak_heap_thread_init();   /* sweeps adopt pages into a heap (NULL: no sweeps) */
  while (atomic_load_explicit(&purger_state, memory_order_seq_cst) != PURGER_OFF) {
    /* Cleared before looking, so that a note made meanwhile is not lost. */
    atomic_store_explicit(&hak_work_pending, false, memory_order_seq_cst);
    uint64_t now = hak_clock_ms();
    purger_sleep(purge_due(heap, now, true), now);
  }
  return NULL;
}

static void purger_start(void) {
  int expected = PURGER_NONE;
  if (!atomic_compare_exchange_strong(&purger_state, &expected, PURGER_STARTING)) return;
  /* A pause (purger_pause) that read `purger_retired` just before the main
   * thread left may have set PURGER_NONE after it: the retirement, which
   * waits for STARTING to pass, or this load sees the other (seq_cst). */
  if (atomic_load_explicit(&purger_retired, memory_order_seq_cst)) {
    atomic_store_explicit(&purger_state, PURGER_OFF, memory_order_seq_cst);
    return;
  }
  /* Blocked signals are inherited: none is ever delivered to the purger,
   * so it never runs a handler of the program's. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int saved = errno;   /* (the malloc that starts it succeeds without it) */
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, HAK_PURGER_STACK);
  int rc = pthread_create(&purger_thread, &attr, purger_main, NULL);
  if (rc == EINVAL) {   /* a program with much static TLS needs a larger stack */
    pthread_attr_setstacksize(&attr, (size_t)1 << 20);
    rc = pthread_create(&purger_thread, &attr, purger_main, NULL);
  }
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  errno = saved;
  atomic_store_explicit(&purger_state, rc == 0 ? PURGER_RUNNING : PURGER_OFF, memory_order_release);
  if (rc == 0) hak_verbose("hakmem: purger thread started\n");
  else hak_verbose("hakmem: no purger thread (pthread_create: errno %d); malloc returns memory\n", rc);
}

/* pthread_join returns once the exiting thread's id is cleared, which the
 * kernel does before it lets go of the thread's hold on the address space:
 * unshare(CLONE_VM) just after still found two threads (EINVAL; 14 runs of
 * 40 of test_namespaces under load). Waits until the kernel has no such
 * thread (a signal 0 to it fails), a second at most. */
static void purger_wait_gone(void) {
  int saved = errno;   /* (ESRCH at the end) */
  pid_t pid = (pid_t)syscall(SYS_getpid), tid = atomic_load_explicit(&purger_tid, memory_order_relaxed);
  struct timespec pause = { 0, 1000 * 1000 };
  for (int tries = 0; tries < 1000 && syscall(SYS_tgkill, pid, tid, 0) == 0; tries++) {
    if (tries < 100) sched_yield();
    else nanosleep(&pause, NULL);
  }
  errno = saved;
}

/* End the purger and wait until it has (the state is OFF after); `for_good`,
 * never start it again. Returns the state it found: RUNNING if it ended it. */
static int purger_end(bool for_good) {
  if (for_good) atomic_store_explicit(&purger_retired, true, memory_order_seq_cst);
  int state;
  do {
    while ((state = atomic_load_explicit(&purger_state, memory_order_seq_cst)) == PURGER_STARTING) sched_yield();
  } while (state != PURGER_OFF && !atomic_compare_exchange_strong(&purger_state, &state, PURGER_OFF));
  if (state != PURGER_RUNNING) return state;
  atomic_fetch_add_explicit(&purger_futex, 1, memory_order_seq_cst);
  syscall(SYS_futex, &purger_futex, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
  /* pthread_join and nanosleep are cancellation points; unshare, setns and
   * pthread_exit are not: a cancel pending must not act in here. */
  int cancel_state;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
  pthread_join(purger_thread, NULL);
  purger_wait_gone();
  pthread_setcancelstate(cancel_state, NULL);
  return state;
}

/* The main thread leaves by pthread_exit: end the purger and wait until it
 * has (so that the program's last thread is one of its own, and runs
 * glibc's exit(0) on its own stack with its own signal mask), and never
 * start it again: the slow paths do its work from now on, as with
 * HAKMEM_BACKGROUND=0. A purger being started is waited for first. */
static void purger_retire(void) { (void)purger_end(true); }

/* unshare and setns refuse a process of several threads for some
 * namespaces (EINVAL: a user namespace, setns into a mount namespace,
 * unshare(CLONE_VM)): a program that joined its threads and then enters
 * one (a sandbox, an nsenter-like tool) would fail for the purger alone.
 * So each ends it first; it may start again on a later slow path (which
 * does its work meanwhile, as with HAKMEM_BACKGROUND=0), as it may if it
 * had not started yet (a pause that left it OFF then turned it off for
 * good: a sandbox's unshare early in main). True if it ended it. */
static bool purger_pause(void) {
  int was = purger_end(false);
  if ((was == PURGER_RUNNING || was == PURGER_NONE) && !atomic_load_explicit(&purger_retired, memory_order_seq_cst))
    atomic_store_explicit(&purger_state, PURGER_NONE, memory_order_seq_cst);
  return was == PURGER_RUNNING;
}

/* The system call itself, as the C library's wrapper makes it. If the
 * purger ended just now, EINVAL (several threads) is tried again a few
 * times: the kernel lets go of an exited thread's share of the signal
 * handlers (which unshare(CLONE_VM) also checks) a moment after the
 * thread is gone (purger_wait_gone). */
static long namespace_call(long nr, long a, long b) {
  bool ended = purger_pause();
  long rc = syscall(nr, a, b);
  for (int tries = 0; rc != 0 && errno == EINVAL && ended && tries < 100; tries++) {
    sched_yield();
    rc = syscall(nr, a, b);
  }
  return rc;
}

int hak_unshare(int flags) { return (int)namespace_call(SYS_unshare, flags, 0); }
int hak_setns(int fd, int nstype) { return (int)namespace_call(SYS_setns, fd, nstype); }

/* Set by the main thread only (and a forked child's one thread, which is
 * its main thread), so its destructor runs when the main thread leaves by
 * pthread_exit; exit() runs no key destructor. */
static pthread_key_t main_exit_key;
static _Atomic(bool) main_exit_key_ready;
static _Atomic(bool) main_thread_marked;
static __thread bool thread_looked_at;   /* by main_thread_known */

static void main_thread_exit(void *unused) {
  (void)unused;
  purger_retire();
}

static void mark_main_thread(void) {
  if (atomic_load_explicit(&main_exit_key_ready, memory_order_acquire) && syscall(SYS_gettid) == getpid() &&
      pthread_setspecific(main_exit_key, &main_exit_key) == 0)
    atomic_store_explicit(&main_thread_marked, true, memory_order_release);
}

/* Whether the main thread is marked, else marked now if this is it (once
 * per thread): hakmem started in another thread (a library opened later
 * by a worker) has the main thread pass here in its first slow path. A
 * purger started before would outlive a main thread that leaves by
 * pthread_exit, and the process with it. Until then the slow paths do its
 * work (as with HAKMEM_BACKGROUND=0). */
static bool main_thread_known(void) {
  if (hak_likely(atomic_load_explicit(&main_thread_marked, memory_order_acquire))) return true;
  if (thread_looked_at) return false;
  thread_looked_at = true;   /* (before setspecific, which may allocate and come back here) */
  mark_main_thread();
  return atomic_load_explicit(&main_thread_marked, memory_order_acquire);
}

/* From allocation slow paths only (no lock held, and not inside free: see
 * the top of this file). One load once decided. */
void hak_purger_consider_start(void) {
  if (hak_likely(atomic_load_explicit(&purger_state, memory_order_relaxed) != PURGER_NONE)) return;
  /* Under memcheck, a purger still running at exit made its leak check
   * report the thread's TLS "possibly lost" in any program that had started
   * a thread: there, the slow paths do its work. */
  if (!hak_option(HAK_OPT_BACKGROUND) || hak_tracking_memcheck()) {
    atomic_store_explicit(&purger_state, PURGER_OFF, memory_order_relaxed);
    return;
  }
  /* pthread_create allocates (the new thread's TLS): not while this thread
   * holds an allocator lock (the shared heap's), which that could want.
   * Nor in a program that never started a thread: its purger would make it
   * a threaded one, to glibc (whose fork then takes a lock a fork from a
   * signal handler waits for) and to the libraries that skip their atomic
   * operations in a single-threaded process (libstdc++'s shared_ptr). */
  if (hak_locks_held != 0 || hak_single_threaded() || !main_thread_known()) return;
  if (atomic_load_explicit(&hak_stat_committed, memory_order_relaxed) >= HAK_PURGER_START_BYTES ||
      atomic_load_explicit(&hak_work_pending, memory_order_relaxed))
    purger_start();
}

/* From process start-up, in the thread that loads hakmem (the main thread,
 * but for a library opened later by another thread: main_thread_known). */
void hak_purger_init(void) {
  if (pthread_key_create(&main_exit_key, main_thread_exit) != 0) return;   /* then it never starts */
  atomic_store_explicit(&main_exit_key_ready, true, memory_order_release);
  mark_main_thread();
}

/* The child of fork has no purger (only the forking thread exists there,
 * now its main thread); it gets one the same lazy way. The work the
 * parent's purger (if one ran) had taken, and slept on until it was due,
 * is the child's too: noted as pending, so that its first look (its purger's or
 * a heartbeat's) finds every deadline again. Not noted, it waited for the
 * next note, which a deadline already set never makes (the secure
 * variant's clock of exited threads' quarantined blocks: for good). */
void hak_purger_fork_child(void) {
  if (atomic_load_explicit(&purger_state, memory_order_relaxed) == PURGER_RUNNING)
    atomic_store_explicit(&hak_work_pending, true, memory_order_relaxed);
  atomic_store_explicit(&purger_state, PURGER_NONE, memory_order_relaxed);
  atomic_store_explicit(&purger_retired, false, memory_order_relaxed);   /* (its main thread is the forking one) */
  atomic_store_explicit(&purger_wake_at, 0, memory_order_relaxed);
  atomic_store_explicit(&main_thread_marked, false, memory_order_relaxed);
  mark_main_thread();
}

/* From malloc's slow path at the heartbeat: nothing while the purger runs;
 * else return what is due here. One load when nothing is pending. */
void hak_purge_due_work(hak_heap_t *heap) {
  int state = atomic_load_explicit(&purger_state, memory_order_relaxed);
  if (hak_likely(state == PURGER_RUNNING)) return;
  if (state == PURGER_NONE) {
    hak_purger_consider_start();
    if (atomic_load_explicit(&purger_state, memory_order_relaxed) == PURGER_RUNNING) return;
  }
  if (hak_likely(!atomic_load_explicit(&hak_work_pending, memory_order_relaxed))) return;
  if (!atomic_exchange_explicit(&hak_work_pending, false, memory_order_seq_cst)) return;
  uint64_t next = purge_due(heap, hak_clock_ms(), false);
  if (next != 0) hak_note_pending_work(next);
}

/* ------------------------------------------------------------ at once */

/* Return free memory to the OS now: the empty pages of the calling
 * thread's heap and of the shared heap, the published pages with no live
 * block (swept into either heap), the free spans of every arena, the
 * cached huge blocks. */
void hak_collect(void) {
  hak_heap_t *own = hak_heap_get();
  if (own != &hak_heap_empty) {
#if HAKMEM_SECURE
    hak_quarantine_flush(own);   /* (its blocks' pages then go back too) */
#endif
    hak_heap_flush_recent(own, 0);
    hak_heap_flush_foreign(own);
    hak_heap_free_empty_pages(own);
  }
  hak_heap_t *shared = hak_heap_shared();
#if HAKMEM_SECURE
  hak_quarantine_flush(shared);   /* (exited threads' blocks) */
#endif
  hak_heap_flush_recent(shared, 0);   /* (the secure variant's quarantine frees into it for exited threads) */
  hak_heap_free_empty_pages(shared);
  hak_reclaim_sweep(own != &hak_heap_empty ? own : shared, true, true);
  hak_heap_release(shared);
  hak_arenas_purge_all();
  hak_huge_cache_flush();
}

/* The OS refused a mapping: the cached huge blocks and every empty
 * segment (those kept for reuse, and those whose purge delay has not run
 * out) go back, so that the mapping is tried again with them unmapped
 * (huge.c, segment.c). Not the rest of hak_collect: a page, or a free
 * span of a segment still in use, holds no address space it can give. */
void hak_memory_short(void) {
  hak_huge_cache_flush();
  hak_arenas_release_empty();
}

/* A mapping from the OS (hak_os_alloc_aligned) for memory the call needs
 * (a segment, a huge or giant block, a heap): if refused, once more after
 * hak_memory_short. errno as it was if it is mapped in the end. */
void *hak_os_alloc_or_short(size_t size, size_t align) {
  int saved = errno;
  void *p = hak_os_alloc_aligned(size, align);
  if (p != NULL) return p;
  hak_memory_short();
  p = hak_os_alloc_aligned(size, align);
  if (p != NULL) errno = saved;   /* (the first refusal set it) */
  return p;
}

/* malloc_trim(0): hak_collect, and "some memory was released". */
int hak_malloc_trim(size_t pad) {
  (void)pad;
  hak_collect();
  return 1;
}

HAK_DEFINE_EXPORTS(HAK_EXPORTS_PURGE)
HAK_DEFINE_WEAK_EXPORTS(HAK_EXPORTS_NAMESPACES)
