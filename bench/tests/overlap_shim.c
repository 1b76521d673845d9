/* A deliberately broken allocator for the verification pass's own test:
 * a bump allocator whose blocks of 1-8 KiB overlap the next block's first
 * 32 bytes (the shape of a real shim bug the sparse workload stamps
 * missed). Everything else is correct: alignment, usable size, calloc
 * zeroes, realloc copies. Never frees. Preloaded by test_verify.py only. */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#define ARENA (4UL << 30)
#define GRAIN 16

static unsigned char *arena;
static uint32_t *sizes; /* requested size per GRAIN of arena; 0 = no block */
static size_t used;

static int arena_init(void)
{
    if (arena) return 1;
    arena = mmap(NULL, ARENA, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    sizes = mmap(NULL, ARENA / GRAIN * sizeof *sizes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return arena != MAP_FAILED && sizes != MAP_FAILED;
}

static void *bump(size_t size, size_t align)
{
    if (!arena_init() || size >= UINT32_MAX) return NULL;
    if (align < GRAIN) align = GRAIN;
    size_t off = (used + align - 1) & ~(align - 1);
    size_t step = size ? size : 1;
    if (size >= 1024 && size <= 8192) step -= 32; /* the bug: the next block starts 32 bytes early */
    step = (step + GRAIN - 1) & ~(size_t)(GRAIN - 1);
    if (off + step + size > ARENA) return NULL;
    used = off + step;
    sizes[off / GRAIN] = (uint32_t)(size ? size : 1);
    return arena + off;
}

static size_t size_of(const void *p) { return sizes[((const unsigned char *)p - arena) / GRAIN]; }

void *malloc(size_t size) { return bump(size, GRAIN); }
void free(void *p) { (void)p; }
void *calloc(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size) return NULL;
    void *p = bump(n * size, GRAIN);
    if (p) memset(p, 0, n * size);
    return p;
}
void *realloc(void *old, size_t size)
{
    void *p = bump(size, GRAIN);
    if (p && old) memcpy(p, old, size_of(old) < size ? size_of(old) : size);
    return p;
}
void *memalign(size_t align, size_t size) { return bump(size, align); }
void *aligned_alloc(size_t align, size_t size) { return bump(size, align); }
int posix_memalign(void **out, size_t align, size_t size)
{
    void *p = bump(size, align);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}
size_t malloc_usable_size(void *p) { return p ? size_of(p) : 0; }
