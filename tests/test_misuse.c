/* Heap misuse by class and size, against each variant. Every case runs in
 * a forked child (hak_run_in_child) and states which variants must stop it
 * and which must not (it runs to its end): those that stop it must die by
 * SIGABRT after hakmem's one line naming the kind of misuse and the
 * address (or, for the guard pages, by SIGSEGV); the outcome of each case
 * is printed.
 *
 * Built twice: test_misuse (libhakmem.so, the default variant) and
 * test_misuse_secure (libhakmem-secure.so, HAK_TEST_SECURE). Built by hand
 * with -DHAK_TEST_LIBC it runs the same table against the C library and
 * checks nothing, for comparison:
 *   cc -O1 -DHAK_TEST_LIBC -Iinclude -Isrc tests/test_misuse.c -o /tmp/misuse_libc -lstdc++ -lpthread
 * glibc 2.36 stops 15 of 38: the double and interior frees (also after a
 * write), the medium
 * overflow by 32 and the underflows (both rewrite a chunk header), the
 * large use-after-free write (the block was unmapped), and the overflows
 * a page past a large and a huge block, also after realloc (the writes
 * leave their mappings), and the read past a large block shrunk by realloc
 * (its mapping shrank); it misses the 1-byte overflows, the small and
 * large 32-byte overflows, the small and medium use-after-free writes (also
 * after the freeing thread exited), the reads past a large block and an
 * aligned one, every new/delete mismatch, every sized delete of another
 * size and the double free of a giant block whose address was handed out
 * again (README.md, "Hardening"). A sized delete of the size allocated must
 * pass in every variant (sized_deletes_of_the_size_allocated_pass). */
#include "hak_test.h"
#ifndef HAK_TEST_LIBC
#include "internal.h"   /* HAK_SEGMENT_SIZE, HAK_META_SIZE: the guard page */
_Static_assert(HAK_TEST_YOUNG_ALLOCS >= HAK_YOUNG_ALLOCS, "hak_thread_own_heap allocates too few");
#endif

enum { DEFAULT = 1, SECURE = 2 };

#if defined(HAK_TEST_LIBC)
#define VARIANT 0
#define VARIANT_NAME "glibc"
#elif defined(HAK_TEST_SECURE)
#define VARIANT SECURE
#define VARIANT_NAME "secure"
#else
#define VARIANT DEFAULT
#define VARIANT_NAME "default"
#endif

#define SMALL  ((size_t)32)
#define MEDIUM (100 * KiB)
#define LARGE  (2 * MiB)
#define HUGE_SIZE (40 * MiB)
#define OS_PAGE ((size_t)4096)

/* ---- overflows: the bytes right after the request ------------------------ */

/* Each case first gives the child's thread a heap of its own
 * (hak_thread_own_heap): small blocks then come from the thread's own pages,
 * whose frees take the owner's fast path, and not from the shared heap a
 * thread starts on, whose frees all take the generic path. */

static void overflow_of(size_t size, size_t by)
{
    hak_thread_own_heap();
    char *p = malloc(size);
    CHECK(p != NULL);
    memset(p, 1, size);
    hak_announce(p);
    memset(hak_opaque_ptr(p + size), 'x', by);
    free(p);
}

static void overflow_1_small(void) { overflow_of(SMALL, 1); }
static void overflow_1_medium(void) { overflow_of(MEDIUM, 1); }
static void overflow_1_large(void) { overflow_of(LARGE, 1); }
static void overflow_32_small(void) { overflow_of(SMALL, 32); }
static void overflow_32_medium(void) { overflow_of(MEDIUM, 32); }
static void overflow_32_large(void) { overflow_of(LARGE, 32); }

static void overflow_1_then_realloc(void)
{
    hak_thread_own_heap();
    char *p = malloc(SMALL);
    CHECK(p != NULL);
    hak_announce(p);
    ((char *)hak_opaque_ptr(p))[SMALL] = 'x';
    hak_opaque_ptr(realloc(p, 4 * SMALL));
}

/* ---- underflow: the byte before a block is the end of the block before it */

static void underflow_of(size_t size)
{
    enum { N = 256 };
    size_t n = size <= 1024 ? N : 4;
    hak_thread_own_heap();
    char *blocks[N];
    for (size_t i = 0; i < n; i++) CHECK((blocks[i] = malloc(size)) != NULL);
    /* The closest two blocks are neighbours of one page (fresh blocks may be
     * carved in random order, but 256 of one class have neighbours). */
    char *a = NULL, *b = NULL;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++)
            if (blocks[j] > blocks[i] && (a == NULL || blocks[j] - blocks[i] < b - a)) {
                a = blocks[i];
                b = blocks[j];
            }
    CHECKF(a != NULL && (size_t)(b - a) < 2 * size, "no two neighbouring blocks of %zu bytes", size);
    hak_announce(a);   /* the block whose end the underflow overwrites */
    ((char *)hak_opaque_ptr(b))[-1] ^= 0x5a;   /* a write that changes the byte, whatever it held */
    free(b);
    free(a);
}

static void underflow_small(void) { underflow_of(SMALL); }
static void underflow_medium(void) { underflow_of(MEDIUM); }

/* ---- use after free: a write into a freed block ------------------------- */

/* A block of `size` bytes of the thread's own heap, written whole, then
 * freed. */
static char *freed_block(size_t size)
{
    hak_thread_own_heap();
    char *p = malloc(size);
    CHECK(p != NULL);
    memset(p, 1, size);
    free(p);
    return p;
}

/* The misuse: freed block p written at byte `at` (announced first). */
static void write_freed(char *p, size_t at)
{
    hak_announce(p);
    ((char *)hak_opaque_ptr(p))[at] = 'x';
}

static void use_after_free_write_of(size_t size)
{
    char *p = freed_block(size);
    write_freed(p, 0);
    for (int i = 0; i < 100; i++) free(malloc(size));   /* whatever holds blocks of its size lets p go */
}

/* A block freed by a thread that then exits, written after. */
static void *free_and_exit(void *p)
{
    hak_thread_own_heap();
    free(p);
    return NULL;
}

static void *exit_with_a_full_quarantine(void *arg)
{
    hak_thread_own_heap();   /* (its frees fill its quarantine, which its exit hands on) */
    return arg;
}

static void use_after_free_write_after_exit(void)
{
    hak_thread_own_heap();
    char *p = malloc(SMALL);
    CHECK(p != NULL);
    memset(p, 1, SMALL);
    pthread_join(hak_thread_start(free_and_exit, p), NULL);
    hak_announce(p);
    ((char *)hak_opaque_ptr(p))[16] = 'x';   /* (past the link and tag the default variant keeps there) */
    pthread_join(hak_thread_start(exit_with_a_full_quarantine, NULL), NULL);
}

/* A small block written after its free, after two large blocks were freed:
 * they do not push it out of quarantine before the write (they wait in a
 * ring of their own, bounded in bytes; a shared bound let them). */
static void use_after_free_write_after_large_frees(void)
{
    char *p = freed_block(SMALL);
    for (int i = 0; i < 2; i++) free(malloc(LARGE));
    write_freed(p, 16);
    for (int i = 0; i < 100; i++) free(malloc(SMALL));   /* p leaves quarantine */
}

/* A medium block written after its free, the thread then only allocating
 * small blocks: it leaves quarantine (its fill checked) at the heap's
 * heartbeat, every few thousand mallocs, not only when more blocks of
 * its size are freed. */
static void use_after_free_write_then_small_mallocs(void)
{
    char *p = freed_block(MEDIUM);
    write_freed(p, 16);
    static void *small[64];
    for (int i = 0; i < 20000; i++) {   /* (more than two heartbeats) */
        int k = i % 64;
        free(small[k]);
        small[k] = malloc(SMALL);
    }
}

static void use_after_free_write_small(void) { use_after_free_write_of(SMALL); }
static void use_after_free_write_medium(void) { use_after_free_write_of(MEDIUM); }
static void use_after_free_write_large(void) { use_after_free_write_of(LARGE); }

/* ---- double and interior frees ------------------------------------------- */

static void double_free_of(size_t size)
{
    hak_thread_own_heap();
    char *p = malloc(size);
    CHECK(p != NULL);
    hak_announce(p);
    free(p);
    free(hak_opaque_ptr(p));
}

/* A medium block freed, left quarantine (into its class's ring of recent
 * blocks), its second word (the free tag) written, then freed again: it
 * then came out of the ring twice, to two owners (an attack helper's
 * program). Stopped at the second pop. (The default build, which does not
 * look for writes after free, hands it out twice.) */
static void double_free_after_a_write_medium(void)
{
    enum { SIZE = 10000 };
    hak_thread_own_heap();
    void *keep[8], *others[128];
    for (int i = 0; i < 8; i++) CHECK((keep[i] = malloc(SIZE)) != NULL);   /* its page stays in use */
    for (int i = 0; i < 128; i++) CHECK((others[i] = malloc(2 * SIZE)) != NULL);   /* (another class: another page) */
    long *x = malloc(SIZE);
    CHECK(x != NULL);
    hak_announce(x);
    free(x);
    for (int i = 0; i < 64; i++) free(others[i]);   /* x leaves quarantine */
    ((volatile long *)hak_opaque_ptr(x))[1] = 0;
    free(hak_opaque_ptr(x));
    for (int i = 64; i < 128; i++) free(others[i]);   /* and leaves it again */
    char *a = malloc(SIZE), *b = malloc(SIZE);   /* (the default variant: x both times, unseen) */
    CHECK(a != NULL && b != NULL);
    for (int i = 0; i < 8; i++) free(keep[i]);
}

/* A block aligned beyond 16 MiB (giant: a mapping of its own, no
 * quarantine) freed twice, a block of the same kind taken between: the
 * OS hands its address out again, so the second free freed the new block
 * (in the default variant, it may still). */
static void double_free_giant_after_reuse(void)
{
    char *p = aligned_alloc(32 * MiB, 64);
    CHECK(p != NULL);
    hak_announce(p);
    free(p);
    char *q = aligned_alloc(32 * MiB, 64);   /* (kept: the second free of p must not free it) */
    CHECK(q != NULL);
    free(hak_opaque_ptr(p));
}

static void double_free_small(void) { double_free_of(SMALL); }
static void double_free_medium(void) { double_free_of(MEDIUM); }
static void double_free_large(void) { double_free_of(LARGE); }

static void interior_free_of(size_t size, size_t offset)
{
    hak_thread_own_heap();
    char *p = malloc(size);
    CHECK(p != NULL);
    hak_announce(p + offset);
    free(hak_opaque_ptr(p + offset));
}

static void interior_free_small(void) { interior_free_of(SMALL, 16); }
static void interior_free_medium(void) { interior_free_of(MEDIUM, 4 * KiB); }
static void interior_free_large(void) { interior_free_of(LARGE, 64 * KiB); }

/* The C23 sized frees (hakmem's names: glibc 2.36 has none): their misuse
 * is reported as the free it is (the debug build's size check once looked
 * the block up as malloc_usable_size would, and named that call), and a
 * wrong size (checked in the debug and secure builds) by the call given it. */
#ifndef HAK_TEST_LIBC
static void double_free_sized(void)
{
    hak_thread_own_heap();
    char *p = malloc(SMALL);
    CHECK(p != NULL);
    hak_announce(p);
    free(p);
    hak_free_sized(hak_opaque_ptr(p), SMALL);
}

static void interior_free_aligned_sized(void)
{
    hak_thread_own_heap();
    char *p = aligned_alloc(64, 2 * SMALL);
    CHECK(p != NULL);
    hak_announce(p + 16);
    hak_free_aligned_sized(hak_opaque_ptr(p + 16), 64, 2 * SMALL - 16);
}

static void free_aligned_sized_wrong_size(void)
{
    hak_thread_own_heap();
    char *p = aligned_alloc(64, 2 * SMALL);
    CHECK(p != NULL);
    hak_announce(p);
    hak_free_aligned_sized(hak_opaque_ptr(p), 64, 4 * KiB);
}
#endif

/* ---- C++ new and delete of another family ------------------------------- */

/* The operators called by their names, the Itanium C++ ABI's, which is what
 * `new T`, `new T[n]`, `new T` of an over-aligned T, `delete p` and
 * `delete[] p` compile to (a C++ compiler would also warn about the
 * mismatches themselves). */
void *_Znwm(size_t);                          /* operator new(size_t) */
void *_Znam(size_t);                          /* operator new[](size_t) */
void *_ZnwmSt11align_val_t(size_t, size_t);   /* operator new(size_t, align_val_t) */
void _ZdlPv(void *);                          /* operator delete(void *) */
void _ZdaPv(void *);                          /* operator delete[](void *) */

/* One case: a SMALL block from `alloc`, handed to `release`. */
static void alloc_then_release(void *(*alloc)(size_t), void (*release)(void *))
{
    hak_thread_own_heap();
    char *p = alloc(SMALL);
    CHECK(p != NULL);
    hak_announce(p);
    release(hak_opaque_ptr(p));
}

static void *new_aligned_64(size_t size) { return _ZnwmSt11align_val_t(size, 64); }

static void malloc_then_delete(void) { alloc_then_release(malloc, _ZdlPv); }
static void new_then_free(void) { alloc_then_release(_Znwm, free); }
static void new_array_then_delete(void) { alloc_then_release(_Znam, _ZdlPv); }
static void new_then_delete_array(void) { alloc_then_release(_Znwm, _ZdaPv); }
static void new_aligned_then_delete(void) { alloc_then_release(new_aligned_64, _ZdlPv); }

/* ---- C++ sized delete with the wrong size -------------------------------- */

/* `delete p` of a complete type compiles to the sized form, which passes
 * sizeof the static type: through a pointer to a base class without a
 * virtual destructor, the size is not the one allocated. */
void _ZdlPvm(void *, size_t);                          /* operator delete(void *, size_t) */
void _ZdaPvm(void *, size_t);                          /* operator delete[](void *, size_t) */
void _ZdlPvmSt11align_val_t(void *, size_t, size_t);   /* operator delete(void *, size_t, align_val_t) */

enum { PLAIN_NEW, ARRAY_NEW, ALIGNED_NEW };

/* A block of `size` bytes from the `form` of new, deleted by its sized
 * delete giving `given`. */
static void sized_delete_of(int form, size_t size, size_t given)
{
    hak_thread_own_heap();
    char *p = form == ARRAY_NEW ? _Znam(size) : form == ALIGNED_NEW ? _ZnwmSt11align_val_t(size, 64) : _Znwm(size);
    CHECK(p != NULL);
    hak_announce(p);
    p = hak_opaque_ptr(p);
    if (form == ARRAY_NEW) _ZdaPvm(p, given);
    else if (form == ALIGNED_NEW) _ZdlPvmSt11align_val_t(p, given, 64);
    else _ZdlPvm(p, given);
}

/* The size allocated: no variant stops it. */
static void sized_deletes_of_the_size_allocated_pass(void)
{
    sized_delete_of(PLAIN_NEW, SMALL, SMALL);
    sized_delete_of(PLAIN_NEW, MEDIUM, MEDIUM);
    sized_delete_of(PLAIN_NEW, LARGE, LARGE);
    sized_delete_of(ARRAY_NEW, 3 * SMALL, 3 * SMALL);
    sized_delete_of(ALIGNED_NEW, SMALL, SMALL);
}
static void sized_delete_wrong_small(void) { sized_delete_of(PLAIN_NEW, SMALL, SMALL / 2); }
static void sized_delete_wrong_medium(void) { sized_delete_of(PLAIN_NEW, MEDIUM, MEDIUM - 8); }
static void sized_delete_wrong_large(void) { sized_delete_of(PLAIN_NEW, LARGE, LARGE + 8); }
static void sized_delete_array_wrong(void) { sized_delete_of(ARRAY_NEW, 3 * SMALL, SMALL); }
static void sized_delete_aligned_wrong(void) { sized_delete_of(ALIGNED_NEW, SMALL, SMALL / 2); }

/* ---- past the end of large and huge blocks ------------------------------- */

/* A linear overflow from the end of the request to one OS page past it,
 * and a read there: in the secure variant the page after the block is a
 * guard page (the 8-byte canary trailer rounds a request of whole pages up
 * by one page, so the guard lies within a page and a byte of its end). */
static void overflow_page_of(size_t size)
{
    hak_thread_own_heap();
    char *p = malloc(size);
    CHECK(p != NULL);
    memset(p, 1, size);
    hak_announce(p);
    memset(hak_opaque_ptr(p + size), 'x', OS_PAGE + 1);
    free(p);
}

static void overflow_page_large(void) { overflow_page_of(LARGE); }
static void overflow_page_huge(void) { overflow_page_of(HUGE_SIZE); }

/* A huge block grown and shrunk by realloc (in place or moved by mremap in
 * the secure variant): its guard page and canary follow its new end. */
static char *huge_reallocated(void)
{
    hak_thread_own_heap();
    char *p = malloc(HUGE_SIZE / 4);
    CHECK(p != NULL);
    memset(p, 1, HUGE_SIZE / 4);
    CHECK((p = realloc(p, HUGE_SIZE)) != NULL);
    CHECK((p = realloc(p, HUGE_SIZE / 2 + 100)) != NULL);
    CHECK(hak_first_not(p, HUGE_SIZE / 4, 1) == SIZE_MAX);
    hak_announce(p);
    return p;
}

static void overflow_page_huge_realloc(void)
{
    char *p = huge_reallocated();
    memset(hak_opaque_ptr(p + HUGE_SIZE / 2 + 100), 'x', OS_PAGE + 1);
    free(p);
}

static void overflow_1_huge_realloc(void)
{
    char *p = huge_reallocated();
    ((char *)hak_opaque_ptr(p))[HUGE_SIZE / 2 + 100] = 'x';
    free(p);
}

static void read_page_past_large(void)
{
    hak_thread_own_heap();
    char *p = malloc(LARGE);
    CHECK(p != NULL);
    memset(p, 1, LARGE);
    hak_announce(p);
    char c = *(volatile char *)hak_opaque_ptr(p + LARGE + OS_PAGE);
    fprintf(stderr, "read 0x%02x\n", (unsigned char)c);
    free(p);
}

/* A read a page past a large block's request after realloc shrank it (3
 * to 2 MiB), and past a large block aligned to 64 KiB: the guard follows
 * the request in both (it once stayed at the old end, and at the end of
 * the request rounded up to the alignment, up to 64 KiB further). */
static void read_page_past(char *p, size_t size)
{
    hak_announce(p);
    char c = *(volatile char *)hak_opaque_ptr(p + size + OS_PAGE);
    fprintf(stderr, "read 0x%02x\n", (unsigned char)c);
    free(p);
}

static void read_page_past_large_shrunk(void)
{
    hak_thread_own_heap();
    char *p = malloc(LARGE + LARGE / 2);
    CHECK(p != NULL && (p = realloc(p, LARGE)) != NULL);
    read_page_past(p, LARGE);
}

/* A read a page past a giant block's request (aligned beyond 16 MiB: a
 * mapping of its own, with no guard page) after realloc shrank it (8 to
 * 5 MiB): the block moves to one with a guard page (it was shrunk in place,
 * keeping the pages past its request, and a slack over 512 MiB put its
 * canary short of the request: secure.c, fits_in_place). The default
 * variant keeps it in place, the read landing in its own pages. */
static void read_page_past_giant_shrunk(void)
{
    void *p = aligned_alloc(32 * MiB, 8 * MiB);
    CHECK(p != NULL && (p = realloc(p, 5 * MiB)) != NULL);
    read_page_past(p, 5 * MiB);
}

static void read_page_past_aligned_large(void)
{
    hak_thread_own_heap();
    void *p = NULL;
    CHECK(posix_memalign(&p, 64 * KiB, LARGE) == 0);
    read_page_past(p, LARGE);
}

/* ---- the guard page below the first data slice of a segment ------------- */

#ifndef HAK_TEST_LIBC
static void underflow_into_segment_metadata(void)
{
    char *p = malloc(SMALL);
    CHECK(p != NULL);
    char *segment = (char *)((uintptr_t)p & ~(uintptr_t)(HAK_SEGMENT_SIZE - 1));
    *(volatile char *)hak_opaque_ptr(segment + HAK_META_SIZE - 1) = 'x';
}
#endif

/* Each variant either stops a case (must_stop) or must let it run to its
 * end; the C library's outcome is only printed. */
static const struct misuse {
    const char *name;
    void (*fn)(void);
    int must_stop;          /* variants that must stop it; the others must not, */
    const char *words;      /* in hakmem's one-line message; NULL: SIGSEGV */
    int may_stop;           /* except these, which may stop it or not (stopped by a report, it must hold words) */
} misuses[] = {
    { "overflow by 1, small", overflow_1_small, SECURE, "heap overflow", 0 },
    { "overflow by 1, medium", overflow_1_medium, SECURE, "heap overflow", 0 },
    { "overflow by 1, large", overflow_1_large, SECURE, "heap overflow", 0 },
    { "overflow by 32, small", overflow_32_small, SECURE, "heap overflow", 0 },
    { "overflow by 32, medium", overflow_32_medium, SECURE, "heap overflow", 0 },
    { "overflow by 32, large", overflow_32_large, SECURE, "heap overflow", 0 },
    { "overflow by 1, found by realloc", overflow_1_then_realloc, SECURE, "found by realloc", 0 },
    { "underflow into the block before, small", underflow_small, SECURE, "heap overflow", 0 },
    { "underflow into the block before, medium", underflow_medium, SECURE, "heap overflow", 0 },
    { "use-after-free write, small", use_after_free_write_small, SECURE, "use-after-free write", 0 },
    { "use-after-free write, medium", use_after_free_write_medium, SECURE, "use-after-free write", 0 },
    { "use-after-free write, large", use_after_free_write_large, SECURE, "use-after-free write", 0 },
    { "use-after-free write, after the freeing thread exited", use_after_free_write_after_exit, SECURE,
      "use-after-free write", 0 },
    { "use-after-free write, small, after two large frees", use_after_free_write_after_large_frees, SECURE,
      "use-after-free write", 0 },
    { "use-after-free write, medium, then only small mallocs", use_after_free_write_then_small_mallocs, SECURE,
      "use-after-free write", 0 },
    { "double free, small", double_free_small, DEFAULT | SECURE, "double free", 0 },
    { "double free, medium", double_free_medium, DEFAULT | SECURE, "double free", 0 },
    { "double free, large", double_free_large, DEFAULT | SECURE, "double free", 0 },
    { "double free, giant, its address handed out again", double_free_giant_after_reuse, SECURE, "freed already",
      DEFAULT },
    /* (The message names what is seen first: the free list corrupted, or
     * under HAKMEM_ZERO_ON_FREE, which cleared the block as it left
     * quarantine, its canary, at the second free.) */
    { "double free after a write to the block, medium", double_free_after_a_write_medium, SECURE, "", 0 },
    { "interior free, small", interior_free_small, DEFAULT | SECURE, "inside", 0 },
    { "interior free, medium", interior_free_medium, DEFAULT | SECURE, "inside", 0 },
    { "interior free, large", interior_free_large, DEFAULT | SECURE, "inside", 0 },
#ifndef HAK_TEST_LIBC
    { "double free by free_sized", double_free_sized, DEFAULT | SECURE, "double free of", 0 },
    { "interior free_aligned_sized", interior_free_aligned_sized, DEFAULT | SECURE, "free of", 0 },
    /* (Checked in the debug build of the default variant too.) */
    { "free_aligned_sized, another size", free_aligned_sized_wrong_size, SECURE, "free_aligned_sized", DEFAULT },
#endif
    { "malloc, then delete", malloc_then_delete, SECURE, "allocated by malloc", 0 },
    { "new, then free", new_then_free, SECURE, "allocated by new (alloc-dealloc mismatch)", 0 },
    { "new[], then delete", new_array_then_delete, SECURE, "allocated by new[]", 0 },
    { "new, then delete[]", new_then_delete_array, SECURE, "allocated by new (alloc-dealloc mismatch)", 0 },
    { "new (align_val_t), then delete", new_aligned_then_delete, SECURE, "allocated by new (align_val_t)", 0 },
    { "sized delete, another size, small", sized_delete_wrong_small, SECURE, "with a size other than the 32 bytes", 0 },
    { "sized delete, another size, medium", sized_delete_wrong_medium, SECURE, "with a size other than the", 0 },
    { "sized delete, another size, large", sized_delete_wrong_large, SECURE, "with a size other than the", 0 },
    { "sized delete[], another size", sized_delete_array_wrong, SECURE, "delete[] of", 0 },
    { "sized delete (align_val_t), another size", sized_delete_aligned_wrong, SECURE, "delete (align_val_t) of", 0 },
    /* In the default variant a huge block's mapping ends with its request
     * (a multiple of the page), and what follows is usually unmapped (the
     * tail trimmed off its aligned reservation), but a mapping made since
     * (the purger's stack, say) may fill it: stopped or not, by chance. */
    { "overflow to a page past the end, large", overflow_page_large, SECURE, NULL, 0 },
    { "overflow to a page past the end, huge", overflow_page_huge, SECURE, NULL, DEFAULT },
    { "read a page past the end, large", read_page_past_large, SECURE, NULL, 0 },
    { "read a page past the end, large shrunk by realloc", read_page_past_large_shrunk, SECURE, NULL, 0 },
    { "read a page past the end, large aligned to 64 KiB", read_page_past_aligned_large, SECURE, NULL, 0 },
    { "read a page past the end, giant shrunk by realloc", read_page_past_giant_shrunk, SECURE, NULL, 0 },
    { "overflow to a page past the end, huge after realloc", overflow_page_huge_realloc, SECURE, NULL, DEFAULT },
    { "overflow by 1, huge after realloc", overflow_1_huge_realloc, SECURE, "heap overflow", 0 },
#ifndef HAK_TEST_LIBC
    { "underflow into a segment's metadata", underflow_into_segment_metadata, SECURE, NULL, 0 },
#endif
};

static void every_misuse_is_stopped_where_promised(void)
{
    int stopped = 0, total = (int)(sizeof misuses / sizeof misuses[0]);
    for (size_t i = 0; i < sizeof misuses / sizeof misuses[0]; i++) {
        const struct misuse *m = &misuses[i];
        printf("   %s\n", m->name);
        hak_child_report r = hak_run_in_child(m->fn);
        bool stop = WIFSIGNALED(r.status);
        stopped += stop;
        printf("     %s: %s\n", VARIANT_NAME, stop ? "stopped" : "not stopped");
        if (VARIANT == 0) continue;   /* printed only */
        if (m->may_stop & VARIANT) {   /* either outcome, but a report must say what it is */
            if (stop && WTERMSIG(r.status) == SIGABRT && m->words != NULL) hak_check_misuse_report(&r, m->words);
            continue;
        }
        if (!(m->must_stop & VARIANT)) {
            CHECKF(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0,
                   "child status 0x%x, want a normal end in the %s variant", r.status, VARIANT_NAME);
            continue;
        }
        if (m->words != NULL) {
            hak_check_misuse_report(&r, m->words);
        } else {
            CHECKF(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGSEGV,
                   "child status 0x%x, want death by SIGSEGV", r.status);
        }
    }
    printf("   %s stopped %d of %d\n", VARIANT_NAME, stopped, total);
}

/* A correct program that moves words of a block it never wrote over its
 * second word (a memmove of a buffer it wrote in part) and frees it is not
 * stopped: no block handed out holds a free tag in a later word. (A page
 * going back to its arena left one in each of its blocks, and the next
 * page to start on that slice has the same tag: 16-byte blocks freed,
 * then 64-byte ones taken there, held it in their fourth word, and such a
 * move made the free a double free, in both variants.) */
static void unwritten_words_moved_are_no_double_free(void)
{
    enum { N = 20000 };
    static char *p[N];
    for (int i = 0; i < N; i++) CHECK((p[i] = malloc(16)) != NULL);
    for (int i = 0; i < N; i++) free(p[i]);
    for (int i = 0; i < N; i++) CHECK((p[i] = malloc(64)) != NULL);
    for (int i = 0; i < N; i++) {
        memmove(hak_opaque_ptr(p[i] + 8), p[i] + 24, 8);   /* the fourth word, never written, over the second */
        free(p[i]);
    }
}

#ifdef HAK_TEST_SECURE
/* HAKMEM_ZERO_ON_FREE=1: a block freed with data in it comes back zeroed
 * (past the two words the free list uses), wherever malloc finds it. */
static void freed_blocks_come_back_zeroed(void)
{
    enum { N = 200, SIZE = 100 };
    char *blocks[N];
    for (int i = 0; i < N; i++) {
        CHECK((blocks[i] = malloc(SIZE)) != NULL);
        memset(blocks[i], 0xab, SIZE);
    }
    for (int i = 0; i < N; i++) free(blocks[i]);
    for (int i = 0; i < 100; i++) free(malloc(16));   /* out of the quarantine */
    for (int i = 0; i < N; i++) {
        CHECK((blocks[i] = malloc(SIZE)) != NULL);
        size_t at = hak_first_not(blocks[i] + 16, SIZE - 16, 0);
        CHECKF(at == SIZE_MAX, "block %p: byte %zu is 0x%02x", (void *)blocks[i], at + 16,
               (unsigned char)blocks[i][at + 16]);
    }
    for (int i = 0; i < N; i++) free(blocks[i]);
}

/* ... and a large block the program barely touched is not made resident by
 * its free: its whole OS pages are given back instead of written (a
 * 1.3 GiB buffer sort left untouched was written whole, 1.3 GiB resident,
 * just before it was unmapped). Medium, large and huge blocks, touched at
 * both ends only. */
static void untouched_blocks_freed_without_residency(void)
{
    static const size_t sizes[] = {300 * KiB, 3 * MiB, 96 * MiB};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t before = hak_rss_bytes();
        char *p = malloc(sizes[i]);
        CHECK(p != NULL);
        p[0] = p[sizes[i] - 1] = 1;
        free(hak_opaque_ptr(p));
        size_t after = hak_rss_bytes();
        CHECKF(after < before + 8 * MiB, "a %zu KiB block freed: rss %zu MiB, %zu MiB before", sizes[i] / KiB,
               after / MiB, before / MiB);
    }
}

/* Every width of the canary's pattern (the 0 to 15 bytes between a request
 * and the trailer of a 32-byte block: requests of 9 to 24 bytes) and every
 * word of the quarantine's fill (blocks of 16 to 64 bytes, whose fill words
 * overlap below 64): one byte written at its first, last and ninth pattern
 * byte, or into every word of the freed block (at every third byte: the
 * report names it), is reported; the same blocks freed unwritten are not. */
static size_t case_size, case_at;

/* Byte `at` of p changed (whatever it held: a byte the check looks for may
 * have any value). */
static void change_byte(char *p, size_t at)
{
    volatile char *q = hak_opaque_ptr(p);
    q[at] = (char)~q[at];
}

static void overflow_at(void)
{
    hak_thread_own_heap();
    char *p = malloc(case_size);
    CHECK(p != NULL);
    hak_announce(p);
    change_byte(p, case_size + case_at);
    free(p);
}

static void use_after_free_write_at(void)
{
    hak_thread_own_heap();
    char *p = malloc(case_size);
    CHECK(p != NULL);
    free(p);
    hak_announce(p);
    if (case_at != SIZE_MAX) change_byte(p, case_at);
    for (int i = 0; i < 100; i++) free(malloc(16));
}

static void every_pattern_byte_and_fill_word_is_checked(void)
{
    for (case_size = 9; case_size <= 24; case_size++) {
        size_t slack = 24 - case_size, at[] = {0, slack - 1, 8};
        for (size_t i = 0; i < 3; i++) {
            if (at[i] >= slack || (i > 0 && at[i] == at[0])) continue;
            case_at = at[i];
            hak_child_report r = hak_run_in_child(overflow_at);
            hak_check_misuse_report(&r, "heap overflow");
        }
    }
    for (size_t block = 16; block <= 64; block += 16) {
        case_size = block - 8;   /* with the trailer, the whole block */
        for (case_at = 0; case_at < block; case_at += 3) {   /* (the report names the byte) */
            char words[64];
            snprintf(words, sizeof words, "(the freed block was written at byte %zu)", case_at);
            hak_child_report r = hak_run_in_child(use_after_free_write_at);
            hak_check_misuse_report(&r, words);
        }
        case_at = SIZE_MAX;
        hak_child_report r = hak_run_in_child(use_after_free_write_at);
        CHECK_CHILD_EXITED_0(r.status);
    }
}

/* The pattern byte after a request and the byte of a quarantined block's
 * fill (its first word), as this process has them. */
static void print_pattern_bytes(void)
{
    hak_thread_own_heap();
    volatile unsigned char *p = hak_opaque_ptr(malloc(9));   /* 32-byte block: pattern bytes 9-23 */
    unsigned canary = p[9];
    free((void *)p);
    printf("%u %u\n", canary, p[0]);
}

/* Both bytes are chosen per process, among 0x80-0xfe (secure.c): not one
 * an attacker knows, nor text or 0, which common overflows write. Four
 * processes (this program run again) must not all have the same ones. */
static void pattern_bytes_differ_between_processes(void)
{
    char self[512], command[600];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(n > 0);
    self[n] = 0;
    snprintf(command, sizeof command, "HAK_TEST_PRINT_PATTERN=1 '%s'", self);
    unsigned canary[4], freed[4];
    bool all_same = true;
    for (int i = 0; i < 4; i++) {
        FILE *f = popen(command, "r");
        CHECK(f != NULL);
        CHECK(fscanf(f, "%u %u", &canary[i], &freed[i]) == 2);
        CHECK(pclose(f) == 0);
        CHECKF(canary[i] >= 0x80 && canary[i] <= 0xfe && freed[i] >= 0x80 && freed[i] <= 0xfe,
               "pattern bytes %#x and %#x", canary[i], freed[i]);
        all_same &= canary[i] == canary[0] && freed[i] == freed[0];
    }
    CHECKF(!all_same, "four processes chose the same bytes %#x and %#x", canary[0], freed[0]);
}

/* A block handed out does not show the encoded link it had on its free
 * list: with two of them and their addresses, the page's secret was
 * (link ^ next ^ its address), and links could be forged (a review
 * helper's attack predicted every next block, then steered malloc). */
static void handed_out_blocks_hide_their_links(void)
{
    enum { N = 64 };
    void *p[N];
    for (size_t size = 8; size <= 1000; size += 24) {
        for (int round = 0; round < 2; round++) {   /* carved, then from a free list after the quarantine */
            for (int i = 0; i < N; i++) {
                CHECK((p[i] = malloc(size)) != NULL);
                uintptr_t word0;
                memcpy(&word0, p[i], sizeof word0);
                CHECKF(word0 == 0, "malloc(%zu) = %p holds %#lx in its first word", size, p[i], (unsigned long)word0);
            }
            for (int i = 0; i < N; i++) free(p[i]);
            for (int i = 0; i < 2 * HAK_QUARANTINE_SLOTS; i++) free(malloc(8));   /* out of the quarantine */
        }
    }
}

/* A block handed out again after the quarantine holds none of its tag: a
 * program that moves the unwritten words of a block it got over its
 * second word (a buffer shifted down with memmove, written in part) and
 * frees it is not stopped as a double free. (The tag stayed in the fill's
 * later words, which such a move brought back where the quarantine looks
 * for it: an attack helper's program.) */
static void handed_out_blocks_hold_no_quarantine_tag(void)
{
    enum { N = 64 };
    char *p[N];
    for (size_t size = 32; size <= 1000; size += 24) {
        for (int round = 0; round < 2; round++) {   /* carved, then from a free list after the quarantine */
            for (int i = 0; i < N; i++) CHECK((p[i] = malloc(size)) != NULL);
            for (int i = 0; i < N; i++) {
                size_t moved = size - 24 < 40 ? size - 24 : 40;
                memmove(hak_opaque_ptr(p[i] + 8), p[i] + 24, moved);   /* words 3-7 over 1-5 */
                free(p[i]);
            }
            for (int i = 0; i < 2 * HAK_QUARANTINE_SLOTS; i++) free(malloc(8));   /* out of the quarantine */
        }
    }
}

/* Blocks that realloc shrank keep the size asked as theirs: their usable
 * size, and the size free_sized must give (a giant block once kept its old
 * pages and reported 805,310,457 bytes for 734,003,200 asked). */
static void shrunk_blocks_keep_the_size_asked(void)
{
    const struct { size_t align, from, to; } cases[] = {
        {0, 3 * MiB, 2 * MiB}, {0, 40 * MiB, 30 * MiB}, {32 * MiB, 8 * MiB, 5 * MiB}, {64 * MiB, 3 * MiB, 2 * MiB},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *p = cases[i].align ? aligned_alloc(cases[i].align, cases[i].from) : malloc(cases[i].from);
        CHECK(p != NULL && (p = realloc(p, cases[i].to)) != NULL);
        CHECK_EQ_SIZE(malloc_usable_size(p), cases[i].to);
        hak_free_sized(p, cases[i].to);
    }
}

/* A link forged with the page's secret (the strongest attacker: one who
 * learned it, and who writes the live block's first word as a link too,
 * the end of the list) to a live block of the same page: the link checks
 * take both (carved blocks of the page, or the end), and the pop of the
 * live block stops, as it carries no free tag; handed out, it would have
 * had two owners. */
enum { FORGED_SIZE = 56 };   /* with the canary, the 64-byte class */

static void forge_link_to_a_live_block(void)
{
    hak_thread_own_heap();
    char *victim = malloc(FORGED_SIZE), *live = malloc(FORGED_SIZE);
    CHECK(victim != NULL && live != NULL);
    hak_page_t *page = hak_page_of(hak_segment_of(victim), victim);
    CHECK(hak_page_of(hak_segment_of(live), live) == page);
    free(victim);
    for (int i = 0; i < 2 * HAK_QUARANTINE_SLOTS; i++) free(malloc(8));   /* the victim out of the quarantine */
    CHECKF(page->free == (hak_block_t *)victim, "set up: the victim heads its page's free list");
    hak_block_t *b = (hak_block_t *)victim;
    b->next = (hak_block_t *)hak_link_encode(page->secret, b, (hak_block_t *)live);
    ((hak_block_t *)live)->next = (hak_block_t *)hak_link_encode(page->secret, (hak_block_t *)live, NULL);
    CHECK(malloc(FORGED_SIZE) == victim);
    hak_announce(live);
    void *again = malloc(FORGED_SIZE);
    fprintf(stderr, "malloc handed out %p, live at %p\n", again, (void *)live);
}

static void forged_link_to_a_live_block_is_stopped(void)
{
    hak_child_report r = hak_run_in_child(forge_link_to_a_live_block);
    CHECKF(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGABRT, "child status 0x%x: %s", r.status, r.text);
    CHECKF(strstr(r.text, "free list corrupted") != NULL, "report: %s", r.text);
}
#endif

#ifdef HAK_TEST_SECURE
/* Forked children draw their own random numbers: the pages each makes
 * get other carve orders (and secrets) than its siblings'. (They drew the
 * same before: a crashed child told an attacker how the next would lay
 * out its blocks.) Each child prints where its first 16 blocks of a fresh
 * class landed, as offsets within their page. */
enum { FRESH_SIZE = 2000, FRESH_BLOCKS = 16 };   /* a class nothing before uses */

static void print_carve_order(void)
{
    void *p[FRESH_BLOCKS];
    for (int i = 0; i < FRESH_BLOCKS; i++) CHECK((p[i] = malloc(FRESH_SIZE)) != NULL);
    for (int i = 0; i < FRESH_BLOCKS; i++) fprintf(stderr, " %lx", (unsigned long)((uintptr_t)p[i] & 0xffff));
    fprintf(stderr, "\n");
}

static void forked_children_carve_apart(void)
{
    hak_thread_own_heap();
    hak_child_report r[3];
    for (int k = 0; k < 3; k++) {
        r[k] = hak_run_in_child(print_carve_order);
        CHECK_CHILD_EXITED_0(r[k].status);
    }
    CHECKF(strcmp(r[0].text, r[1].text) != 0 || strcmp(r[1].text, r[2].text) != 0,
           "three children carved alike: %s", r[0].text);
}
#endif

int main(void)
{
#ifdef HAK_TEST_SECURE
    if (getenv("HAK_TEST_PRINT_PATTERN") != NULL) {
        print_pattern_bytes();
        return 0;
    }
#endif
    hak_test_begin("test_misuse (" VARIANT_NAME ")");
    RUN_CASE(every_misuse_is_stopped_where_promised);
    RUN_CASE(sized_deletes_of_the_size_allocated_pass);
    RUN_CASE(unwritten_words_moved_are_no_double_free);
#ifdef HAK_TEST_SECURE
    if (getenv("HAKMEM_ZERO_ON_FREE") != NULL) {
        RUN_CASE(freed_blocks_come_back_zeroed);
        RUN_CASE(untouched_blocks_freed_without_residency);
    }
    RUN_CASE(every_pattern_byte_and_fill_word_is_checked);
    RUN_CASE(pattern_bytes_differ_between_processes);
    RUN_CASE(handed_out_blocks_hide_their_links);
    RUN_CASE(handed_out_blocks_hold_no_quarantine_tag);
    RUN_CASE(shrunk_blocks_keep_the_size_asked);
    RUN_CASE(forged_link_to_a_live_block_is_stopped);
    RUN_CASE(forked_children_carve_apart);
#endif
    return 0;
}
