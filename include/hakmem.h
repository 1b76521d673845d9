/* hakmem — a general-purpose memory allocator.
 *
 * Linking with -lhakmem (or LD_PRELOAD=libhakmem.so) replaces the standard
 * malloc family. The hak_* functions below are the same allocator under its
 * own names, for programs that want hakmem beside another malloc. */
#ifndef HAKMEM_H
#define HAKMEM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header: the one place it is written (the build reads
 * it from here). hak_version() gives the library's, as HAKMEM_VERSION. */
#define HAKMEM_VERSION_MAJOR 0
#define HAKMEM_VERSION_MINOR 1
#define HAKMEM_VERSION_PATCH 0
#define HAKMEM_VERSION (HAKMEM_VERSION_MAJOR * 10000 + HAKMEM_VERSION_MINOR * 100 + HAKMEM_VERSION_PATCH)

#define HAKMEM_API __attribute__((visibility("default")))

HAKMEM_API void  *hak_malloc(size_t size);
HAKMEM_API void   hak_free(void *p);
HAKMEM_API void  *hak_calloc(size_t count, size_t size);
HAKMEM_API void  *hak_realloc(void *p, size_t size);
HAKMEM_API void  *hak_reallocarray(void *p, size_t count, size_t size);
HAKMEM_API int    hak_posix_memalign(void **out, size_t alignment, size_t size);
HAKMEM_API void  *hak_aligned_alloc(size_t alignment, size_t size);
HAKMEM_API void  *hak_memalign(size_t alignment, size_t size);
HAKMEM_API void  *hak_valloc(size_t size);
HAKMEM_API void  *hak_pvalloc(size_t size);
HAKMEM_API size_t hak_malloc_usable_size(const void *p);

/* The usable size malloc(size) gives at least, without allocating (like
 * jemalloc's nallocx, but a lower bound): malloc_usable_size(malloc(size))
 * >= hak_good_size(size) >= size. They are equal except in three cases. A
 * thread's first 64 small blocks (up to 8 KiB), and those it allocates
 * after its heap was given up at exit (in late thread-exit destructors),
 * are whole cache lines: the size rounded up to a multiple of 64 bytes (at
 * least 64), then to a size class below 1 KiB and above 4 KiB; between, this
 * gives that multiple of 64, so a thread's other blocks of 1 to 4 KiB,
 * whose classes are 128 or 256 bytes apart, hold up to 192 bytes more. A
 * huge block reused from the cache of freed ones may hold up to an eighth
 * more. 0 if malloc(size) must fail. libhakmem-secure gives exactly `size`
 * (so also 0 for malloc(0), whose block has no usable byte there). */
HAKMEM_API size_t hak_good_size(size_t size);

/* C23 free_sized / free_aligned_sized (also exported under those names when
 * hakmem replaces malloc): free p, allocated with this size (and alignment,
 * by aligned_alloc). The size is checked in debug builds, and must be exactly
 * the size asked for in the secure variant. */
HAKMEM_API void   hak_free_sized(void *p, size_t size);
HAKMEM_API void   hak_free_aligned_sized(void *p, size_t alignment, size_t size);

HAKMEM_API int    hak_version(void);

/* Return free memory to the OS now (what malloc_trim(0) does). */
HAKMEM_API void   hak_collect(void);

/* Statistics: the text report on stderr, or one JSON object, written to fd.
 * Per-class call counts need HAKMEM_STATS set at start-up; the rest (live
 * blocks, pages, segments, memory) is always there. */
HAKMEM_API void   hak_stats_print(void);
HAKMEM_API void   hak_stats_write_json(int fd);

#ifdef __cplusplus
}
#endif

#endif
