/* Shared helpers for the hakmem benchmark workloads: argument parsing, a
 * seeded RNG, timing, and block stamping/verification.
 *
 * Every workload writes a pattern derived from a per-block key into each
 * block it allocates and checks it before freeing, so an allocator that
 * hands out overlapping or recycled-while-live memory fails loudly (exit 2)
 * instead of winning on speed. Workloads are linked against plain glibc;
 * the runner chooses the allocator with LD_PRELOAD. */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#ifndef _GNU_SOURCE /* g++ defines it */
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- failure ---- */

#define die(...) do { fprintf(stderr, "%s: ", bench_name); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(2); } while (0)

static const char *bench_name = "bench";

static inline void *xmalloc(size_t size)
{
    void *p = malloc(size);
    if (!p) die("malloc(%zu) returned NULL", size);
    return p;
}

/* Keeps the compiler from eliding a malloc/free pair whose block it can see
 * is otherwise unused. */
static inline void escape(void *p) { __asm__ volatile("" : : "g"(p) : "memory"); }

/* ---- arguments: --name=value, every one optional, unknown ones rejected ---- */

static int bench_argc;
static char **bench_argv;
static unsigned char bench_arg_used[64];

static inline void args_init(int argc, char **argv)
{
    bench_name = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    if (argc > 64) die("too many arguments");
    bench_argc = argc;
    bench_argv = argv;
}

static inline const char *arg_str(const char *name, const char *def)
{
    size_t len = strlen(name);
    for (int i = 1; i < bench_argc; i++) {
        const char *a = bench_argv[i];
        if (strncmp(a, "--", 2) == 0 && strncmp(a + 2, name, len) == 0 && a[2 + len] == '=') {
            bench_arg_used[i] = 1;
            return a + 3 + len;
        }
    }
    return def;
}

static inline long arg_long(const char *name, long def)
{
    const char *s = arg_str(name, NULL);
    if (!s) return def;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end == 'K' || *end == 'k') { v <<= 10; end++; }
    else if (*end == 'M' || *end == 'm') { v <<= 20; end++; }
    if (*end || end == s) die("bad value for --%s: %s", name, s);
    return v;
}

/* Call after the last arg_*(): a misspelt option must not silently become
 * the default. */
static inline void args_done(void)
{
    for (int i = 1; i < bench_argc; i++)
        if (!bench_arg_used[i]) die("unknown argument: %s", bench_argv[i]);
}

/* ---- RNG: splitmix64, deterministic for a given seed ---- */

typedef struct { uint64_t state; } rng_t;

static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline rng_t rng_seed(uint64_t seed, uint64_t stream)
{
    rng_t r = { mix64(seed * 0x9e3779b97f4a7c15ULL + stream) };
    return r;
}

static inline uint64_t rng_next(rng_t *r)
{
    return mix64(r->state += 0x9e3779b97f4a7c15ULL);
}

/* Uniform in [0, n). */
static inline uint64_t rng_below(rng_t *r, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)rng_next(r) * n) >> 64);
}

/* Uniform in [lo, hi]. */
static inline size_t rng_uniform(rng_t *r, size_t lo, size_t hi)
{
    return lo + rng_below(r, hi - lo + 1);
}

/* Log-uniform in [lo, hi]: equal odds for every factor of two of size,
 * which is closer to real programs (many small blocks, few big ones) than
 * uniform. The exponent is drawn continuously, so a range whose end is a
 * power of two does not pile a whole band onto that one size. */
static inline size_t rng_log_uniform(rng_t *r, size_t lo, size_t hi)
{
    double u = (double)(rng_next(r) >> 11) * 0x1p-53;   /* [0, 1) */
    size_t size = (size_t)((double)lo * exp(u * log((double)(hi + 1) / (double)lo)));
    return size < lo ? lo : size > hi ? hi : size;
}

/* ---- stamping: one word per 4 KiB page plus the last word (page words
 * stop short of the last word so the two never overlap) ----
 * Cheap enough for every block, touches every page of a large block (so RSS
 * is real), and catches overlap, truncation and moved-but-not-copied data. */

static inline uint64_t stamp_word(uint64_t key, size_t off) { return key ^ (off * 0x100000001b3ULL); }

static inline void stamp(void *p, size_t size, uint64_t key)
{
    unsigned char *b = (unsigned char *)p;
    if (size < 8) {
        for (size_t i = 0; i < size; i++) b[i] = (unsigned char)(key >> (8 * i));
        return;
    }
    for (size_t off = 0; off + 16 <= size; off += 4096) {
        uint64_t w = stamp_word(key, off);
        memcpy(b + off, &w, 8);
    }
    uint64_t w = stamp_word(key, size - 8);
    memcpy(b + size - 8, &w, 8);
}

/* Sparse check that a calloc'd block is zero at every word stamp() writes,
 * so a dirty recycled block shows before the program stamps it. */
static inline void check_zero(const void *p, size_t size)
{
    const unsigned char *b = (const unsigned char *)p;
    for (size_t off = 0; off < size; off += 4096)
        for (size_t i = off; i < off + 8 && i < size; i++)
            if (b[i]) die("calloc'd block %p (size %zu) not zero at byte %zu", p, size, i);
    for (size_t i = size > 8 ? size - 8 : 0; i < size; i++)
        if (b[i]) die("calloc'd block %p (size %zu) not zero at byte %zu", p, size, i);
}

static inline void check(const void *p, size_t size, uint64_t key)
{
    const unsigned char *b = (const unsigned char *)p;
    if (size < 8) {
        for (size_t i = 0; i < size; i++)
            if (b[i] != (unsigned char)(key >> (8 * i)))
                die("corrupt block %p (size %zu) at byte %zu", p, size, i);
        return;
    }
    for (size_t off = 0; off + 16 <= size; off += 4096) {
        uint64_t w;
        memcpy(&w, b + off, 8);
        if (w != stamp_word(key, off)) die("corrupt block %p (size %zu) at offset %zu", p, size, off);
    }
    uint64_t w;
    memcpy(&w, b + size - 8, 8);
    if (w != stamp_word(key, size - 8)) die("corrupt block %p (size %zu) at its end", p, size);
}

/* A live block a workload keeps track of. */
typedef struct {
    void *p;
    size_t size;
    uint64_t key;
} block_t;

static inline void block_alloc(block_t *b, size_t size, uint64_t key)
{
    b->p = xmalloc(size);
    b->size = size;
    b->key = key;
    stamp(b->p, size, key);
}

static inline void block_free(block_t *b)
{
    check(b->p, b->size, b->key);
    free(b->p);
    b->p = NULL;
}

/* ---- threads ---- */

/* Runs fn on n threads, thread i getting (char *)args + i * stride, and joins. */
static inline void run_threads(int n, void *(*fn)(void *), void *args, size_t stride)
{
    pthread_t *tids = (pthread_t *)xmalloc(sizeof *tids * (size_t)n);
    for (int i = 0; i < n; i++)
        if (pthread_create(&tids[i], NULL, fn, (char *)args + (size_t)i * stride))
            die("pthread_create failed");
    for (int i = 0; i < n; i++) pthread_join(tids[i], NULL);
    free(tids);
}

/* ---- time and memory ---- */

static inline double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Current resident set size, from /proc/self/statm. */
static inline long rss_kb(void)
{
    long pages_total, pages_resident;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%ld %ld", &pages_total, &pages_resident) != 2) die("cannot read /proc/self/statm");
    fclose(f);
    return pages_resident * (sysconf(_SC_PAGESIZE) / 1024);
}

#endif
