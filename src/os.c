/* OS primitives: aligned reservations, purging, time.
 * Nothing here allocates from the heap. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "internal.h"

/* Without MAP_NORESERVE: under the kernel's default overcommit heuristic
 * a request beyond the machine's memory and swap then fails, as under
 * glibc, instead of succeeding until its pages are touched (malloc(1 TiB)
 * and vector::reserve(1 TiB) succeeded on a 23 GiB machine, and mremap
 * grew a block to 64 TiB: a review helper's programs). */
static void *os_map(void *hint, size_t size) {
  void *p = mmap(hint, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

/* Next address to try for an aligned mapping: most of the time the kernel
 * grants the hint and one mmap suffices, instead of over-reserving and
 * trimming (three system calls). */
static _Atomic(uintptr_t) os_aligned_hint;

/* No room for size + align bytes at once (an address-space limit, ulimit
 * -v or -d): map `size` where the kernel puts it, and if that is not
 * aligned, at the aligned address just below it. The kernel places a
 * mapping at the top of the highest gap it fits, so the gap most likely
 * goes on below it. (Older kernels take MAP_FIXED_NOREPLACE as a hint and
 * may map elsewhere: that is undone.) */
static void *os_map_aligned_tight(size_t size, size_t align) {
  uint8_t *p = os_map(NULL, size);
  if (p == NULL || ((uintptr_t)p & (align - 1)) == 0) return p;
  munmap(p, size);
  void *down = (void *)((uintptr_t)p & ~(uintptr_t)(align - 1));
  void *q = mmap(down, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (q == down) return q;
  if (q != MAP_FAILED) munmap(q, size);
  return NULL;
}

/* Map `size` bytes aligned to `align` (a power of two ≥ the OS page). mmap
 * only promises 4 KiB alignment, so on a miss we reserve size + align and
 * unmap the ends (or, short of address space for that, os_map_aligned_tight).
 * Returns NULL (errno ENOMEM) on failure. */
void *hak_os_alloc_aligned(size_t size, size_t align) {
  if (size > SIZE_MAX - align) { errno = ENOMEM; return NULL; }
  int saved = errno;   /* left as it was on success (an allocation that succeeds does not set it) */
  uintptr_t hint = atomic_load_explicit(&os_aligned_hint, memory_order_relaxed);
  if (hint != 0 && (hint & (align - 1)) == 0) {
    void *p = os_map((void *)hint, size);
    if (p != NULL && ((uintptr_t)p & (align - 1)) == 0) {
      atomic_store_explicit(&os_aligned_hint, (uintptr_t)p + hak_align_up(size, align), memory_order_relaxed);
      errno = saved;
      return p;
    }
    if (p != NULL) munmap(p, size);
  }
  uint8_t *raw = os_map(NULL, size + align), *p;
  if (raw != NULL) {
    p = (uint8_t *)hak_align_up((uintptr_t)raw, align);
    size_t head = (size_t)(p - raw), tail = align - head;
    if (head) munmap(raw, head);
    if (tail) munmap(p + size, tail);
  } else if ((p = os_map_aligned_tight(size, align)) == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  atomic_store_explicit(&os_aligned_hint, (uintptr_t)p + hak_align_up(size, align), memory_order_relaxed);
  errno = saved;
  return p;
}

/* free() reaches here and the purge below, and must leave errno as it was
 * (POSIX), as must every call below that may fail without the caller
 * failing (an allocation that succeeds leaves errno alone, as glibc's
 * tests check): munmap fails with ENOMEM when it would split a mapping at
 * vm.max_map_count, madvise with EINVAL on locked memory. A range munmap
 * refuses stays mapped, and nothing tracks it any more, so its memory goes
 * back at once by an advice, which splits no mapping (a huge block freed
 * at the map limit stayed resident for good, malloc_trim or not). Warned
 * once, as the purge: a process at its map limit fails every unmap, one
 * per free. */
void hak_os_free(void *p, size_t size) {
  static _Atomic(bool) warned;
  int saved = errno;
  if (munmap(p, size) != 0) {
    int refused = errno;
    bool returned = madvise(p, size, MADV_DONTNEED) == 0;
    if (!atomic_exchange_explicit(&warned, true, memory_order_relaxed))
      hak_message("hakmem: warning: munmap(%p, %zu) failed (errno %d); its address space stays taken%s\n", p, size,
                  refused, returned ? "" : ", and its memory");
  }
  errno = saved;
}

/* Give the physical memory of a range back to the OS, keeping the range,
 * and say what the range reads as now. madvise can fail: on locked pages
 * (mlock, mlockall) both advices fail with EINVAL, and then the old bytes
 * stay. Warned once: a program that locks its memory meant to keep it. */
hak_purge_result_t hak_os_purge(void *p, size_t size) {
  static _Atomic(bool) warned;
  int saved = errno;   /* left as it was, as by hak_os_free */
  hak_purge_result_t r = HAK_PURGE_FAILED;
  if (hak_option(HAK_OPT_PURGE_MODE) == HAK_PURGE_FREE && madvise(p, size, MADV_FREE) == 0) r = HAK_PURGED_LAZY;
  else if (madvise(p, size, MADV_DONTNEED) == 0) r = HAK_PURGED_ZERO;
  else if (!atomic_exchange_explicit(&warned, true, memory_order_relaxed))
    hak_message("hakmem: warning: cannot return memory to the OS (madvise: errno %d); it stays resident\n", errno);
  errno = saved;
  return r;
}

/* Make a range read as zero by giving its memory back (MADV_DONTNEED,
 * whatever HAKMEM_PURGE says), not by writing it: what the program touches
 * of it then comes back as zero pages. False if refused (locked memory):
 * the caller clears it itself. */
bool hak_os_zero(void *p, size_t size) {
  int saved = errno;
  bool zeroed = madvise(p, size, MADV_DONTNEED) == 0;
  errno = saved;
  return zeroed;
}

/* Keep transparent huge pages out of a range. Where the kernel backs every
 * anonymous mapping with them (THP "always"), one 4 KiB touch in a purged
 * 2 MiB stretch brings 2 MiB back, and khugepaged may refill a stretch that
 * holds a single live page: resident memory would follow the kernel, not
 * what hakmem purged (test_memory_return under THP "always": an exited
 * thread's 192 MiB, freed, stayed 17-32 MiB above where the test began,
 * instead of within 5). Under THP "madvise" or "never" the advice changes
 * nothing. A failure is harmless: only residency differs. */
void hak_os_no_huge_pages(void *p, size_t size) {
  int saved = errno;
  (void)madvise(p, size, MADV_NOHUGEPAGE);
  errno = saved;
}

/* Let the whole 2 MiB stretches of a block be backed by transparent huge
 * pages (`on`; under THP "madvise", the default of Debian and Ubuntu, only
 * such advice lets a page fault map 2 MiB at once), or keep them out again.
 * True if there was such a stretch and the advice was taken. */
bool hak_os_huge_pages(void *p, size_t size, bool on) {
  uintptr_t from = hak_align_up((uintptr_t)p, HAK_THP_SIZE), to = ((uintptr_t)p + size) & ~(uintptr_t)(HAK_THP_SIZE - 1);
  int saved = errno;
  bool advised = from < to && madvise((void *)from, to - from, on ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) == 0;
  errno = saved;
  return advised;
}

/* Fault a range in, writable, in one call (Linux 5.14+): what the first
 * writes would do one page at a time, and twice per page when the program
 * reads a page before it writes it (a read maps the shared zero page, the
 * write then copies it). False where the kernel has no such advice (then
 * never asked again) or the memory is short: the pages fault in as used. */
bool hak_os_populate(void *p, size_t size) {
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
  static _Atomic(bool) unsupported;
  if (atomic_load_explicit(&unsupported, memory_order_relaxed)) return false;
  int saved = errno;
  bool done = madvise(p, size, MADV_POPULATE_WRITE) == 0;
  if (!done && errno == EINVAL) atomic_store_explicit(&unsupported, true, memory_order_relaxed);
  errno = saved;
  return done;
}

/* Grow or shrink a mapping without moving it. */
bool hak_os_resize_in_place(void *p, size_t old_size, size_t new_size) {
  if (new_size == old_size) return true;
  int saved = errno;   /* (refused, the block moves instead) */
  bool done = new_size < old_size ? munmap((uint8_t *)p + new_size, old_size - new_size) == 0
                                  : mremap(p, old_size, new_size, 0) != MAP_FAILED;
  errno = saved;
  return done;
}

uint64_t hak_clock_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The CPUs this process may run on. The system call, not libc's
 * sched_getaffinity (which never allocates either, unlike sysconf): the
 * wrapper sits in a part of libc no other call of hakmem's reaches, and
 * the page fault that runs it maps its neighbours too (fault-around, 64 KiB
 * of resident memory in every process). */
unsigned hak_cpu_count(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (syscall(SYS_sched_getaffinity, 0, sizeof set, &set) <= 0) return 1;
  int n = CPU_COUNT(&set);
  return n > 0 ? (unsigned)n : 1;
}

/* A small file under /proc, read whole and NUL-terminated into buf: its
 * length, 0 if unreadable. By system calls, not libc's open, read and
 * close, which are thread cancellation points: no allocator function may
 * be one (POSIX), and mallinfo, say, reads a file with a lock held. */
static size_t read_proc(const char *path, char *buf, size_t cap) {
  int saved = errno;
  int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
  ssize_t n = fd < 0 ? -1 : syscall(SYS_read, fd, buf, cap - 1);
  if (fd >= 0) syscall(SYS_close, fd);
  errno = saved;
  if (n <= 0) return 0;
  buf[n] = 0;
  return (size_t)n;
}

static size_t parse_count(const char *s) {
  size_t v = 0;
  while (*s >= '0' && *s <= '9') v = v * 10 + (size_t)(*s++ - '0');
  return v;
}

/* Resident set size in bytes, from /proc/self/statm (0 if unreadable). */
size_t hak_process_rss(void) {
  char buf[128];
  if (read_proc("/proc/self/statm", buf, sizeof buf) == 0) return 0;
  const char *s = buf;
  while (*s && *s != ' ') s++;          /* skip total size */
  while (*s == ' ') s++;
  return parse_count(s) * (size_t)HAK_OS_PAGE;
}

/* Whether the kernel may back memory advised MADV_HUGEPAGE with huge pages:
 * THP "always" or "madvise" (the advice itself succeeds under "never" too). */
bool hak_os_thp_enabled(void) {
  char buf[64];
  return read_proc("/sys/kernel/mm/transparent_hugepage/enabled", buf, sizeof buf) != 0 && strstr(buf, "[never]") == NULL;
}

/* The most mappings the process may have (vm.max_map_count), 0 if unknown. */
size_t hak_os_map_limit(void) {
  char buf[32];
  return read_proc("/proc/sys/vm/max_map_count", buf, sizeof buf) == 0 ? 0 : parse_count(buf);
}
