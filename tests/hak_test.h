/* Shared helpers of hakmem's end-to-end tests: CHECK macros, case runner,
 * deterministic random numbers, address/seed-keyed fill patterns, RSS, a
 * small blocking pointer queue, and forked children (waited for with a
 * deadline, or run to catch an abort with its stderr).
 *
 * Every test calls the standard allocator API (malloc, free, ...). Which
 * allocator that reaches depends on the build:
 *   - normal build: the test links libhakmem.so (or libhakmem.a), whose
 *     malloc/free/... interpose the C library's;
 *   - sanitizer builds (HAKMEM_TEST_PREFIXED, set by hakmem_static): ASan and
 *     TSan own the standard names, so they are #defined to the hak_* names
 *     below and the same source tests hakmem;
 *   - HAK_TEST_STATIC: the test links libhakmem.a, so malloc is defined by
 *     the executable itself rather than by libhakmem.so;
 *   - HAK_TEST_LIBC (never set by the build; pass -DHAK_TEST_LIBC by hand):
 *     validates the tests themselves against the C library's allocator, with
 *     the few hakmem-only contracts (error messages, ...) left unchecked. */
#ifndef HAK_TEST_H
#define HAK_TEST_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef HAK_TEST_LIBC
/* hak_* calls in the tests go to the C library's allocator. */
#define hak_malloc_usable_size malloc_usable_size
#else
#include "hakmem.h"
#endif

#ifdef HAKMEM_TEST_PREFIXED
#define malloc hak_malloc
#define free hak_free
#define calloc hak_calloc
#define realloc hak_realloc
#define reallocarray hak_reallocarray
#define posix_memalign hak_posix_memalign
#define aligned_alloc hak_aligned_alloc
#define memalign hak_memalign
#define valloc hak_valloc
#define pvalloc hak_pvalloc
#define malloc_usable_size hak_malloc_usable_size
#define malloc_trim hak_test_malloc_trim
static inline int hak_test_malloc_trim(size_t pad) { (void)pad; hak_collect(); return 1; }   /* (hakmem's) */
#endif

/* True when malloc & co. are hakmem's through their standard names, i.e.
 * the tests of symbol resolution and of hakmem's own messages apply. */
#if !defined(HAK_TEST_LIBC) && !defined(HAKMEM_TEST_PREFIXED)
#define HAK_TEST_STANDARD_NAMES 1
#endif

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

/* ---- failures ---------------------------------------------------------- */

/* Report and end the process at once: _exit, so a failure inside a thread or
 * a forked child neither runs atexit handlers nor flushes copied buffers. */
__attribute__((noreturn, format(printf, 3, 4)))
static inline void hak_test_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "%s:%d: FAIL: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    _exit(1);
}

#define CHECK(expr)                                                          \
    do {                                                                     \
        if (!(expr)) hak_test_fail(__FILE__, __LINE__, "%s", #expr);         \
    } while (0)

/* CHECK with a printf-style explanation of the values involved. */
#define CHECKF(expr, fmt, ...)                                               \
    do {                                                                     \
        if (!(expr))                                                         \
            hak_test_fail(__FILE__, __LINE__, "%s: " fmt, #expr, ##__VA_ARGS__); \
    } while (0)

#define CHECK_EQ_SIZE(a, b)                                                  \
    do {                                                                     \
        size_t a_ = (a), b_ = (b);                                           \
        if (a_ != b_)                                                        \
            hak_test_fail(__FILE__, __LINE__, "%s == %s: %zu != %zu", #a, #b, \
                          a_, b_);                                           \
    } while (0)

#define CHECK_ALIGNED(p, align)                                              \
    CHECKF(((uintptr_t)(p) & ((align) - 1)) == 0, "%p not aligned to %zu",  \
           (void *)(p), (size_t)(align))

/* ---- case runner -------------------------------------------------------- */

static inline double hak_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* One line per case; the "run" line shows which case hung if one does. */
static inline void hak_run_case(const char *name, void (*fn)(void))
{
    printf("run  %s\n", name);
    fflush(stdout);
    double t0 = hak_now_ms();
    fn();
    printf("ok   %s (%.0f ms)\n", name, hak_now_ms() - t0);
    fflush(stdout);
}
#define RUN_CASE(fn) hak_run_case(#fn, fn)

/* HAKMEM_TEST_LONG=1 selects the long, opt-in iteration counts. */
static inline bool hak_test_long(void)
{
    const char *v = getenv("HAKMEM_TEST_LONG");
    return v && strcmp(v, "1") == 0;
}
static inline size_t hak_scale(size_t normal, size_t long_mode)
{
    return hak_test_long() ? long_mode : normal;
}

/* Hides a constant from the compiler, so absurd sizes reach the allocator at
 * run time without -Walloc-size-larger-than warnings or constant folding. */
static inline size_t hak_opaque(size_t x)
{
    __asm__ volatile("" : "+r"(x));
    return x;
}

static inline void *hak_opaque_ptr(void *p)
{
    __asm__ volatile("" : "+r"(p));
    return p;
}

/* Where a symbol resolves from the program's default scope: the shared
 * object's file name, or "" when it is in the main executable. */
static inline const char *hak_symbol_object(const char *symbol)
{
    void *addr = dlsym(RTLD_DEFAULT, symbol);
    Dl_info info;
    if (!addr || !dladdr(addr, &info) || !info.dli_fname) return NULL;
    return info.dli_fname;
}

/* In the normal build, make sure the test really exercises hakmem: malloc
 * and free must resolve to libhakmem, not to the C library. */
static inline void hak_test_begin(const char *name)
{
    printf("%s (%s mode)\n", name, hak_test_long() ? "long" : "default");
#if defined(HAK_TEST_STANDARD_NAMES) && !defined(HAK_TEST_STATIC)
    const char *symbols[] = {"malloc", "free", "realloc", "calloc"};
    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
        const char *obj = hak_symbol_object(symbols[i]);
        CHECKF(obj && strstr(obj, "libhakmem"), "%s resolves to %s, not libhakmem",
               symbols[i], obj ? obj : "(nothing)");
    }
#endif
    fflush(stdout);
}

/* ---- deterministic random numbers --------------------------------------- */

static inline uint64_t hak_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

typedef struct { uint64_t state; } hak_rng;

static inline hak_rng hak_rng_seed(uint64_t seed) { return (hak_rng){hak_mix64(seed)}; }
static inline uint64_t hak_rng_next(hak_rng *r) { return hak_mix64(r->state++); }
/* Uniform in [lo, hi]. */
static inline size_t hak_rng_range(hak_rng *r, size_t lo, size_t hi)
{
    return lo + (size_t)(hak_rng_next(r) % (hi - lo + 1));
}

/* A size mix shaped like real programs: mostly small, some medium, rarely
 * large (up to max_large). */
static inline size_t hak_rng_size(hak_rng *r, size_t max_large)
{
    unsigned roll = (unsigned)(hak_rng_next(r) % 1000);
    if (roll < 800) return hak_rng_range(r, 1, 512);
    if (roll < 990) return hak_rng_range(r, 513, 32 * KiB);
    return hak_rng_range(r, 32 * KiB + 1, max_large);
}

/* ---- fill patterns ------------------------------------------------------ */

/* Byte i of pattern `seed` is a function of (seed, i) only. Callers that
 * want an address-keyed pattern pass hak_seed_of(p, ...), so a block that
 * shows up at another block's address (overlap, stale reuse) mismatches. */
static inline uint64_t hak_seed_of(const void *p, uint64_t salt)
{
    return hak_mix64((uint64_t)(uintptr_t)p ^ (salt * 0x9e3779b97f4a7c15ull));
}

static inline uint64_t hak_pattern_word(uint64_t seed, size_t word_index)
{
    return hak_mix64(seed ^ (word_index * 0xd6e8feb86659fd93ull));
}

static inline void hak_fill(void *p, size_t n, uint64_t seed)
{
    unsigned char *b = (unsigned char *)p;
    size_t words = n / 8;
    for (size_t w = 0; w < words; w++) {
        uint64_t v = hak_pattern_word(seed, w);
        memcpy(b + w * 8, &v, 8);
    }
    if (n % 8) {
        uint64_t v = hak_pattern_word(seed, words);
        memcpy(b + words * 8, &v, n % 8);
    }
}

/* Offset of the first byte of p[0..n) that differs from the pattern, or
 * SIZE_MAX when all match. */
static inline size_t hak_pattern_mismatch(const void *p, size_t n, uint64_t seed)
{
    const unsigned char *b = (const unsigned char *)p;
    size_t words = n / 8;
    for (size_t w = 0; w < words; w++) {
        uint64_t v = hak_pattern_word(seed, w), got;
        memcpy(&got, b + w * 8, 8);
        if (got != v)
            for (size_t i = 0; i < 8; i++)
                if (b[w * 8 + i] != ((unsigned char *)&v)[i]) return w * 8 + i;
    }
    if (n % 8) {
        uint64_t v = hak_pattern_word(seed, words);
        for (size_t i = 0; i < n % 8; i++)
            if (b[words * 8 + i] != ((unsigned char *)&v)[i]) return words * 8 + i;
    }
    return SIZE_MAX;
}

#define CHECK_PATTERN(p, n, seed)                                            \
    do {                                                                     \
        const void *p_ = (p);                                                \
        size_t n_ = (n), off_ = hak_pattern_mismatch(p_, n_, (seed));        \
        if (off_ != SIZE_MAX)                                                \
            hak_test_fail(__FILE__, __LINE__,                                \
                          "block %p of %zu bytes corrupted at offset %zu",   \
                          p_, n_, off_);                                     \
    } while (0)

/* Offset of the first byte of p[0..n) that is not `byte`, or SIZE_MAX. */
static inline size_t hak_first_not(const void *p, size_t n, unsigned char byte)
{
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != byte) return i;
    return SIZE_MAX;
}

/* ---- hakmem's own report ------------------------------------------------ */

#ifndef HAK_TEST_LIBC
/* hakmem's statistics report as one line of JSON (hak_stats_write_json),
 * in a buffer of its own, overwritten by the next call. */
static inline const char *hak_stats_json(void)
{
    static char buf[1 << 16];
    int fd = memfd_create("report", 0);
    CHECK(fd >= 0);
    hak_stats_write_json(fd);
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    close(fd);
    CHECK(n > 0);
    buf[n] = 0;
    return buf;
}
#endif

/* ---- resident memory ---------------------------------------------------- */

#if defined(__SANITIZE_THREAD__) && defined(__x86_64__)
/* ThreadSanitizer keeps several bytes of shadow for each byte of the
 * program's memory, in mappings of its own that madvise does not empty:
 * the shadow grows with every address the program ever touched, not with
 * what it holds (thread churn: shadow 90 to 295 MiB in 11 s while the
 * program's own resident memory stayed at 40-65 MiB). Resident memory is
 * counted in the program's mappings only: files, and the ranges TSan's
 * x86-64 layouts leave to mmap and stacks (from 0x7a00'0000'0000), to a
 * position-independent binary and its .bss (0x5500'0000'0000 to
 * 0x5a00'0000'0000; hakmem's segment map is there when it is linked in)
 * and to a binary loaded low (below 0x0080'0000'0000). */
static inline bool hak_rss_counts_mapping(uintptr_t start, const char *name)
{
    return name[0] != 0 || start >= 0x7a0000000000ull || start < 0x008000000000ull ||
           (start >= 0x550000000000ull && start < 0x5a0000000000ull);
}

static inline size_t hak_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    CHECK(f != NULL);
    char line[512], name[256] = "";
    uintptr_t start = 0;
    size_t kib, total = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned long lo, hi;
        int at = 0;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &at) == 2 && at > 0) {
            start = lo;
            snprintf(name, sizeof name, "%s", line + at);
            name[strcspn(name, "\n")] = 0;
        } else if (sscanf(line, "Rss: %zu kB", &kib) == 1 && hak_rss_counts_mapping(start, name)) {
            total += kib * 1024;
        }
    }
    fclose(f);
    return total;
}
#else
static inline size_t hak_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0;
    CHECK(f != NULL);
    CHECK(fscanf(f, "%lu %lu", &size, &resident) == 2);
    fclose(f);
    return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}
#endif

/* AddressSanitizer keeps state for every thread that ever ran, whichever
 * allocator: about 5.6 KiB resident each (a program creating 8,000 empty
 * threads under glibc's malloc grew 45 MiB). Bounds on resident memory
 * across many threads allow that much more per thread there. */
#if defined(__SANITIZE_ADDRESS__)
#define HAK_RSS_PER_THREAD_RUN (8 * KiB)
#else
#define HAK_RSS_PER_THREAD_RUN 0
#endif

/* Where hak_rss_bytes counts ThreadSanitizer's shadow too (its layout on
 * other architectures than x86-64 is not told apart above), resident-memory
 * bounds are scaled for it. */
#if defined(__SANITIZE_THREAD__) && !defined(__x86_64__)
#define HAK_RSS_SLACK 4
#else
#define HAK_RSS_SLACK 1
#endif

#define CHECK_RSS_BELOW(limit)                                               \
    do {                                                                     \
        size_t rss_ = hak_rss_bytes(), lim_ = (limit) * HAK_RSS_SLACK;       \
        if (rss_ >= lim_)                                                    \
            hak_test_fail(__FILE__, __LINE__,                                \
                          "RSS %zu MiB >= bound %zu MiB (memory not reused?)", \
                          rss_ / MiB, lim_ / MiB);                           \
    } while (0)

/* Resident memory has grown by less than `growth` since `base` (an RSS
 * taken once the test's live set is in place): memory freed in one round
 * must serve the next, so a leak of even part of a round shows. */
/* Growth bound now (see CHECK_RSS_GROWTH_WITHIN, below, for one that may
 * take a while to hold). */
#define CHECK_RSS_GROWTH_BELOW(base, growth) CHECK_RSS_GROWTH_WITHIN(base, growth, 0)

/* Growth that must go: freed memory may take the purge delay (and, on a
 * loaded machine, the purger's turn) to leave, so the bound must hold
 * within `ms` milliseconds of the check, not at that instant. */
static inline size_t hak_wait_rss_below(size_t limit, unsigned ms)
{
    size_t rss = hak_rss_bytes();
    for (unsigned waited = 0; rss >= limit && waited < ms; waited += 10) {
        usleep(10 * 1000);
        rss = hak_rss_bytes();
    }
    return rss;
}

#define CHECK_RSS_GROWTH_WITHIN(base, growth, ms)                            \
    do {                                                                     \
        size_t lim_ = (base) + (growth) * HAK_RSS_SLACK;                     \
        size_t rss_ = hak_wait_rss_below(lim_, (ms));                        \
        if (rss_ >= lim_)                                                    \
            hak_test_fail(__FILE__, __LINE__,                                \
                          "RSS %zu MiB past %zu MiB + %zu MiB (waited %u ms; memory not reused?)", \
                          rss_ / MiB, (size_t)(base) / MiB,                  \
                          (size_t)(growth) * HAK_RSS_SLACK / MiB, (unsigned)(ms)); \
    } while (0)

/* ---- a blocking queue of blocks handed between threads ------------------ */

/* A block in flight, filled with the pattern hak_seed_of(ptr, size). */
typedef struct {
    void *ptr;
    size_t size;
} hak_item;

static inline hak_item hak_item_new(size_t size)
{
    hak_item it = {malloc(size), size};
    CHECKF(it.ptr != NULL, "malloc(%zu) failed", size);
    hak_fill(it.ptr, size, hak_seed_of(it.ptr, size));
    return it;
}

static inline void hak_item_verify_free(hak_item it)
{
    CHECK_PATTERN(it.ptr, it.size, hak_seed_of(it.ptr, it.size));
    free(it.ptr);
}

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t not_empty, not_full;
    hak_item *ring; /* storage given by the caller, not from the allocator */
    size_t capacity, head, count;
    bool closed; /* no more pushes: pops drain, then return false */
} hak_queue;

static inline void hak_queue_init(hak_queue *q, hak_item *ring, size_t capacity)
{
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->not_empty, NULL);
    pthread_cond_init(&q->not_full, NULL);
    q->ring = ring;
    q->capacity = capacity;
    q->head = q->count = 0;
    q->closed = false;
}

static inline void hak_queue_push(hak_queue *q, hak_item item)
{
    pthread_mutex_lock(&q->lock);
    while (q->count == q->capacity) pthread_cond_wait(&q->not_full, &q->lock);
    q->ring[(q->head + q->count) % q->capacity] = item;
    q->count++;
    pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(&q->lock);
}

/* Blocks until an item arrives; false once the queue is closed and empty. */
static inline bool hak_queue_pop(hak_queue *q, hak_item *out)
{
    pthread_mutex_lock(&q->lock);
    while (q->count == 0 && !q->closed) pthread_cond_wait(&q->not_empty, &q->lock);
    bool got = q->count > 0;
    if (got) {
        *out = q->ring[q->head];
        q->head = (q->head + 1) % q->capacity;
        q->count--;
        pthread_cond_signal(&q->not_full);
    }
    pthread_mutex_unlock(&q->lock);
    return got;
}

static inline void hak_queue_close(hak_queue *q)
{
    pthread_mutex_lock(&q->lock);
    q->closed = true;
    pthread_cond_broadcast(&q->not_empty);
    pthread_mutex_unlock(&q->lock);
}

/* ---- threads and children ----------------------------------------------- */

/* A thread's first small blocks (HAK_YOUNG_ALLOCS = 64 of them, src/heap.c)
 * come from a heap it shares with the other threads that have none of their
 * own, and their frees take the generic, cross-thread way. A test of the
 * owner's free fast path first calls this: it allocates and frees past that
 * count, so the thread's next small blocks come from pages of its own heap
 * and its frees of them reach the fast path. (Through the standard API
 * only: with HAK_TEST_LIBC it does no harm.) */
#define HAK_TEST_YOUNG_ALLOCS 64   /* src/internal.h's HAK_YOUNG_ALLOCS; tests that include it check */

static inline void hak_thread_own_heap(void)
{
    enum { N = 2 * HAK_TEST_YOUNG_ALLOCS };   /* with room for allocations made before */
    void *blocks[N];
    for (size_t i = 0; i < N; i++) CHECK((blocks[i] = malloc(16)) != NULL);
    for (size_t i = 0; i < N; i++) free(blocks[i]);
}

static inline pthread_t hak_thread_start(void *(*fn)(void *), void *arg)
{
    pthread_t t;
    int rc = pthread_create(&t, NULL, fn, arg);
    CHECKF(rc == 0, "pthread_create: %s", strerror(rc));
    return t;
}

static inline void *hak_thread_does_nothing(void *arg) { return arg; }

/* Make the process a threaded one (a thread started and joined), as a
 * program that allocates from threads is: only there does hakmem start its
 * purger thread (src/purge.c). */
static inline void hak_become_threaded(void)
{
    CHECK(pthread_join(hak_thread_start(hak_thread_does_nothing, NULL), NULL) == 0);
}

/* What each thread of a process is doing, on stderr: its state, kernel wait
 * channel and system call (202 on x86-64 is futex: waiting for a lock), so
 * that a timeout says "deadlock" or "slow". Best effort: /proc may refuse. */
static inline void hak_describe_threads(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *dir = opendir(path);
    if (!dir) return;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char file[384], stat[512] = "", wchan[64] = "?", syscall_line[128] = "?";
        FILE *f;
        snprintf(file, sizeof file, "%s/%s/stat", path, e->d_name);
        if ((f = fopen(file, "r"))) { if (!fgets(stat, sizeof stat, f)) stat[0] = 0; fclose(f); }
        snprintf(file, sizeof file, "%s/%s/wchan", path, e->d_name);
        if ((f = fopen(file, "r"))) { if (!fgets(wchan, sizeof wchan, f)) strcpy(wchan, "?"); fclose(f); }
        snprintf(file, sizeof file, "%s/%s/syscall", path, e->d_name);
        if ((f = fopen(file, "r"))) {
            if (fgets(syscall_line, sizeof syscall_line, f)) syscall_line[strcspn(syscall_line, " \n")] = 0;
            fclose(f);
        }
        const char *after_name = strrchr(stat, ')');
        fprintf(stderr, "  thread %s: state %c, wchan %s, syscall %s\n", e->d_name,
                after_name && after_name[1] ? after_name[2] : '?', wchan, syscall_line);
    }
    closedir(dir);
}

/* Threads of this process named by hakmem's purger (src/purge.c). */
static inline int hak_purger_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    CHECK(d != NULL);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[300], name[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL) continue;
        if (fgets(name, sizeof name, f) != NULL && strncmp(name, "hakmem-purger", 13) == 0) n++;
        fclose(f);
    }
    closedir(d);
    return n;
}

/* Waits for a child. It fails (after describing the child's threads and
 * killing it) once the child has run `seconds`, or, if `progress` is not
 * NULL (a counter the child advances, in memory shared with it), once the
 * counter has stood still for `seconds`: on a loaded machine a slow child
 * is not a hung one. */
static inline int hak_wait_child_progress(pid_t pid, int seconds, const volatile size_t *progress)
{
    int status = 0;
    size_t seen = progress ? *progress : 0;
    for (int still_ms = 0;; still_ms += 10) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        CHECK(r == 0 || r == pid);
        if (r == pid) return status;
        if (progress && *progress != seen) {
            seen = *progress;
            still_ms = 0;
        }
        if (still_ms >= seconds * 1000) {
            fprintf(stderr, "child %d: no %s after %d s; its threads:\n", (int)pid,
                    progress ? "progress" : "exit", seconds);
            hak_describe_threads(pid);
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            hak_test_fail(__FILE__, __LINE__, "child %d %s after %d s (deadlock?)", (int)pid,
                          progress ? "made no progress" : "still running", seconds);
        }
        usleep(10 * 1000);
    }
}

/* Waits for a child at most `seconds`; a child still running then is
 * described, killed and reported: a deadlock after fork() is a bug worth a
 * clear message. */
static inline int hak_wait_child(pid_t pid, int seconds)
{
    return hak_wait_child_progress(pid, seconds, NULL);
}

/* What a forked child printed on stderr, and how it ended. */
typedef struct {
    char text[1 << 14];   /* its stderr */
    int status;
} hak_child_report;

/* Runs fn in a forked child with stderr captured (and echoed, indented):
 * for misuse that aborts on purpose (no core file), or a run of the program
 * under other conditions (fn execs). A child whose fn returns says so on
 * stderr and exits 0. */
static inline hak_child_report hak_run_in_child(void (*fn)(void))
{
    hak_child_report r = {{0}, 0};
    int fds[2];
    CHECK(pipe(fds) == 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        close(fds[0]);
        CHECK(dup2(fds[1], STDERR_FILENO) == STDERR_FILENO);
        fn();
        fprintf(stderr, "the child's function returned normally\n");
        _exit(0);
    }
    close(fds[1]);
    /* Read until the child's stderr closes, or 60 s have passed: a hung
     * child (or one whose threads hold the pipe open) is then described,
     * killed and reported by hak_wait_child, not waited for. */
    double deadline = hak_now_ms() + 60 * 1000.0;
    size_t used = 0;
    for (;;) {
        struct pollfd in = { fds[0], POLLIN, 0 };
        double left = deadline - hak_now_ms();
        if (left <= 0) break;
        int ready = poll(&in, 1, (int)left + 1);
        if (ready < 0) continue;   /* a signal: look again */
        if (ready == 0) break;
        ssize_t got = read(fds[0], r.text + used, sizeof r.text - 1 - used);
        if (got <= 0) break;
        used += (size_t)got;
    }
    close(fds[0]);
    double left = deadline - hak_now_ms();
    r.status = hak_wait_child(pid, left > 0 ? (int)(left / 1000) + 1 : 0);
    for (const char *line = r.text; *line;) {
        int len = (int)strcspn(line, "\n");
        printf("     child stderr: %.*s\n", len, line);
        line += len + (line[len] == '\n');
    }
    return r;
}

/* A misuse child names the bad pointer first ("bad pointer 0x..."), so
 * that the parent can check hakmem's message names that same address. */
static inline void hak_announce(const void *p)
{
    fprintf(stderr, "bad pointer %p\n", p);
}

#define HAK_MESSAGE_PREFIX "hakmem: error:"

/* The child died by SIGABRT after exactly one line of hakmem's, ending its
 * stderr, which contains `words` and names the announced pointer (the
 * message is only checked where malloc is hakmem's under its own names). */
static inline void hak_check_misuse_report(const hak_child_report *r, const char *words)
{
    CHECKF(WIFSIGNALED(r->status) && WTERMSIG(r->status) == SIGABRT,
           "child status 0x%x, want death by SIGABRT; stderr: %s", r->status, r->text);
#ifdef HAK_TEST_STANDARD_NAMES
    const char *bad = strstr(r->text, "bad pointer 0x");
    CHECK(bad != NULL);
    unsigned long long want = strtoull(bad + strlen("bad pointer "), NULL, 16);

    const char *msg = strstr(r->text, HAK_MESSAGE_PREFIX);
    CHECKF(msg != NULL, "no \"" HAK_MESSAGE_PREFIX "\" in stderr: %s", r->text);
    CHECKF(strstr(msg + 1, HAK_MESSAGE_PREFIX) == NULL, "more than one message: %s", r->text);
    const char *eol = strchr(msg, '\n');
    CHECKF(eol != NULL, "message not ended by a newline: %s", msg);
    CHECKF(eol[1] == '\0', "more output after the message line: %s", msg);
    size_t len = (size_t)(eol - msg);
    CHECKF((const char *)memmem(msg, len, words, strlen(words)) != NULL, "\"%s\" not in: %.*s", words, (int)len, msg);
    const char *hex = (const char *)memmem(msg, len, "0x", 2);
    CHECKF(hex != NULL, "no address in: %.*s", (int)len, msg);
    unsigned long long named = strtoull(hex, NULL, 16);
    CHECKF(named == want, "message names 0x%llx, the bad pointer is 0x%llx", named, want);
#else
    (void)words; /* other allocators word their messages differently */
#endif
}

#define CHECK_CHILD_EXITED_0(status)                                         \
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0,                    \
           "child status 0x%x (%s %d)", (status),                            \
           WIFSIGNALED(status) ? "signal" : "exit code",                     \
           WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status))

/* ---- a watchdog for deadlocks ---------------------------------------------- */

static const char *hak_watchdog_what;

static void hak_watchdog_fired(int sig)
{
    (void)sig;
    static const char head[] = "FAIL: ", tail[] = " did not finish within the watchdog's time: deadlock\n";
    ssize_t w = write(STDERR_FILENO, head, sizeof head - 1);
    w = write(STDERR_FILENO, hak_watchdog_what, strlen(hak_watchdog_what));
    w = write(STDERR_FILENO, tail, sizeof tail - 1);
    (void)w;
    _exit(1);
}

/* Fail the test (from a SIGALRM handler) unless alarm(0) disarms the
 * watchdog within `seconds`: a deadlock is reported, not waited for. */
static inline void hak_watchdog_arm(unsigned seconds, const char *what)
{
    hak_watchdog_what = what;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = hak_watchdog_fired;
    CHECK(sigaction(SIGALRM, &sa, NULL) == 0);
    alarm(seconds);
}

#ifdef __cplusplus
/* ---- C++: standard containers ------------------------------------------------ */

#include <map>
#include <string>
#include <vector>

/* Standard containers, whose allocators call the plain operator new and
 * the sized deletes, grown and shrunk. */
static inline void hak_exercise_containers(void)
{
    std::map<int, std::string> m;
    std::vector<std::vector<int>> v;
    for (int i = 0; i < 2000; i++) {
        m[i] = std::string((size_t)(i % 300), 'z');
        v.emplace_back((size_t)(i % 50), i);
        if (i % 3 == 0) m.erase(i / 2);
    }
    CHECK(m.size() > 1000 && v.size() == 2000);
}
#endif

#endif
