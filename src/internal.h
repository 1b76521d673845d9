/* hakmem internal definitions: the data structures every layer shares, with
 * the invariants that hold them together, and the small inline helpers of the
 * fast paths.
 *
 * Layers, bottom up (one file each):
 *   os.c       mmap/madvise, aligned reservations, time
 *   segment.c  32 MiB aligned segments, carved into spans of 64 KiB slices by
 *              sharded arenas; large blocks are such spans
 *   huge.c     huge blocks, in segments of their own, and a cache of those
 *   page.c     a page = a span holding blocks of one size class: its free
 *              lists, carving, the fast path's block check, validation
 *   owner.c    how pages move between threads: remote frees, abandoning,
 *              publishing, adopting, sweeping
 *   heap.c     per-thread heaps: page queues per size class and the direct
 *              table that mirrors them, finding a page for a class, exit
 *   purge.c    when memory goes back to the OS: delays, the background
 *              purger thread, the slow-path fallback, malloc_trim
 *   alloc.c    malloc and friends
 *   exports.h  every standard and C++ name hakmem exports, and its hak_* function
 *   free.c     free, whole: the exact pointer check, the fast path, the
 *              generic path (remote frees continue in owner.c)
 *   init.c     process start-up, fork, thread exit hooks
 *   options.c  HAKMEM_* options and messages
 *   stats.c    counters and the report (mallinfo2, malloc_stats)
 *
 * The vocabulary (segment, slice, span, page, heap, owner, abandoned,
 * published, adopt, gather, collect, purge, and the tiers small / medium /
 * large / huge) is defined once, in docs/design.md §1; every comment uses
 * those words in that sense only. */
#ifndef HAKMEM_INTERNAL_H
#define HAKMEM_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include "hakmem.h"

/* HAKMEM_SECURE: the hardened variant (secure.h, secure.c). */
#ifndef HAKMEM_SECURE
#define HAKMEM_SECURE 0
#endif

/* HAKMEM_DEBUG (cmake -DHAKMEM_DEBUG=ON, the build the sanitizer runs use):
 * hak_assert checks, and the validators of the structures below run where
 * those change hands (hak_page_is_valid, hak_arenas_are_valid). Compiled away
 * otherwise. */
#ifndef HAKMEM_DEBUG
#define HAKMEM_DEBUG 0
#endif
#if HAKMEM_DEBUG
#define hak_assert(cond) \
  ((cond) ? (void)0 : hak_fatal("internal error: %s is false (%s:%d)", #cond, __FILE__, __LINE__))
#else
#define hak_assert(cond) ((void)0)
#endif

#define hak_likely(x)   __builtin_expect(!!(x), 1)
#define hak_unlikely(x) __builtin_expect(!!(x), 0)
#define HAK_INTERNAL    __attribute__((visibility("hidden")))
#define HAK_NOINLINE    __attribute__((noinline))
#define HAK_NORETURN    __attribute__((noreturn))
/* Reads of a block the ASan build may have poisoned (tracking.h). */
#if defined(__SANITIZE_ADDRESS__)
#define HAK_NO_ASAN     __attribute__((no_sanitize_address))
#else
#define HAK_NO_ASAN
#endif

/* ---------------------------------------------------------------- sizes */

#define HAK_SEGMENT_SHIFT      25                        /* 32 MiB */
#define HAK_SEGMENT_SIZE       ((size_t)1 << HAK_SEGMENT_SHIFT)
#define HAK_SEGMENT_MASK       (HAK_SEGMENT_SIZE - 1)
#define HAK_SLICE_SHIFT        16                        /* 64 KiB */
#define HAK_SLICE_SIZE         ((size_t)1 << HAK_SLICE_SHIFT)
#define HAK_SLICES             (HAK_SEGMENT_SIZE / HAK_SLICE_SIZE)   /* 512 */
#define HAK_OS_PAGE            4096
#define HAK_THP_SIZE           ((size_t)2 << 20)   /* a transparent huge page (x86-64; arm64 with 4 KiB pages) */
#define HAK_STRETCHES          (HAK_SEGMENT_SIZE / HAK_THP_SIZE)   /* 16 per segment (segment.c) */
#define HAK_STRETCH_SLICES     (HAK_THP_SIZE / HAK_SLICE_SIZE)     /* 32 */

#define HAK_ALIGN              16          /* every block is 16-byte aligned */
/* The tiers (docs/design.md §1): small blocks (one-slice pages, the fast
 * paths), medium (pages of several slices), large (a span each, below),
 * huge (a segment each). */
#define HAK_SMALL_MAX          8192        /* largest small block            */
#define HAK_MEDIUM_MAX         ((size_t)1 << 20)   /* largest size class     */
#define HAK_DIRECT_FINE_MAX    1024        /* heap->direct in 16-byte steps up to here, 128-byte steps above */
#define HAK_CLASS_BINS         113         /* size classes 1..112; 0 unused  */
#define HAK_SHARED_BINS        32          /* then the shared heap's own classes (hak_shared_bin_of) */
#define HAK_BINS               (HAK_CLASS_BINS + HAK_SHARED_BINS)
#define HAK_DIRECT             (HAK_DIRECT_FINE_MAX / 16 + 1 + HAK_SMALL_MAX / 128 - HAK_DIRECT_FINE_MAX / 128)
#define HAK_PAGE_MAX_SLICES    (16 + HAKMEM_SECURE)   /* a medium page spans <= 1 MiB (one 1 MiB block; the secure
                                                     variant's guard page makes that 17 slices) */
#define HAK_PAGE_TARGET_BYTES  (256 * 1024) /* medium pages hold up to this much (hak_page_slices_for) */
#define HAK_HUGE_ALIGN_MAX     (HAK_SEGMENT_SIZE / 2)  /* larger: "giant" path */
#define HAK_MAX_REQUEST        ((size_t)PTRDIFF_MAX - 2 * HAK_SEGMENT_SIZE)

/* Size classes: 16..128 in steps of 16, then 8 classes per power of two, so
 * above 128 bytes a block wastes at most 1/9 (11%) of itself. */
static inline size_t hak_bin_of(size_t size) {
  if (size <= 128) return size <= HAK_ALIGN ? 1 : (size + HAK_ALIGN - 1) >> 4;
  size_t w = size - 1;
  unsigned b = 63u - (unsigned)__builtin_clzl(w);
  return 8 + (b - 7) * 8 + ((w >> (b - 3)) & 7) + 1;
}

/* The shared heap (heap.c) serves 1-4 KiB in 64-byte steps: its blocks
 * are whole cache lines anyway (hak_shared_request), and many threads that
 * each hold a few such blocks would otherwise waste up to 128-256 bytes on
 * each. Those steps that are not among the classes above get bins of their
 * own, past HAK_CLASS_BINS: 1088 + 128 j below 2 KiB (8), then 2 KiB + 64 m
 * for m not a multiple of 4 (24). Thread heaps never use them: more
 * classes would cost every thread a partly used page per class. */
#define HAK_LINE_STEP_MIN 1024   /* exclusive */
#define HAK_LINE_STEP_MAX 4096
static inline size_t hak_bin_size(size_t bin) {
  if (bin <= 8) return bin * HAK_ALIGN;
  if (bin >= HAK_CLASS_BINS) {
    size_t j = bin - HAK_CLASS_BINS;
    if (j < 8) return 1088 + 128 * j;
    j -= 8;
    return 2048 + 64 * (j + 1 + j / 3);
  }
  size_t j = bin - 9, b = 7 + j / 8, k = j % 8 + 1;
  return ((size_t)1 << b) + (k << (b - 3));
}

/* The bin of a small request to the shared heap: the smallest multiple of
 * 64 that holds it, from 1 to 4 KiB. */
static inline size_t hak_shared_bin_of(size_t size) {
  if (size <= HAK_LINE_STEP_MIN || size > HAK_LINE_STEP_MAX) return hak_bin_of(size);
  size_t lines = (size + 63) >> 6;
  if (lines <= 32) return lines % 2 ? HAK_CLASS_BINS + (lines - 17) / 2 : hak_bin_of(lines << 6);
  size_t m = lines - 32;
  return m % 4 ? HAK_CLASS_BINS + 8 + m - 1 - m / 4 : hak_bin_of(lines << 6);
}

static inline size_t hak_align_up(size_t x, size_t a) { return (x + a - 1) & ~(a - 1); }
static inline size_t hak_align_down(size_t x, size_t a) { return x & ~(a - 1); }

/* A record of hakmem's that holds a block's address holds it hidden:
 * valgrind's leak scan reads hakmem's memory too, and took such a record
 * for a pointer into the block, which the program had leaked, and counted
 * it "still reachable" or "possibly lost" instead of "definitely lost".
 * Negated: its own inverse, 0 stays 0 (none), and p plus an area's hidden
 * start is p's offset in it. */
static inline uintptr_t hak_leak_hidden(uintptr_t a) { return 0 - a; }

/* heap->direct index of a size <= HAK_SMALL_MAX: 16-byte steps up to 1 KiB,
 * then 128-byte steps (every class boundary falls on a step, and a class
 * spans at most 4 entries, so updating them stays cheap). */
#define HAK_DIRECT_COARSE_BASE (HAK_DIRECT_FINE_MAX / 16 + 1 - (HAK_DIRECT_FINE_MAX + 128) / 128)
static inline size_t hak_direct_fine(size_t size) { return (size + 15) >> 4; }
static inline size_t hak_direct_coarse(size_t size) { return HAK_DIRECT_COARSE_BASE + ((size + 127) >> 7); }
static inline size_t hak_direct_index(size_t size) {
  return hak_likely(size <= HAK_DIRECT_FINE_MAX) ? hak_direct_fine(size) : hak_direct_coarse(size);
}

/* ---------------------------------------------------------------- blocks */

/* A free block. While a block is free (carved and not handed out, or freed)
 * its second word holds its free tag; allocation clears it. Finding the tag
 * already set on free means the block is free already: a double free. The
 * tag is the address of the block's page descriptor plus one: no program is
 * given a pointer into the segment header that holds the descriptor, and
 * no field starts at a descriptor's second byte (hak_page_t: `free`, 8
 * bytes, comes first), so no pointer of hakmem's holds it either. (The
 * descriptor's own address was the tag until a program was stopped as a
 * double free: hakmem's slow paths leave descriptor addresses on the
 * stack, a local the program never set picked one up, and a struct copy
 * took it into a block's second word.) Free's fast path has the
 * descriptor in a register: the tag costs it one `lea`. */
typedef struct hak_block_s {
  struct hak_block_s *next;
  uintptr_t free_tag;
} hak_block_t;

struct hak_page_s;
static inline uintptr_t hak_free_tag(const struct hak_page_s *page) { return (uintptr_t)page + 1; }

/* ---------------------------------------------------------------- pages */

struct hak_heap_s;
struct hak_arena_s;

/* Ownership state of a page, kept in the low bits of page->xthread_free so
 * that a remote free pushes its block and reads the state in one CAS. */
enum {
  HAK_XSTATE_ACTIVE    = 0,  /* owned by a heap; its owner gathers remote frees */
  HAK_XSTATE_ABANDONED = 1,  /* no owner and not queued: the next remote free publishes it */
  HAK_XSTATE_PUBLISHED = 2,  /* no owner, in its class's reclaim queue for adoption */
  HAK_XSTATE_FREED     = 3,  /* no page any more (hak_page_free_span): a push is a double free */
  HAK_XSTATE_MASK      = 3,
};

/* page->xthread_free, whole: the state (bits 0-1), the first block of the
 * list other threads freed (bits 2-47: blocks are 16-byte aligned, user
 * addresses 48-bit), and how many blocks the list holds (bits 48-63), so
 * that the owner takes the list and its count without walking it (each
 * block there was last written by another thread's core: a cache miss). */
#define HAK_XCOUNT_SHIFT 48
#define HAK_XCOUNT_ONE ((uintptr_t)1 << HAK_XCOUNT_SHIFT)
static inline struct hak_block_s *hak_xlist_first(uintptr_t x) {
  return (struct hak_block_s *)(x & (HAK_XCOUNT_ONE - 1) & ~(uintptr_t)HAK_XSTATE_MASK);
}
static inline size_t hak_xlist_count(uintptr_t x) { return (size_t)(x >> HAK_XCOUNT_SHIFT); }

/* FREE: in an arena's free lists. PAGE: blocks of one size class. LARGE: one
 * block over HAK_MEDIUM_MAX, owned by nobody. HUGE: the block of a huge
 * segment. META: a segment header. */
enum { HAK_SPAN_FREE = 0, HAK_SPAN_PAGE, HAK_SPAN_LARGE, HAK_SPAN_HUGE, HAK_SPAN_META,
       HAK_SPAN_RESIZING };   /* RESIZING: a huge block realloc is resizing (huge.c) */

/* Low bits of a page's owner word (hak_slice_t; heaps are page-aligned, so
 * the bits are free). */
enum {
  HAK_OWNER_ABANDONED = 1,  /* not owned; the heap bits name the last owner, who may take it back */
  HAK_OWNER_COUNTED   = 2,  /* HAKMEM_STATS counts every call: keep frees off the fast path */
};

/* HAK_OWNER_COUNTED when HAKMEM_STATS is on, else 0; set once at start-up.
 * Counting then costs the fast paths nothing when it is off: with it on,
 * the direct table stays empty and every owner word carries the bit, so
 * every malloc and free takes the generic path, which counts. */
extern uintptr_t hak_owner_counted HAK_INTERNAL;
/* An owner word without the counted bit: the heap, with the abandoned bit
 * if it abandoned the page. */
#define HAK_OWNER_UNCOUNTED(owner) ((owner) & ~(uintptr_t)HAK_OWNER_COUNTED)

/* A page descriptor: one per slice of a segment, describing the span that
 * starts at that slice (the descriptors of a span's other slices are unused).
 * Two cache lines (docs/design.md §5.6): the first is the owner's (its
 * malloc and free fast paths write free and used there); the second holds
 * xthread_free, which other threads' frees push onto. Its owner word lives
 * in its slices' entries (hak_slice_t), which every free reads anyway.
 *
 * Invariants:
 * - The owner word == (uintptr_t)heap exactly when `heap` owns the page
 *   (and calls are not counted): the one compare of the free fast path.
 *   While a page of several slices changes hands, its later slices lag
 *   behind its first, but never name a heap that does not own it.
 * - Owner-only fields (free, gathered, used, capacity, reserved, bin,
 *   block_size, alone, and what page_init derives from them: area,
 *   block_magic, the secure variant's secret and its copies) are written
 *   only by the owning heap's thread, or by the thread that took ownership
 *   through xthread_free (adoption), never concurrently. The owner word
 *   is written only by the owner (or adopter) and read by anyone. What
 *   other threads read of a page, and why it is safe:
 *   - a free of one of its blocks from another thread into a one-slice page
 *     reads the slice's entry: its owner word, recip and bound (hak_slice_t)
 *     (and in the secure variant the second line's remote_block_size);
 *   - any other free, realloc or malloc_usable_size of one of its blocks
 *     from another thread (free_in_slice's check of a page of several
 *     slices, hak_block_find below and its search in free.c; secure.c's
 *     secure_free_in_segment and live_block) reads span_kind, block_size,
 *     block_magic, area_neg and (counting calls) bin: written before any
 *     block of the page was handed out, so ordered by the hand-over of the
 *     block itself; and capacity, which the owner raises while it carves:
 *     read and written with relaxed __atomic operations
 *     (hak_page_is_block_start), and a block the caller was handed lies
 *     below any value it can read (capacity only grows in a page's life);
 *   - the same free then pushes onto xthread_free (a CAS), encoding the
 *     link with `remote_secret` in the secure variant (set at page_init,
 *     before the hand-over), and, if that push publishes the page, writes
 *     `next` before the release CAS that queues it; an adopter reads `next`
 *     after its acquire exchange, under reclaim_lock;
 *   - the statistics census (stats.c, under the arena lock, while owners
 *     run) reads used, bin, the owner word, span_kind and slice_count:
 *     used, bin and the owner word are _Atomic, written and read relaxed,
 *     so the census sees values that were there, if stale (the span
 *     fields: see the last point);
 *   - the purger (hak_page_purge_held, under the arena lock) reads
 *     span_kind, block_size and xthread_free of an owned page (in the
 *     secure variant its link checks also read secret, slice_count, area,
 *     block_magic and capacity, the last with a relaxed __atomic load like
 *     every other reader).
 *   No other thread reads reserved, free, gathered or alone.
 * - used counts blocks handed out and not yet back on free or gathered:
 *   blocks sitting in xthread_free still count until the owner gathers them.
 *   So used == 0 means no live block, and no remote free can still arrive.
 * - An owned page has state ACTIVE. Only its owner abandons it (to
 *   ABANDONED, or to PUBLISHED if it has room); the remote free that finds
 *   it ABANDONED moves it to PUBLISHED and queues it; only an adopter from the
 *   reclaim queue, or the last owner re-adopting on free, moves it back to
 *   ACTIVE. The thread that frees the page's span, used == 0, moves it to
 *   FREED (before the free tags are cleared), and page_init to ACTIVE again.
 * - Span fields (slice_count, span_kind, dirty, dirty_slices, purge_at) and
 *   the links of free spans are written only under the segment's arena lock
 *   (a free looks at its neighbours' kinds to coalesce). */
typedef struct hak_page_s {
  union {
    hak_block_t *free;                   /* page: blocks ready to allocate */
    uint64_t purge_at;                   /* free span: ms when it is purged; HAK_PURGE_KEPT: not until it
                                            changes or its huge-page stretch loses its advice (segment.c) */
  };
  hak_block_t *gathered;                 /* remote frees the owner took while `free` was not empty:
                                            `free` once it runs out (the owner's own frees go first) */
  /* heap queue (owner only), reclaim queue (next: written by the thread
   * that publishes the page, read by adopters), or free-span list (arena lock) */
  struct hak_page_s *next, *prev;
  uint32_t block_size;                   /* pages only; a huge block's size is in its segment. Written by
                                            the owner at page_init; read by any thread freeing a block */
  _Atomic(uint16_t) used;                /* written by the owner (hak_page_used_inc); read by the census, and
                                            by a thread keeping the page's blocks (free.c: keep_or_send,
                                            release_if_only_kept) */
  uint16_t capacity;                     /* blocks carved so far. Written by the owner (carving); read by
                                            any thread freeing a block: __atomic, relaxed */
  union {
    uint16_t reserved;                   /* page: blocks that fit it (owner only) */
    uint16_t dirty_slices;               /* free span: its slices marked dirty */
    bool huge_pages;                     /* large block: advised for transparent huge pages (segment.c);
                                            written by the thread that took the span, read by the one freeing it */
  };
  uint16_t slice_count;
  _Atomic(uint8_t) bin;                  /* size class; written once per page life (page_init) by the
                                            owner; read by a counted free or a foreign free (free.c) from any
                                            thread, and the census */
  uint8_t span_kind;                     /* written under the arena lock (a huge block's: before its segment
                                            is mapped, then by compare-and-swap, huge.c); read by any thread
                                            freeing a block, the census, the purger */
  uint8_t dirty;                         /* this slice's HAK_SLICE_* state (any slice) */
  bool alone;                            /* owner only: the only page of its queue, one slice (heap.c) */
#if !HAKMEM_SECURE   /* (the secure variant's are on the second line: its first is full) */
  uintptr_t area_neg;                    /* page: its first block's address, hidden (hak_leak_hidden: p +
                                            area_neg is p's offset, hak_page_is_block_start). Written at */
  uint64_t block_magic;                  /* page_init; read by any thread freeing a block, as block_size */
#else
  uint32_t check_recip, check_bound;     /* page: a copy of its slice's recip and bound (hak_slice_t) for
                                            the link checks, 0 unless one slice (secure.h). Written with
                                            them (page.c), and 0 at page_init; read by the owner and the
                                            purger walking held lists: __atomic, relaxed */
  uintptr_t secret;                      /* page: encodes its free-list links (secure.h). Written at
                                            page_init; read by the owner's pops and the purger (remote
                                            pushes use the copy on the second line) */
#endif
  /* The second line (above). */
  _Alignas(64)
  /* blocks freed by other threads: count | first | state. Pushed (CAS) by
   * any thread freeing a block; taken by the owner, an adopter, the purger */
  _Atomic(uintptr_t) xthread_free;
  bool kept;                             /* owner only: hak_heap_page_for_bin found it full and kept it at
                                            the back of its queue, and has not handed out from it since
                                            (heap.c); only the slow paths read it */
  bool took_remote;                      /* owner only: its owner took remote frees since it was last
                                            abandoned or initialised (hak_page_take_remote; heap.c) */
  uint8_t idle_looks;                    /* owner only: looks in a row that found beat_mark (below) as it is */
  uintptr_t beat_mark;                   /* owner only: the first page of its queue at a heartbeat's look, its
                                            list head and use then (hak_heap_retire_idle, heap.c) */
#if HAKMEM_SECURE
  /* page: copies of `secret` and `block_size` for the secure free of a
   * block by another thread (its canary check, its push onto xthread_free),
   * which then reads no word of the owner's line in a one-slice page
   * (docs/design.md §5.6; a page of several slices is checked with
   * span_kind, capacity and block_size too) */
  uintptr_t remote_secret;
  uint32_t remote_block_size;
  uintptr_t area_neg;                    /* as in the default build (above) */
  uint64_t block_magic;
  bool guarded;                          /* any slice: its last OS page is a page guard (PROT_NONE; secure.c),
                                            in a free span too. Only the last slice of a page may have one, no
                                            slice of a large block. Written and read by the thread that took the
                                            span holding the slice (after hak_span_alloc), and under the arena
                                            lock when the segment is unmapped */
#endif
} __attribute__((aligned(64))) hak_page_t;

_Static_assert(sizeof(hak_page_t) == 128 && offsetof(hak_page_t, xthread_free) == 64,
               "a page descriptor is two cache lines, the second the remote frees'");
_Static_assert(offsetof(hak_page_t, free) == 0 && sizeof(((hak_page_t *)0)->free) > 1,
               "no field starts at a descriptor's second byte, the free tag (hak_free_tag)");

/* What a slice's memory may hold (page->dirty of each slice): never used
 * since mapped (zero, not resident), used since its last purge (may be
 * resident and hold old bytes), or purged (given back; zero unless purged
 * with MADV_FREE). Taking PURGED slices back soon after purging them means
 * the purge delay was too short for this arena (see purge.c). */
enum { HAK_SLICE_FRESH = 0, HAK_SLICE_DIRTY = 1, HAK_SLICE_PURGED = 2 };

/* ---------------------------------------------------------------- segments */

/* One entry per slice of a segment: the descriptor of the span holding it,
 * and the free fast path's exact test that a pointer is the start of a
 * block carved in a one-slice page (hak_block_check), and the page's owner
 * word, side by side so that free reads one cache line of the header. For
 * a one-slice page, recip == floor(2^32 / block_size) + 1 and bound ==
 * capacity * e, where e = recip * block_size - 2^32 (1 <= e <= block_size). For an offset
 * o < 2^16 into the slice, x = (uint32_t)(o * recip) equals (o / block_size)
 * * e when block_size divides o, and is at least recip otherwise, so
 * x < bound holds exactly when o is the start of a carved block (index <
 * capacity); tests/unit_pages.c checks every class and capacity. Both are 0
 * (the test fails, sending free to the generic path) on every other slice.
 * recip and bound are written by the page's owner (page.c, atomically) and
 * read by the free fast path after its owner compare (hak_block_check), and
 * by other threads through hak_block_check_shared: a free from another
 * thread (free.c) and the secure variant's checks before any owner test
 * (secure.c), whose block was carved, so covered by bound, before it was
 * handed over; bound only grows while the page lives. (The secure
 * variant's link check, secure.h, reads them plainly: the owner's pops,
 * and the purger's walk of held remote frees while the owner may carve,
 * a race left there because the atomic loads cost its malloc 5 of 300
 * instructions; the value read only ever grows.) */
typedef struct hak_slice_s {
  struct hak_page_s *page;
  uint32_t recip;
  uint32_t bound;
  /* The owner word of the page holding this slice: owning heap |
   * HAK_OWNER_*, in every slice of the page (hak_page_set_owner); 0 in
   * every slice outside a page. Written by the owner or adopter; read by
   * any thread freeing a block (from the entry it reads anyway:
   * docs/design.md §5.6), and by the census. */
  _Atomic(uintptr_t) owner;
} __attribute__((aligned(32))) hak_slice_t;   /* (a power of two: hak_slice_at's shift) */

/* A segment: HAK_SEGMENT_SIZE aligned, so any pointer inside it finds the
 * header by masking, and its slice's descriptor through slices[].page.
 * An arena's segment holds HAK_SLICES slices, the first HAK_META_SLICES of
 * which hold this header. A huge segment holds one block (possibly much
 * larger than HAK_SEGMENT_SIZE) whose start lies in the first
 * HAK_SEGMENT_SIZE.
 * Invariants: slices[i].page is the descriptor of the span (page, large,
 * huge or meta) holding slice i, for every slice of such a span; a free span
 * is reachable from its first and last slice only (what coalescing needs),
 * its interior entries name some stale descriptor of the segment. In a huge
 * segment every entry is set: slices of the mapping name the huge block's
 * descriptor, slices past the mapping name hak_page_unmapped (a foreign
 * mapping may lie there; its pointers must be reported, not followed). */
typedef struct hak_segment_s {
  size_t size;                           /* bytes mapped */
  struct hak_arena_s *arena;             /* owner of the span lists; NULL: huge */
  struct hak_segment_s *next, *prev;     /* arena's segment list */
  uint32_t used_slices;                  /* slices in pages and large blocks */
  /* Its 2 MiB stretches (segment.c): which are advised for transparent huge
   * pages, and how many slices of each are in pages and large blocks. Both
   * under the arena lock. */
  uint16_t huge_stretches;
  uint8_t stretch_used[HAK_STRETCHES];
  hak_slice_t slices[HAK_SLICES];
  hak_page_t pages[HAK_SLICES];
} hak_segment_t;

#define HAK_META_SLICES ((sizeof(hak_segment_t) + HAK_SLICE_SIZE - 1) / HAK_SLICE_SIZE)
#define HAK_META_SIZE   (HAK_META_SLICES * HAK_SLICE_SIZE)
#define HAK_LARGE_MAX   (HAK_SEGMENT_SIZE - HAK_META_SIZE)   /* largest block in arena segments */
/* An alignment in bytes (0 or a power of two) as a span's, in slices:
 * every span starts on a slice, so up to a slice is 1 (none). */
static inline size_t hak_align_slices(size_t align) { return align > HAK_SLICE_SIZE ? align / HAK_SLICE_SIZE : 1; }
/* The largest block in arena segments that starts on `align` (0 or a power
 * of two up to HAK_HUGE_ALIGN_MAX): its span starts on the first slice so
 * aligned past the header. */
static inline size_t hak_large_max(size_t align) {
  return (HAK_SLICES - hak_align_up(HAK_META_SLICES, hak_align_slices(align))) * HAK_SLICE_SIZE;
}

/* One entry per possible segment of the 48-bit address space: the segment
 * while it is mapped, else NULL. free() validates any pointer and finds its
 * segment header with one load, and a pointer hakmem never returned is
 * reported instead of followed. (A pointer, not a byte: the loaded value is
 * the base the slice lookup adds to, which saves free's fast path the
 * masking; the map is 64 MiB of bss, of which a page is touched per 16 GiB
 * of address space that holds segments.)
 * An entry is written (release) only before any pointer into its segment
 * exists, or after the last one is gone, so a valid free never races with
 * the write of the entry it reads: the read needs no atomic. */
#define HAK_SEGMENT_MAP_SIZE ((size_t)1 << (48 - HAK_SEGMENT_SHIFT))
extern struct hak_segment_s *hak_segment_map[HAK_SEGMENT_MAP_SIZE] HAK_INTERNAL;

static inline hak_segment_t *hak_segment_of(const void *p) {
  return (hak_segment_t *)((uintptr_t)p & ~HAK_SEGMENT_MASK);
}
/* The mapped segment p lies in (its first HAK_SEGMENT_SIZE), or NULL.
 * NULL above the 48-bit space too, which Linux maps only when asked to
 * (5-level paging, an mmap hint above 2^47) and hakmem never asks: masked
 * into the map instead, such a pointer (one the program mapped up there,
 * or a corrupted one) named the hakmem segment 2^48 bytes below, and its
 * free went onto that segment's free lists. */
static inline hak_segment_t *hak_segment_lookup(const void *p) {
  size_t i = (uintptr_t)p >> HAK_SEGMENT_SHIFT;
  if (hak_unlikely(i >= HAK_SEGMENT_MAP_SIZE)) return NULL;
#if defined(__SANITIZE_THREAD__)
  /* TSan cannot see the order munmap and mmap give a reused address. */
  return __atomic_load_n(&hak_segment_map[i], __ATOMIC_RELAXED);
#else
  return hak_segment_map[i];
#endif
}
static inline bool hak_segment_is_mapped(const void *p) { return hak_segment_lookup(p) != NULL; }
/* Whether stretch k of a segment is advised for huge pages, and whether
 * any of its slices [first, first + n) lies in such a stretch (segment.c;
 * read under the segment's arena lock). */
static inline bool hak_stretch_is_huge(const hak_segment_t *seg, size_t k) { return seg->huge_stretches >> k & 1; }
static inline bool hak_slices_in_huge_stretch(const hak_segment_t *seg, size_t first, size_t n) {
  for (size_t k = first / HAK_STRETCH_SLICES; seg->huge_stretches != 0 && k <= (first + n - 1) / HAK_STRETCH_SLICES; k++)
    if (hak_stretch_is_huge(seg, k)) return true;
  return false;
}
static inline size_t hak_slice_of(const void *p) { return ((uintptr_t)p >> HAK_SLICE_SHIFT) & (HAK_SLICES - 1); }
/* &seg->slices[hak_slice_of(p)], its offset computed in one shift and one
 * mask (the compiler otherwise keeps the index too, for a second use, and
 * scales it apart: two instructions more on the free fast paths). */
static inline const hak_slice_t *hak_slice_at(const hak_segment_t *seg, const void *p) {
  _Static_assert(sizeof(hak_slice_t) == 32, "a slice entry is 32 bytes");
  return (const hak_slice_t *)((uintptr_t)seg->slices +
                               (((uintptr_t)p >> (HAK_SLICE_SHIFT - 5)) & ((HAK_SLICES - 1) << 5)));
}
static inline hak_page_t *hak_page_of(hak_segment_t *seg, const void *p) { return seg->slices[hak_slice_of(p)].page; }

/* The check of a one-slice page of `capacity` carved blocks of
 * `block_size` (see hak_slice_t; the page pointer and owner are left out). */
static inline hak_slice_t hak_slice_check_for(size_t block_size, size_t capacity) {
  uint64_t recip = ((uint64_t)1 << 32) / block_size + 1;
  uint64_t e = recip * block_size - ((uint64_t)1 << 32);
  return (hak_slice_t){ .recip = (uint32_t)recip, .bound = (uint32_t)(capacity * e) };
}

/* The check itself, given a slice's recip and bound (see hak_slice_t). */
static inline bool hak_block_check_with(uint32_t recip, uint32_t bound, const void *p) {
  return (uint32_t)(uint16_t)(uintptr_t)p * recip < bound;
}
/* True if p starts a block carved in the one-slice page at its slice. */
static inline bool hak_block_check(const hak_slice_t *check, const void *p) {
  return hak_block_check_with(check->recip, check->bound, p);
}
/* The same check by any thread, the owner or not: a block the caller was
 * handed was carved before the hand-over, so the bound this reads covers
 * it (a page's bound only grows while the page lives). */
static inline bool hak_block_check_shared(const hak_slice_t *check, const void *p) {
  return hak_block_check_with(__atomic_load_n(&check->recip, __ATOMIC_RELAXED),
                              __atomic_load_n(&check->bound, __ATOMIC_RELAXED), p);
}
static inline uint8_t *hak_page_area(const hak_page_t *page) {   /* first byte of the span */
  hak_segment_t *seg = hak_segment_of(page);
  return (uint8_t *)seg + ((size_t)(page - seg->pages) << HAK_SLICE_SHIFT);
}
/* The carved block of a page that holds p, or NULL if p lies outside
 * every carved block (before the area, in the tail, never carved). */
static inline hak_block_t *hak_page_block_of(const hak_page_t *page, const void *p) {
  uint8_t *start = hak_page_area(page);
  if ((const uint8_t *)p < start || page->block_size == 0) return NULL;   /* (a misuse racing page_init) */
  size_t offset = (size_t)((const uint8_t *)p - start);
  size_t index = offset / page->block_size;
  if (index >= __atomic_load_n(&page->capacity, __ATOMIC_RELAXED)) return NULL;   /* the owner may be carving */
  return (hak_block_t *)(start + index * page->block_size);
}
/* ceil(2^64 / block_size), for hak_page_is_block_start (block_size >= 2). */
static inline uint64_t hak_block_magic(size_t block_size) { return UINT64_MAX / block_size + 1; }
/* Whether p starts a carved block of `page`, a page of blocks of any
 * number of slices, without a division: p lies in the carved blocks, and
 * its offset is a multiple of block_size, which for offsets and block sizes
 * below 2^32 holds exactly when offset * block_magic mod 2^64 < block_magic
 * (Lemire, Kaser and Kurz, "Faster remainder by direct computation", 2019).
 * Any thread, as hak_block_check_shared: a block it was handed was carved
 * before the hand-over (capacity only grows while the page lives). */
static inline bool hak_page_is_block_start(const hak_page_t *page, const void *p) {
  size_t offset = (size_t)((uintptr_t)p + page->area_neg);   /* (below the area: wraps, too large) */
  return offset < (size_t)__atomic_load_n(&page->capacity, __ATOMIC_RELAXED) * page->block_size &&
         offset * page->block_magic < page->block_magic;
}
/* Whether p starts a carved block of the span `page` describes, a page of
 * any number of slices (any thread, as hak_block_check_shared). */
static inline bool hak_page_block_starts(const hak_page_t *page, const void *p) {
  return page->span_kind == HAK_SPAN_PAGE && hak_page_is_block_start(page, p);
}
/* The same, the slice's multiply and compare first (a one-slice page). */
static inline bool hak_block_starts(const hak_slice_t *slice, const void *p) {
  return hak_block_check_shared(slice, p) || hak_page_block_starts(slice->page, p);
}
/* The entry of a span's first slice (a span of an arena segment). */
static inline hak_slice_t *hak_page_slice(const hak_page_t *page) {
  hak_segment_t *seg = hak_segment_of(page);
  return &seg->slices[page - seg->pages];
}
static inline uintptr_t hak_slice_owner(const hak_slice_t *slice) {
  return atomic_load_explicit(&slice->owner, memory_order_relaxed);
}
/* The owner word of a page (hak_slice_t). */
static inline uintptr_t hak_page_owner(const hak_page_t *page) { return hak_slice_owner(hak_page_slice(page)); }
/* Written in each of the page's slices, as a pointer to any of them finds
 * it there. */
static inline void hak_page_set_owner(hak_page_t *page, uintptr_t owner) {
  hak_slice_t *slice = hak_page_slice(page);
  atomic_store_explicit(&slice->owner, owner, memory_order_relaxed);
  for (size_t i = 1; i < page->slice_count; i++) atomic_store_explicit(&slice[i].owner, owner, memory_order_relaxed);
}
/* The free fast path's owner test, as a plain load that folds into the
 * compare. It can only be true for the owner, which wrote that value itself
 * (others write owner only while the page is abandoned, never naming this
 * heap), and an aligned word load does not tear. TSan sees the atomic. */
static inline bool hak_slice_owned_by(const hak_slice_t *slice, const struct hak_heap_s *heap) {
#if defined(__SANITIZE_THREAD__)
  return hak_slice_owner(slice) == (uintptr_t)heap;
#else
  return *(const uintptr_t *)&slice->owner == (uintptr_t)heap;
#endif
}

/* page->used has one writer (the owner) and is read by the census of other
 * threads, so it is _Atomic and every access relaxed. On x86-64 the fast
 * paths count with one add or subtract on memory: with a single writer that
 * is exactly a relaxed load and store, fused. (Written in C, GCC emits the
 * pair as a load, an add and a store: 2-3 more instructions in each of
 * malloc and free.) ThreadSanitizer builds use the C form, which it sees. */
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
static inline void hak_page_used_inc(hak_page_t *page) {
  __asm__("addw $1, %0" : "+m"(*(uint16_t *)&page->used));
}
static inline bool hak_page_used_dec_is_zero(hak_page_t *page) {   /* true: now 0 */
  bool zero;
  __asm__("subw $1, %0" : "+m"(*(uint16_t *)&page->used), "=@ccz"(zero));
  return zero;
}
#else
static inline void hak_page_used_inc(hak_page_t *page) {
  atomic_store_explicit(&page->used, (uint16_t)(atomic_load_explicit(&page->used, memory_order_relaxed) + 1),
                        memory_order_relaxed);
}
static inline bool hak_page_used_dec_is_zero(hak_page_t *page) {
  uint16_t used = (uint16_t)(atomic_load_explicit(&page->used, memory_order_relaxed) - 1);
  atomic_store_explicit(&page->used, used, memory_order_relaxed);
  return used == 0;
}
#endif
static inline uint16_t hak_page_used(const hak_page_t *page) {
  return atomic_load_explicit((_Atomic(uint16_t) *)&page->used, memory_order_relaxed);
}
static inline void hak_page_used_set(hak_page_t *page, uint16_t used) {
  atomic_store_explicit(&page->used, used, memory_order_relaxed);
}

/* ---------------------------------------------------------------- arenas */

#define HAK_SPAN_BINS 24
/* Fully free segments an arena keeps mapped (their memory is purged like
 * any free span); more are unmapped. (Keeping 4 made bench/large 25%
 * faster but realloc-double 12% slower with 22% more peak RSS: more
 * segments spread reuse over more memory.) */
#define HAK_EMPTY_SEGMENTS_KEPT 1
#define HAK_ARENAS_MAX 8

/* An arena's purge delay adapts to how soon its purged memory is needed
 * again (purge.c). All fields in ms of hak_clock_ms, under the arena lock. */
typedef struct hak_purge_clock_s {
  uint64_t delay;                        /* current delay: the option's, up to HAK_PURGE_DELAY_MAX */
  uint64_t purged_at;                    /* last purge of a span */
  uint64_t refault_at;                   /* last time purged slices were taken back soon after */
} hak_purge_clock_t;

/* An arena hands out spans of slices from its segments under its lock. Arenas
 * are shards: each thread heap draws from one, chosen round robin. */
typedef struct hak_arena_s {
  pthread_mutex_t lock;
  hak_page_t *spans[HAK_SPAN_BINS];      /* free spans by size */
  hak_segment_t *segments;
  size_t segment_count;
  size_t empty_segments;                 /* fully free segments kept (at most HAK_EMPTY_SEGMENTS_KEPT) */
  /* Written under the lock; read without it by whoever checks for due
   * work (the purger, malloc's slow path), hence atomic. */
  _Atomic(uint64_t) next_purge;          /* ms: earliest purge_at pending, or 0 */
  hak_purge_clock_t clock;               /* the arena's adaptive delay (purge.c), under the lock */
} hak_arena_t;

/* ---------------------------------------------------------------- heaps */

#if HAKMEM_SECURE
/* Freed blocks waiting to be reused, oldest first: a ring of them
 * (secure.c; a heap has one for small blocks, one for larger ones). */
#define HAK_QUARANTINE_SLOTS 64
#define HAK_QUARANTINE_RINGS 2
typedef struct hak_quarantine_s {
  void *p[HAK_QUARANTINE_SLOTS];         /* (two arrays, not one of pairs: a slot's fields are then */
  size_t usable[HAK_QUARANTINE_SLOTS];   /* read without scaling its index by hand) */
  size_t head, count;
  /* the larger blocks' ring only: their usable bytes. How many were put
   * in it in all (the oldest is number put - count), and `put` at the
   * quarantine's last tick (the blocks before it leave at the next:
   * secure.c, quarantine_age_ring): the larger blocks' ring, and both of
   * the shared heap's (whose blocks come only through quarantine_append) */
  size_t bytes, put, put_at_tick;
} hak_quarantine_t;
#endif

typedef struct hak_page_queue_s {
  hak_page_t *first, *last;
} hak_page_queue_t;

/* A statistics counter with one writer at a time (the thread that holds
 * the heap) and readers anywhere (reports): the writer adds with a relaxed
 * load and store, no read-modify-write instruction. */
typedef _Atomic(uint64_t) hak_counter_t;
static inline void hak_counter_inc(hak_counter_t *c) {
  atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1, memory_order_relaxed);
}
static inline uint64_t hak_counter_get(const hak_counter_t *c) {
  return atomic_load_explicit((hak_counter_t *)c, memory_order_relaxed);
}

/* The medium blocks of one class its thread freed last: the heap's
 * recent_count[i] of them, oldest first, so the newest is slot[count - 1]
 * (a free into a full ring pushes slot[0], the oldest, out to its page,
 * and the others down). 32 bytes, so a class's ring is found by a shift. */
#define HAK_RECENT_FIRST  57          /* hak_bin_of(HAK_SMALL_MAX + 1) (unit_size_classes checks) */
#define HAK_RECENT_BINS   16          /* ... to hak_bin_of(HAK_RECENT_MAX) */
#define HAK_RECENT_MAX    (32 * 1024)
#define HAK_RECENT_DEPTH  4
typedef struct hak_recent_s {
  hak_block_t *slot[HAK_RECENT_DEPTH];
} hak_recent_t;

/* Whether blocks of class `bin` wait in heap->recent when freed (the
 * subtraction wraps below HAK_RECENT_FIRST). */
static inline bool hak_bin_has_recent(size_t bin) { return bin - HAK_RECENT_FIRST < HAK_RECENT_BINS; }

/* hak_bin_of(size) - HAK_RECENT_FIRST for HAK_SMALL_MAX < size <=
 * HAK_RECENT_MAX: the medium malloc's ring lookup, one table load instead
 * of hak_bin_of's bit scan. The classes there are 1 KiB apart up to 16 KiB
 * and 2 KiB apart above, so (size - 1) / 1 KiB picks one
 * (unit_size_classes checks every size). */
static inline size_t hak_recent_index(size_t size) {
  static const uint8_t by_kib[(HAK_RECENT_MAX - HAK_SMALL_MAX) >> 10] = {
    0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15,
  };
  return by_kib[((size - 1) >> 10) - (HAK_SMALL_MAX >> 10)];
}

/* The foreign cache (free.c): small blocks of other threads' pages that
 * this thread freed, kept per class for its own next mallocs of the class.
 * Each class's list is in a page descriptor of its own, so that the malloc
 * fast path pops it as it pops a page, through heap->direct, at no cost to
 * the other classes. Its fields mean other things than a page's: `free`
 * the kept blocks (newest first), `capacity` counts pushes and `used` pops
 * since the class last ran out (both wrap: only their difference, the
 * blocks held, means anything), `alone` tells that the class's direct
 * entries lead here (hak_heap_update_direct), and `reserved` is `used` as
 * the last heartbeat saw it. Only free.c and that function read them. */
#define HAK_FOREIGN_BINS   HAK_RECENT_FIRST   /* the small classes */
#define HAK_FOREIGN_BLOCKS 8                  /* kept per class at most ... */
#define HAK_FOREIGN_BYTES  (16 * 1024)        /* ... and at most these bytes */
static inline size_t hak_foreign_held(const hak_page_t *f) {
  return (uint16_t)(f->capacity - atomic_load_explicit(&f->used, memory_order_relaxed));
}
static inline bool hak_foreign_drained(const hak_page_t *f) { return f->alone && f->free == NULL; }

/* Per-thread call counters, per size class (class 0: huge blocks). They
 * move only when HAKMEM_STATS is on. Written by the heap's holder, read by
 * reports (stats.c) at any time. */
typedef struct hak_bin_stats_s {
  hak_counter_t allocs, frees, remote_frees;
} hak_bin_stats_t;

/* Page events per size class, process-wide, always counted: on slow paths
 * only, by an atomic add. (Counted in each heap, they made a page of every
 * thread's heap resident for a few counters.) */
typedef struct hak_page_stats_s {
  _Atomic(uint64_t) pages_new, pages_freed, pages_abandoned, pages_adopted;
} hak_page_stats_t;
extern hak_page_stats_t hak_page_stats[HAK_BINS] HAK_INTERNAL;
static inline void hak_page_stat_inc(_Atomic(uint64_t) *c) { atomic_fetch_add_explicit(c, 1, memory_order_relaxed); }

/* A thread's heap. Only its thread touches it, except at thread exit or in
 * a forked child. Pages in its queues are owned by it (their owner word
 * names it). A page found full is abandoned (out of every queue), but for
 * the first page, which the fast path empties, and the pages kept at the
 * back (hak_heap_page_for_bin). */
typedef struct hak_heap_s {
  uint32_t heartbeat;                    /* fast mallocs left before one takes the slow path (below) */
  bool shared;                           /* the shared heap (heap.c): its bins come from hak_shared_bin_of */
#if !HAKMEM_SECURE
  /* (These, written by a thread's first frees and slow mallocs, sit on the
   * heap's first OS page, with the heartbeat: at its end they made every
   * thread that uses a few classes touch the second one too, 4 KiB more:
   * test_thread_footprint/own_heap, 23 KiB a thread, not 19.) */
  bool keeps_foreign;                    /* keeps other threads' blocks it frees, till the next heartbeat (free.c) */
  uint32_t foreign_frees, slow_mallocs;  /* since the last heartbeat: frees of other threads' blocks; slow
                                            mallocs but the heartbeat's own (free.c, free_foreign) */
  /* small classes: blocks of other threads' pages this thread freed
   * (above), HAK_FOREIGN_BINS descriptors, mapped when the thread first
   * keeps such blocks (most threads never do: the heap stays two OS pages),
   * unmapped at its exit. Empty while keeps_foreign is false. */
  hak_page_t *foreign;
#endif
  hak_page_t *direct[HAK_DIRECT];        /* hak_direct_index(size) -> first page of its bin */
  hak_page_queue_t queues[HAK_BINS];
  uint64_t kept_bins[(HAK_BINS + 63) / 64];   /* classes whose queue may end in kept pages (heap.c) */
  uint64_t queued_bins[(HAK_BINS + 63) / 64]; /* classes whose queue holds a page (heap.c) */
  uint32_t beats;                        /* heartbeats so far (heap.c: hak_heap_retire_idle) */
  hak_arena_t *arena;
  struct hak_heap_s *list_next, *list_prev;   /* all heaps (heaps_lock, heap.c) */
  hak_recent_t recent[HAK_RECENT_BINS];  /* medium classes up to 32 KiB: blocks this thread freed last (free.c) */
  uint8_t recent_count[HAK_RECENT_BINS]; /* ... how many in each ring */
  uint64_t paged_bins[(HAK_BINS + 63) / 64];  /* classes this heap has made a page for (heap.c) */
  hak_bin_stats_t stats[HAK_BINS];
#if HAKMEM_SECURE
  hak_quarantine_t quarantine[HAK_QUARANTINE_RINGS];   /* secure.c: RING_SMALL, RING_LARGE */
#endif
} hak_heap_t;

/* The heartbeat: of every HAK_HEARTBEAT mallocs the fast paths would serve,
 * one takes the slow path instead, which does the work due (purge.c) when
 * no purger thread does it. The owner's frees go back onto the list the
 * fast path pops (LIFO), so a program that keeps a steady set of blocks
 * might never reach the slow path otherwise. A slow call counts as
 * HAK_HEARTBEAT_SLOW fast ones. A malloc beats at most once, and only
 * with a block in hand: a second beat would take the counter past zero,
 * and the empty heap (which has no blocks) never writes its counter. */
#define HAK_HEARTBEAT      4096
#define HAK_HEARTBEAT_SLOW 64
static inline bool hak_heap_beat(hak_heap_t *heap) { return --heap->heartbeat != 0; }

/* The bin a heap serves a request of `size` (<= HAK_MEDIUM_MAX) from. */
static inline size_t hak_heap_bin_of(const hak_heap_t *heap, size_t size) {
  return heap->shared ? hak_shared_bin_of(size) : hak_bin_of(size);
}

extern hak_heap_t hak_heap_empty HAK_INTERNAL;
extern hak_page_t hak_page_empty HAK_INTERNAL;
extern hak_page_t hak_page_unmapped HAK_INTERNAL;   /* slices past a huge mapping */
extern __thread hak_heap_t *hak_tls_heap HAK_INTERNAL __attribute__((tls_model("initial-exec")));

static inline hak_heap_t *hak_heap_get(void) { return hak_tls_heap; }

/* Whether the process has never had a second thread (glibc 2.32+ says so;
 * without it, taken as threaded). */
extern char __libc_single_threaded __attribute__((weak));
static inline bool hak_single_threaded(void) { return &__libc_single_threaded != NULL && __libc_single_threaded; }

/* ---------------------------------------------------------------- locks */

/* Every allocator lock is taken through these (the fork handlers excepted),
 * on slow paths only. They count the locks this thread holds, so that a
 * fork() from a signal handler that interrupted this thread inside the
 * allocator does not wait for a lock the interrupted code holds (init.c).
 * The count rises before taking and falls after giving back, so a signal
 * between the two steps errs on the safe side. */
extern __thread unsigned hak_locks_held HAK_INTERNAL __attribute__((tls_model("initial-exec")));

/* The count's two steps, each fenced against a signal handler on this
 * thread (which reads it). */
static inline void locks_held_rise(void) {
  hak_locks_held++;
  atomic_signal_fence(memory_order_seq_cst);
}
static inline void locks_held_fall(void) {
  atomic_signal_fence(memory_order_seq_cst);
  hak_locks_held--;
}

static inline void hak_lock(pthread_mutex_t *m) {
  locks_held_rise();
  pthread_mutex_lock(m);
}
static inline int hak_trylock(pthread_mutex_t *m) {
  locks_held_rise();
  int err = pthread_mutex_trylock(m);
  if (err != 0) locks_held_fall();
  return err;
}
static inline void hak_unlock(pthread_mutex_t *m) {
  pthread_mutex_unlock(m);
  locks_held_fall();
}
/* A read-write lock held to read (huge.c: resizes, which fork waits for). */
static inline int hak_read_lock(pthread_rwlock_t *l) {
  locks_held_rise();
  int err = pthread_rwlock_rdlock(l);
  if (err != 0) locks_held_fall();
  return err;
}
static inline void hak_read_unlock(pthread_rwlock_t *l) {
  pthread_rwlock_unlock(l);
  locks_held_fall();
}
/* The lock taken (`wait`), or only if it is free: whether it is held now
 * (the purger waits; a thread's own purge work skips what is busy). */
static inline bool hak_lock_or_try(pthread_mutex_t *m, bool wait) {
  if (wait) {
    hak_lock(m);
    return true;
  }
  return hak_trylock(m) == 0;
}

/* ---------------------------------------------------------------- options */

typedef enum {
  HAK_OPT_VERBOSE, HAK_OPT_STATS, HAK_OPT_PURGE_DELAY, HAK_OPT_PURGE_MODE,
  HAK_OPT_ARENAS, HAK_OPT_HUGE_CACHE, HAK_OPT_BACKGROUND, HAK_OPT_ZERO_ON_FREE, HAK_OPT_HUGE_PAGES, HAK_OPT_COUNT
} hak_option_t;

enum { HAK_STATS_OFF = 0, HAK_STATS_TEXT = 1, HAK_STATS_JSON = 2 };
enum { HAK_PURGE_DONTNEED = 0, HAK_PURGE_FREE = 1 };

extern long hak_options[HAK_OPT_COUNT] HAK_INTERNAL;
static inline long hak_option(hak_option_t o) { return hak_options[o]; }

/* ---------------------------------------------------------------- deferred work */

/* Memory will be due back to the OS at `due` (ms; a dirty free span, a
 * cached huge block, a published page): whoever returns memory (the purger
 * thread, or malloc's slow path without it) looks only when there is
 * something to see, and the purger is woken if it sleeps past `due`. Not
 * on any fast path; safe under any allocator lock. */
extern _Atomic(bool) hak_work_pending HAK_INTERNAL;
HAK_INTERNAL void hak_note_pending_work(uint64_t due);

/* ---------------------------------------------------------------- functions */

/* os.c */
HAK_INTERNAL void *hak_os_alloc_aligned(size_t size, size_t align);
HAK_INTERNAL void  hak_os_free(void *p, size_t size);
typedef enum {
  HAK_PURGE_FAILED,                      /* still resident, old bytes intact */
  HAK_PURGED_LAZY,                       /* MADV_FREE: returned, may still read old bytes */
  HAK_PURGED_ZERO,                       /* returned, reads as zero */
} hak_purge_result_t;
HAK_INTERNAL hak_purge_result_t hak_os_purge(void *p, size_t size);
HAK_INTERNAL bool hak_os_zero(void *p, size_t size);
HAK_INTERNAL void hak_os_no_huge_pages(void *p, size_t size);
HAK_INTERNAL bool hak_os_huge_pages(void *p, size_t size, bool on);
HAK_INTERNAL bool hak_os_populate(void *p, size_t size);
HAK_INTERNAL bool  hak_os_resize_in_place(void *p, size_t old_size, size_t new_size);
HAK_INTERNAL uint64_t hak_clock_ms(void);
/* The earlier of two deadlines (hak_clock_ms), 0 meaning none. */
static inline uint64_t hak_earliest(uint64_t a, uint64_t b) { return a == 0 || (b != 0 && b < a) ? b : a; }
HAK_INTERNAL unsigned hak_cpu_count(void);
HAK_INTERNAL size_t hak_process_rss(void);
HAK_INTERNAL size_t hak_os_map_limit(void);
HAK_INTERNAL bool hak_os_thp_enabled(void);

/* segment.c */
HAK_INTERNAL void hak_arenas_init(void);
HAK_INTERNAL unsigned hak_arena_count(void);
HAK_INTERNAL hak_arena_t *hak_arena_for_new_heap(void);
HAK_INTERNAL hak_arena_t *hak_arena_first(void);
HAK_INTERNAL hak_page_t *hak_span_alloc(hak_arena_t *arena, size_t slices, size_t align, uint8_t kind, bool sparse,
                                        bool *resident);
/* Whether the program is seen to use its medium blocks densely (a new
 * page of them may then begin a huge-page stretch), and the page whose
 * first block, handed out plain from memory not resident before, is to be
 * judged next (segment.c: use_record_t). */
HAK_INTERNAL bool hak_medium_use_is_dense(void);
HAK_INTERNAL void hak_medium_use_probe(const hak_page_t *page);
HAK_INTERNAL bool hak_span_free(hak_page_t *page, uint8_t kind);
HAK_INTERNAL void *hak_large_alloc(hak_heap_t *heap, size_t size, size_t align, bool zero);
HAK_INTERNAL bool  hak_large_free(hak_page_t *span, size_t usable);
HAK_INTERNAL bool  hak_large_shrink(hak_page_t *span, size_t usable, size_t size);
HAK_INTERNAL uint64_t hak_arenas_purge_due(uint64_t now, bool wait);
HAK_INTERNAL uint64_t hak_arena_purge_due(hak_arena_t *a, uint64_t now, bool wait);
HAK_INTERNAL void hak_arena_purge_all(hak_arena_t *a);
HAK_INTERNAL void hak_arenas_purge_all(void);
typedef void hak_span_visit_fn(const hak_page_t *span, void *arg);
HAK_INTERNAL void hak_arenas_visit_spans(hak_span_visit_fn *fn, void *arg);
HAK_INTERNAL void hak_arenas_release_empty(void);
HAK_INTERNAL void hak_segment_map_set(hak_segment_t *seg, bool mapped);
HAK_INTERNAL void hak_segment_init_header(hak_segment_t *seg, size_t size, hak_arena_t *a);
HAK_INTERNAL bool hak_arenas_are_valid(void);
HAK_INTERNAL void hak_segments_fork_prepare(void);
HAK_INTERNAL void hak_segments_fork_parent(void);
HAK_INTERNAL void hak_segments_fork_child(void);

/* huge.c */
HAK_INTERNAL void *hak_huge_alloc(size_t size, size_t align, bool zero);
HAK_INTERNAL bool  hak_huge_free(hak_segment_t *seg, hak_page_t *page);
HAK_INTERNAL bool  hak_huge_cache_holds(const hak_segment_t *seg);
HAK_INTERNAL size_t hak_huge_usable_size(hak_segment_t *seg, hak_page_t *page, const void *p);
HAK_INTERNAL bool  hak_huge_take_for_resize(hak_page_t *page);
HAK_INTERNAL void *hak_huge_realloc(hak_segment_t *seg, hak_page_t *page, size_t new_size);
HAK_INTERNAL size_t hak_huge_shrink(hak_segment_t *seg, hak_page_t *page, size_t size);
HAK_INTERNAL void  hak_huge_cache_flush(void);
HAK_INTERNAL uint64_t hak_huge_cache_decay(uint64_t now, bool wait);
HAK_INTERNAL size_t hak_huge_cache_bytes(void);
HAK_INTERNAL bool  hak_giant_free(void *p);
HAK_INTERNAL size_t hak_giant_usable_size(const void *p);
HAK_INTERNAL void hak_huge_resize_fork_prepare(void);
HAK_INTERNAL void hak_huge_resize_fork_parent(void);
HAK_INTERNAL void hak_huge_resize_fork_child(void);
HAK_INTERNAL void hak_huge_fork_prepare(void);
HAK_INTERNAL void hak_huge_fork_parent(void);
HAK_INTERNAL void hak_huge_fork_child(void);

/* page.c: one page's blocks, as its owner sees them */
HAK_INTERNAL size_t hak_page_slices_for(size_t bin);
HAK_INTERNAL void hak_page_init(hak_heap_t *heap, hak_page_t *page, size_t bin);
/* Most bytes carved from a page's unused area per extension: enough to
 * amortise the slow path, few enough not to touch memory the program may
 * never use. */
#define HAK_EXTEND_BYTES (16 * 1024)
HAK_INTERNAL void hak_page_extend(hak_page_t *page, bool sparing);
HAK_INTERNAL void hak_page_take_remote(hak_page_t *page, uintptr_t xfree);
HAK_INTERNAL void hak_page_use_gathered(hak_page_t *page);
HAK_INTERNAL void hak_page_gather_frees(hak_page_t *page);
HAK_INTERNAL bool hak_page_is_valid(const hak_page_t *page);
HAK_INTERNAL void hak_page_free_span(hak_page_t *page);

/* An empty page that is the only one in its queue and small is kept:
 * freeing it and taking it back on the next malloc would thrash. One byte
 * of the page's own cache line says so (page->alone, kept by the queue
 * operations), so the free that empties it tests one flag. */
static inline bool hak_page_keep_when_empty(const hak_page_t *page) { return page->alone; }

/* owner.c: how pages move between threads */
HAK_INTERNAL void hak_page_free_remote(hak_page_t *page, hak_block_t *b);
HAK_INTERNAL void hak_page_abandon(hak_page_t *page, hak_heap_t *last_owner, bool swept);
HAK_INTERNAL void hak_page_abandon_at_exit(hak_page_t *page);
HAK_INTERNAL bool hak_page_try_readopt(hak_heap_t *heap, hak_page_t *page);
HAK_INTERNAL hak_page_t *hak_reclaim_adopt(hak_heap_t *heap, size_t bin, bool own_only);
HAK_INTERNAL bool hak_reclaim_sweep(hak_heap_t *heap, bool wait, bool all);
HAK_INTERNAL size_t hak_page_purge_held(hak_page_t *page);
HAK_INTERNAL void hak_reclaim_fork_prepare(void);
HAK_INTERNAL void hak_reclaim_fork_parent(void);
HAK_INTERNAL void hak_reclaim_fork_child(void);

/* heap.c */
HAK_INTERNAL void hak_heap_key_create(void);
/* The calling thread's new heap; for a thread whose heap was given up at
 * exit, the shared heap, locked. Either way hand it back with
 * hak_heap_release after the operation. NULL: out of memory. */
HAK_INTERNAL hak_heap_t *hak_heap_thread_init(void);
/* For an allocation of `*size` bytes by a thread that has no heap: the
 * shared heap, locked, for its first HAK_YOUNG_ALLOCS small blocks (see
 * heap.c), else its own new heap. From the shared heap a small request
 * becomes hak_shared_request(*size) (not under a tool, which must see the
 * size asked for), and the caller allocates that. */
#define HAK_YOUNG_ALLOCS 64
HAK_INTERNAL hak_heap_t *hak_heap_for_allocation(size_t *size);
/* A small block of the shared heap: whole cache lines (heap.c). Its class
 * is a multiple of HAK_SHARED_LINE, so its blocks start on lines. */
#define HAK_SHARED_LINE  64
static inline size_t hak_shared_request(size_t size) { return hak_align_up(size > 0 ? size : 1, HAK_SHARED_LINE); }
/* What a small request to the shared heap gets (it may hold more than a
 * thread heap's block for the same request, or less: from 1 to 4 KiB). */
static inline size_t hak_shared_block_size(size_t request) {
  return hak_bin_size(hak_shared_bin_of(hak_shared_request(request)));
}
/* The shared heap, locked. */
HAK_INTERNAL hak_heap_t *hak_heap_shared(void);
HAK_INTERNAL void hak_heap_release(hak_heap_t *heap);
HAK_INTERNAL void hak_heap_thread_done(hak_heap_t *heap);
HAK_INTERNAL void hak_heap_direct_init(void);
HAK_INTERNAL void hak_heap_update_direct(hak_heap_t *heap, size_t bin);
HAK_INTERNAL void hak_heap_queue_push_back(hak_heap_t *heap, hak_page_t *page);
HAK_INTERNAL hak_page_t *hak_heap_page_for_bin(hak_heap_t *heap, size_t bin);
HAK_INTERNAL void hak_heap_abandon_kept(hak_heap_t *heap);
HAK_INTERNAL void hak_heap_retire_idle(hak_heap_t *heap);
HAK_INTERNAL void hak_heap_free_empty_pages(hak_heap_t *heap);
HAK_INTERNAL void hak_heap_retire_page(hak_heap_t *heap, hak_page_t *page);
HAK_INTERNAL void hak_heaps_fork_prepare(void);
HAK_INTERNAL void hak_heaps_fork_parent(void);
HAK_INTERNAL void hak_heaps_fork_child(void);
/* Calls fn under heaps_lock, first with NULL (standing for the threads that
 * have exited: hak_stats_merge_exited runs under the same lock, as their
 * heaps leave the list), then with each live heap: so a thread exiting
 * meanwhile is counted once. */
typedef void hak_heap_visit_fn(hak_heap_t *heap, void *arg);
HAK_INTERNAL void hak_heaps_visit(hak_heap_visit_fn *fn, void *arg);
HAK_INTERNAL int hak_malloc_trim(size_t pad);
HAK_INTERNAL int hak_unshare(int flags);   /* purge.c: the background thread ended first */
HAK_INTERNAL int hak_setns(int fd, int nstype);
HAK_INTERNAL void hak_memory_short(void);   /* purge.c: a mapping was refused */
HAK_INTERNAL void *hak_os_alloc_or_short(size_t size, size_t align);

/* free.c: what a pointer handed back to hakmem is (hak_block_find). */
/* (The C++ deletes are ops of their own in the secure variant only, which
 * tells them from free: secure.h, allocation families.) */
typedef enum {
  HAK_OP_FREE, HAK_OP_REALLOC, HAK_OP_USABLE_SIZE,
  HAK_OP_DELETE, HAK_OP_DELETE_ARRAY, HAK_OP_DELETE_ALIGNED, HAK_OP_DELETE_ARRAY_ALIGNED
} hak_op_t;
typedef struct hak_block_ref_s {
  hak_segment_t *seg;                    /* NULL: a giant block */
  hak_page_t *page;                      /* its span: a page (p is the block: every block handed
                                            out starts its block), a large or a huge block */
  size_t usable;                         /* bytes from p to the end of the block */
  uint8_t kind;                          /* the span's kind as found (PAGE, LARGE or HUGE; giant: FREE):
                                            read again later, it may be another thread's by then */
} hak_block_ref_t;
HAK_INTERNAL HAK_NOINLINE void hak_block_search(hak_op_t op, const void *p, hak_block_ref_t *ref);

#include "tracking.h"

/* Block b's second word, where a free block holds its tag, read to tell
 * whether b is free: under memcheck as tracking.h reads it (a live block's
 * may hold bytes the program copied there unwritten). */
static inline HAK_NO_ASAN uintptr_t hak_block_tag_word(const hak_block_t *b) {
  return hak_unlikely(hak_tracking_memcheck()) ? hak_track_tag_word(b) : b->free_tag;
}

/* A free block carries its tag (see hak_block_t); carved blocks get it too,
 * so a block malloc never handed out counts as free. */
static inline HAK_NO_ASAN bool hak_block_is_free(const hak_block_t *b, const hak_page_t *page) {
  return hak_block_tag_word(b) == hak_free_tag(page);
}

/* hak_block_find's usual case, inline without the search and its saved
 * registers: p is the start of a live block of a page, checked as
 * free_in_slice checks it. Its page (and *seg_out), or NULL for every
 * other pointer (a realloc in place of bench/realloc spent 63
 * instructions in the search, 2/3 of its cost). Not under a tool
 * (tracking.h): its callers look first, and leave such calls to the
 * search, which reads the tag word as memcheck needs. */
static inline hak_page_t *hak_live_block_page(const void *p, hak_segment_t **seg_out) {
  hak_segment_t *seg = hak_segment_lookup(p);
  if (hak_unlikely(seg == NULL)) return NULL;
  const hak_slice_t *slice = hak_slice_at(seg, p);
  hak_page_t *page = slice->page;
  if (page == NULL || !hak_block_starts(slice, p) || ((const hak_block_t *)p)->free_tag == hak_free_tag(page))
    return NULL;
  *seg_out = seg;
  return page;
}

/* Find the live block p was handed out as, or report: p must be exactly an
 * address malloc & co. returned (the start of a block: aligned blocks are
 * too, alloc.c), not freed since. Off the fast paths: free's generic
 * path, realloc and malloc_usable_size. `op` names the call. */
static inline void hak_block_find(hak_op_t op, const void *p, hak_block_ref_t *ref) {
  hak_segment_t *seg;
  hak_page_t *page = hak_likely(!hak_tracking) ? hak_live_block_page(p, &seg) : NULL;
  if (hak_likely(page != NULL)) *ref = (hak_block_ref_t){ seg, page, page->block_size, HAK_SPAN_PAGE };
  else hak_block_search(op, p, ref);
}
HAK_INTERNAL const char *hak_op_name(hak_op_t op);
HAK_INTERNAL HAK_NOINLINE HAK_NORETURN void hak_report_freed(hak_op_t op, const void *p, const char *what);
HAK_INTERNAL HAK_NOINLINE HAK_NORETURN void hak_report_raced(hak_op_t op, const void *p);

/* purge.c */
#define HAK_PURGE_DELAY_MAX 500          /* ms: most an arena's delay adapts up to */
#define HAK_PURGE_RETRY     1000         /* ms: wait before retrying a purge that failed */
#define HAK_PURGE_KEPT      UINT64_MAX   /* a free span's purge_at: kept resident (segment.c) */
HAK_INTERNAL void hak_purge_due_work(hak_heap_t *heap);
HAK_INTERNAL void hak_purger_consider_start(void);
/* A page was published, or a block freed into a published page (which may
 * have emptied it): the next sweep has something to look at. */
extern _Atomic(bool) hak_sweep_news HAK_INTERNAL;
HAK_INTERNAL void hak_note_sweep_news_slow(void);
static inline void hak_note_sweep_news(void) {
  if (!atomic_load_explicit(&hak_sweep_news, memory_order_relaxed)) hak_note_sweep_news_slow();
}
/* A block was freed into a page its owner holds: the owner gathers it only
 * when it allocates from that page again (see hak_page_purge_held). */
extern _Atomic(bool) hak_held_news HAK_INTERNAL;
HAK_INTERNAL void hak_note_held_frees_slow(void);
static inline void hak_note_held_frees(void) {
  if (!atomic_load_explicit(&hak_held_news, memory_order_relaxed)) hak_note_held_frees_slow();
}
HAK_INTERNAL void hak_purge_clock_init(hak_purge_clock_t *c);
HAK_INTERNAL uint64_t hak_purge_deadline(hak_purge_clock_t *c, uint64_t now);
HAK_INTERNAL void hak_purge_clock_refault(hak_purge_clock_t *c, uint64_t now);
HAK_INTERNAL void hak_purger_fork_child(void);
HAK_INTERNAL void hak_purger_init(void);

/* alloc.c / free.c */
/* size first: it arrives in the first argument register of malloc, so the
 * fast path's tail call to here needs no register shuffle. */
HAK_INTERNAL void *hak_malloc_generic(size_t size, hak_heap_t *heap, bool zero);
/* What an aligned allocation of `size` (alignment above HAK_ALIGN, up to a
 * slice) asks the classes for: the class of that keeps the alignment. */
HAK_INTERNAL size_t hak_aligned_request(size_t size, size_t align);
HAK_INTERNAL void  hak_free_generic(void *p, hak_heap_t *heap);
HAK_INTERNAL void  hak_heap_flush_recent(hak_heap_t *heap, unsigned keep);
#if HAKMEM_SECURE   /* (no foreign cache: its free-list links are checked against their own page) */
static inline void hak_foreign_init(void) {}
static inline void hak_heap_flush_foreign(hak_heap_t *heap) { (void)heap; }
static inline void hak_heap_foreign_done(hak_heap_t *heap) { (void)heap; }
static inline void hak_heap_foreign_heartbeat(hak_heap_t *heap) { (void)heap; }
#else
HAK_INTERNAL void  hak_foreign_init(void);   /* at process start: each class's bound (free.c) */
HAK_INTERNAL void  hak_heap_flush_foreign(hak_heap_t *heap);
HAK_INTERNAL void  hak_heap_foreign_done(hak_heap_t *heap);
HAK_INTERNAL void  hak_heap_foreign_heartbeat(hak_heap_t *heap);
HAK_INTERNAL void  hak_heap_foreign_reset(hak_heap_t *heap, size_t bin);
#endif
/* realloc's move: a block of the size asked, of a quarter more than the
 * old block (HAK_GROW_QUARTER), or a huge block of the size asked. */
typedef enum { HAK_GROW_AS_ASKED, HAK_GROW_QUARTER, HAK_GROW_HUGE } hak_growth_t;
HAK_INTERNAL hak_growth_t hak_realloc_growth(size_t usable, size_t need);

/* cxx.c: the C++ operators a program replaced. The C++ runtime defines
 * each form of operator new and delete but these base forms as a call of
 * one of them (new[] of new, a sized or nothrow delete of the unsized
 * one...); its callee comes before it here. */
typedef enum {
  HAK_CXX_NEW, HAK_CXX_NEW_ARRAY, HAK_CXX_NEW_ALIGNED, HAK_CXX_NEW_ARRAY_ALIGNED,
  HAK_CXX_DELETE, HAK_CXX_DELETE_ARRAY, HAK_CXX_DELETE_ALIGNED, HAK_CXX_DELETE_ARRAY_ALIGNED,
  HAK_CXX_FORMS
} hak_cxx_form_t;
static inline bool hak_cxx_aligned(hak_cxx_form_t form) {   /* an align_val_t form */
  return form == HAK_CXX_NEW_ALIGNED || form == HAK_CXX_NEW_ARRAY_ALIGNED || form == HAK_CXX_DELETE_ALIGNED ||
         form == HAK_CXX_DELETE_ARRAY_ALIGNED;
}
enum { HAK_CXX_UNKNOWN, HAK_CXX_ALL_OURS, HAK_CXX_SOME_REPLACED };
extern uint8_t hak_cxx_state HAK_INTERNAL;
/* Whether the program may have replaced an operator: it did, or that is
 * not known yet. A load, a compare and a branch, in the forms that call
 * another. */
static inline bool hak_cxx_maybe_replaced(void) {
  return hak_unlikely(__atomic_load_n(&hak_cxx_state, __ATOMIC_RELAXED) != HAK_CXX_ALL_OURS);
}
/* Whether `form`, or a form it calls, is the program's own: then a form
 * defined as a call of `form` makes that call (hak_cxx_new, hak_cxx_delete). */
HAK_INTERNAL bool hak_cxx_replaced(hak_cxx_form_t form);
/* `form` as the program resolves it (align: the align_val_t forms'). */
HAK_INTERNAL void *hak_cxx_new(hak_cxx_form_t form, size_t size, size_t align);
HAK_INTERNAL void hak_cxx_delete(hak_cxx_form_t form, void *p, size_t align);
/* hakmem's forms (alloc.c, free.c; exports.h gives their exported names),
 * but the plain and aligned delete, which are free in the default build
 * (hak_delete and hak_delete_aligned in the secure variant, secure.h). */
HAK_INTERNAL void *hak_new(size_t size);
HAK_INTERNAL void *hak_new_array(size_t size);
HAK_INTERNAL void *hak_new_nothrow(size_t size, const void *tag);
HAK_INTERNAL void *hak_new_array_nothrow(size_t size, const void *tag);
HAK_INTERNAL void *hak_new_aligned(size_t size, size_t align);
HAK_INTERNAL void *hak_new_array_aligned(size_t size, size_t align);
HAK_INTERNAL void *hak_new_aligned_nothrow(size_t size, size_t align, const void *tag);
HAK_INTERNAL void *hak_new_array_aligned_nothrow(size_t size, size_t align, const void *tag);
HAK_INTERNAL void hak_delete_array(void *p);
HAK_INTERNAL void hak_delete_sized(void *p, size_t size);
HAK_INTERNAL void hak_delete_nothrow(void *p, const void *tag);
HAK_INTERNAL void hak_delete_array_sized(void *p, size_t size);
HAK_INTERNAL void hak_delete_array_nothrow(void *p, const void *tag);
HAK_INTERNAL void hak_delete_array_aligned(void *p, size_t align);
HAK_INTERNAL void hak_delete_aligned_sized(void *p, size_t size, size_t align);
HAK_INTERNAL void hak_delete_aligned_nothrow(void *p, size_t align, const void *tag);
HAK_INTERNAL void hak_delete_array_aligned_sized(void *p, size_t size, size_t align);
HAK_INTERNAL void hak_delete_array_aligned_nothrow(void *p, size_t align, const void *tag);

/* init.c */
HAK_INTERNAL void hak_process_init(void);
extern _Atomic int hak_init_state HAK_INTERNAL;   /* 0 none, 1 running, 2 done */

/* options.c */
HAK_INTERNAL void hak_options_init(void);
HAK_INTERNAL void hak_message(const char *fmt, ...);
HAK_INTERNAL void hak_verbose(const char *fmt, ...);
HAK_INTERNAL void hak_format_fd(int fd, const char *fmt, ...);
HAK_INTERNAL size_t hak_format(char *buf, size_t cap, const char *fmt, ...);
HAK_INTERNAL HAK_NORETURN void hak_fatal(const char *fmt, ...);

/* stats.c */
HAK_INTERNAL void hak_stats_at_exit(void);
HAK_INTERNAL void hak_stats_merge_exited(hak_heap_t *heap);
HAK_INTERNAL void hak_stats_fork_prepare(void);
HAK_INTERNAL void hak_stats_fork_parent(void);
HAK_INTERNAL void hak_stats_fork_child(void);
extern _Atomic(int64_t) hak_stat_committed HAK_INTERNAL, hak_stat_committed_peak HAK_INTERNAL;
extern _Atomic(int64_t) hak_stat_segments HAK_INTERNAL, hak_stat_huge_bytes HAK_INTERNAL;
extern _Atomic(int64_t) hak_stat_purged HAK_INTERNAL;
extern _Atomic(int64_t) hak_stat_huge_cache_hits HAK_INTERNAL, hak_stat_huge_cache_misses HAK_INTERNAL;
extern _Atomic(int64_t) hak_stat_huge_count HAK_INTERNAL, hak_stat_segments_released HAK_INTERNAL;
extern _Atomic(int64_t) hak_stat_large_count HAK_INTERNAL, hak_stat_large_bytes HAK_INTERNAL;
extern _Atomic(int64_t) hak_stat_huge_stretches HAK_INTERNAL;   /* segment.c */
HAK_INTERNAL void hak_stat_commit(int64_t delta);

#include "secure.h"
#include "exports.h"

/* Take a block from a page whose free list has one (both variants' malloc
 * fast paths; here, after secure.h's hak_block_next): hak_page_pop, or
 * hak_page_take after the caller's own checks (the secure malloc's).
 *
 * Block b, the head of page->free, is handed out; `next`, its link
 * checked, becomes the list's head, prefetched: a block another thread
 * freed, or one that waited in the secure variant's quarantine, is no
 * longer in this core's cache, and the next malloc would wait for it (in
 * `exchange`, 1 of every 3 samples of malloc was that load; one
 * instruction here cut it by 2 in 5). */
static inline void *hak_page_take(hak_page_t *page, hak_block_t *b, hak_block_t *next) {
  page->free = next;
  __builtin_prefetch(next);
  hak_page_used_inc(page);
  b->free_tag = 0;
#if HAKMEM_SECURE
  b->next = NULL;   /* its encoded link, left for the program to read, would tell the page's secret */
#endif
  return b;
}

static inline void *hak_page_pop(hak_page_t *page) {
  hak_block_t *b = page->free;
#if HAKMEM_SECURE
  /* Every block on a free list carries its page's free tag: a link forged
   * or corrupted into pointing at a live block of the page (which the link
   * check lets through: it is a carved block) would hand it out twice. */
  if (hak_unlikely(b->free_tag != hak_free_tag(page))) hak_secure_bad_link(page, b);
#endif
  return hak_page_take(page, b, hak_block_next(page, b));
}

#endif
