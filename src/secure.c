/* The hardened variant's defences (HAKMEM_SECURE=1; see secure.h for the
 * list and README.md "Hardening" for what each catches and costs). In the
 * default build this file compiles to nothing.
 *
 * Every block of the secure variant ends in a canary trailer:
 *
 *   p ........ p+size  [pattern, up to 16 B]  ...  [zero:u32 | slack:u32]
 *   (the caller's)      the canary byte             last 8 bytes of the block
 *
 * slack is the count of bytes between the request and the trailer, so the
 * requested size needs no room anywhere else (not in the page descriptor,
 * not in a side table) and is found from the block's end, which the exact
 * block lookup gives anyway. Its low FAMILY_BITS bits are the block's
 * allocation family (secure.h), the rest the count. The trailer holds it
 * in its upper half and 0 in its lower (the half an overflow reaches
 * first), all masked with a keyed hash of the block's address: an overflow
 * that reaches the trailer changes its lower half, and one that stops
 * short changes the pattern bytes. Both are checked whenever the
 * block comes back (free, each delete, realloc, malloc_usable_size), and
 * the family against the call (not by malloc_usable_size).
 *
 * A freed block then waits in its thread's quarantine (FIFO, bounded by
 * count and bytes) before it really goes back to its page: its first
 * QUARANTINE_FILL bytes are filled with the freed word in its even words and
 * its quarantine tag in its odd ones (the second word's, so a second free
 * is a double free). When it leaves, the fill is checked: any difference
 * is a write after free. */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "internal.h"

#if HAKMEM_SECURE

/* ------------------------------------------------------------ randomness */

static uint64_t mix(uint64_t x) {   /* splitmix64's finaliser */
  x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27; x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* getrandom never allocates; if it fails (very early, or seccomp), the
 * clock and an address still differ from run to run. The system call,
 * not libc's getrandom, a thread cancellation point: malloc called it
 * under the shared heap's lock, and a thread cancelled there left the
 * lock held. */
static uint64_t random_seed(void) {
  uint64_t v;
  int saved = errno;
  bool got = syscall(SYS_getrandom, &v, sizeof v, GRND_NONBLOCK) == (long)sizeof v;
  errno = saved;
  if (got) return v;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return mix((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uintptr_t)&v);
}

/* The process keys (canary checks; quarantine tags): chosen at process
 * start (hak_secure_keys_init), or by the first thread that needs them
 * before, the same for all after. The tags have a key of their own: a
 * block handed out again may still hold its tags (as the program's
 * garbage), which must not tell the canary's key. */
static _Atomic(uint64_t) process_key;
static _Atomic(uint64_t) process_key2;   /* the canary hash's multiplier: mix(process_key) | 1 */
static _Atomic(uint64_t) process_tag_key;
static _Atomic(uint64_t) process_pattern_key;

/* Two words as one vector (the canary's pattern words, a quarantine fill). */
typedef uint64_t fill_t __attribute__((vector_size(16)));

/* The byte of the pattern after each request (both halves: the canary's
 * compare takes it from memory, as a constant) and the word of the fill
 * of quarantined blocks' even words: a byte chosen at random with the keys,
 * so that an overflow or a write after free cannot pass by writing the
 * very bytes checked for (with fixed ones, 0xca and 0xdf, it could). From
 * 0x80-0xfe: never text, nor 0 or 0xff, which memset and calloc write, so
 * that the common overflows are always seen. The same in every thread, and
 * in forked children (their blocks hold them). Written by each thread that
 * runs key_init, the same values, before it publishes process_key2. */
static fill_t canary_words;
static uint64_t freed_word;

static uint64_t pattern_word(uint64_t random) {
  uint64_t byte = 0x80 | (random & 0x7f);
  return (byte == 0xff ? 0xfe : byte) * 0x0101010101010101ULL;
}

static HAK_NOINLINE void key_init(void) {
  uint64_t fresh = random_seed() | 1, expected = 0;
  uint64_t k = atomic_compare_exchange_strong(&process_key, &expected, fresh) ? fresh : expected;
  expected = 0;
  atomic_compare_exchange_strong(&process_tag_key, &expected, random_seed() | 1);
  expected = 0;
  atomic_compare_exchange_strong(&process_pattern_key, &expected, random_seed() | 1);
  uint64_t patterns = atomic_load_explicit(&process_pattern_key, memory_order_relaxed);
  canary_words = (fill_t){ pattern_word(patterns >> 1), pattern_word(patterns >> 1) };   /* (bit 0 is always set) */
  freed_word = pattern_word(patterns >> 8);
  atomic_store_explicit(&process_key2, mix(k) | 1, memory_order_release);
}

/* The keys, read once per call (process_key2 is set after the others). */
typedef struct keys_s { uint64_t k1, k2, tag; } keys_t;

static inline keys_t keys(void) {
  uint64_t k2 = atomic_load_explicit(&process_key2, memory_order_acquire);
  if (hak_unlikely(k2 == 0)) {
    key_init();
    k2 = atomic_load_explicit(&process_key2, memory_order_acquire);
  }
  return (keys_t){ atomic_load_explicit(&process_key, memory_order_relaxed), k2,
                   atomic_load_explicit(&process_tag_key, memory_order_relaxed) };
}

/* Chosen at process start (init.c), before the "ready" its threads read. */
void hak_secure_keys_init(void) { keys(); }

/* The keys on the fast paths, which only a thread with a heap reaches, and
 * it made it after hak_process_init: chosen. (So they make no call that
 * returns, and keep no registers.) Without `tag`, the tag key is left 0
 * (malloc's, which needs only the canary's: a load it would not use, as
 * the loads are atomic, the compiler would still make). */
static inline keys_t keys_chosen(bool tag) {
  return (keys_t){ atomic_load_explicit(&process_key, memory_order_relaxed),
                   atomic_load_explicit(&process_key2, memory_order_relaxed),
                   tag ? atomic_load_explicit(&process_tag_key, memory_order_relaxed) : 0 };
}

/* A keyed hash of an address, for the canary masks: the 128-bit product of
 * the address xor the key by a second secret, its halves folded (as
 * wyhash's mum). On x86-64 the multiply is written out: with the 128-bit
 * type, GCC 12 gave the free fast path a stack frame it never used (a
 * push and a pop on every free; see also canary_failed). */
static inline uint64_t keyed_hash(keys_t ks, const void *p) {
  uint64_t lo = (uintptr_t)p ^ ks.k1, hi;
#if defined(__x86_64__)
  __asm__("mulq %2" : "+a"(lo), "=d"(hi) : "rm"(ks.k2) : "cc");
#else
  __uint128_t m = (__uint128_t)lo * ks.k2;
  lo = (uint64_t)m;
  hi = (uint64_t)(m >> 64);
#endif
  return lo ^ hi;
}

static __thread uint64_t rng_state __attribute__((tls_model("initial-exec")));

static uint64_t random_next(void) {
  if (hak_unlikely(rng_state == 0)) rng_state = random_seed() | 1;
  rng_state += 0x9e3779b97f4a7c15ULL;
  return mix(rng_state);
}

/* A forked child (init.c; only the forking thread lives on in it) draws
 * its own numbers: without this, every child of a pre-forking server gave
 * its new pages the same secrets and carve orders as its siblings, so one
 * child's crash told an attacker about the next. (The pages it inherits
 * keep theirs: their free lists are encoded with them.) */
void hak_secure_fork_child(void) { rng_state = 0; }

/* ------------------------------------------------------------ pages */

void hak_secure_page_init(hak_page_t *page) {
  page->secret = page->remote_secret = random_next();
  page->remote_block_size = page->block_size;
}

HAK_NORETURN void hak_secure_bad_link(const hak_page_t *page, const hak_block_t *b) {
  hak_fatal("free list corrupted at free block %p (page at %p): a use-after-free write or an overflow",
            (const void *)b, (void *)hak_page_area(page));
}

/* Link blocks first .. first + n - 1 onto page->free in random order, each
 * with its free tag (secure.h: carving). */
#define CARVE_MAX (HAK_EXTEND_BYTES / HAK_ALIGN)   /* an extension in the smallest class */
void hak_secure_carve(hak_page_t *page, uint8_t *first, size_t n) {
  uint16_t order[CARVE_MAX];
  if (n > CARVE_MAX) hak_fatal("internal error: carving %zu blocks at once", n);
  for (size_t i = 0; i < n; i++) {   /* Fisher-Yates, inside out */
    size_t j = (size_t)(random_next() % (i + 1));
    order[i] = order[j];
    order[j] = (uint16_t)i;
  }
  hak_block_t *list = page->free;
  for (size_t i = 0; i < n; i++) {
    hak_block_t *b = (hak_block_t *)(first + (size_t)order[i] * page->block_size);
    hak_block_set_next(page, b, list);
    b->free_tag = hak_free_tag(page);
    list = b;
  }
  page->free = list;
}

/* ------------------------------------------------------------ segments */

_Static_assert(sizeof(hak_segment_t) <= HAK_META_SIZE - HAK_OS_PAGE, "room for the metadata guard page");

/* The last OS page of the metadata: an underflow from the first data
 * slice faults there instead of rewriting page descriptors. */
void hak_secure_segment_init(hak_segment_t *seg) {
  int saved = errno;
  if (mprotect((uint8_t *)seg + HAK_META_SIZE - HAK_OS_PAGE, HAK_OS_PAGE, PROT_NONE) != 0)
    hak_verbose("hakmem: warning: no guard page for segment %p\n", (void *)seg);
  errno = saved;
}

/* The OS page right after a large or huge block (segment.c, huge.c), or
 * at the end of a page's span (below): a linear overflow or read past the
 * block faults there. If the OS refuses (too many mappings: each guard
 * splits one), the block goes unguarded (false); the canary still catches
 * what reaches its trailer. */
static bool protect(void *p, size_t size, bool on) {
  int saved = errno;
  if (mprotect(p, size, on ? PROT_NONE : PROT_READ | PROT_WRITE) == 0) return true;
  if (on) hak_verbose("hakmem: warning: no guard page at %p (mprotect: errno %d)\n", p, errno);
  else hak_fatal("internal error: guard page %p stays inaccessible (mprotect: errno %d)", p, errno);
  errno = saved;   /* (the block goes unguarded; the call that made it succeeds) */
  return false;
}

bool hak_secure_guard(void *page, bool on) { return protect(page, HAK_GUARD_SIZE, on); }

/* ------------------------------------------------------------ page guards */

/* The last OS page of every page's span is a guard page: no block is
 * carved over it (page.c, page_room), so a linear overflow off the end of
 * the page's last block runs through the page's unused tail into it and
 * faults, instead of into the next span. A slice's descriptor says whether
 * the slice's last OS page is such a guard (hak_page_t's `guarded`).
 *
 * Guards outlive their pages. Setting one and lifting it again is two
 * mprotect calls per page life, each splitting or merging a kernel mapping
 * under the process's mmap lock, and small pages come and go all the time
 * (a loop filling and freeing a thousand 4 KB blocks: 6x the time). So a
 * page going back to its arena keeps its guard: a free span may hold
 * guards (nothing reads or writes a free span's memory, madvise purges
 * through them, unmapping a segment drops them), and a span taken again
 * (hak_span_alloc) keeps the guard at its end if it has one, and has any
 * other lifted first. A slice that ends a page again (a small page on a
 * small page's slice, the usual case) costs no system call (that loop:
 * 1.07x, the 4 KiB each small page loses). And a page is placed to
 * end on a slice that has a guard already if one lies a little further in
 * the free span it is cut from (hak_secure_page_offset): without that,
 * medium pages, cut from merged free spans at new boundaries each time,
 * needed a guard of their own almost every time (vectors doubled through
 * every class: 1.2x the time, 1.04x with it).
 *
 * Each guard splits a mapping in three, and a process may hold
 * vm.max_map_count mappings (65530 by default), beyond which mmap fails,
 * for hakmem's segments as for the program. So page guards take at most a
 * quarter of that count (half the mappings; 1 GiB of small pages under the
 * default count): pages beyond go unguarded, as does a page whose guard
 * mprotect refuses, said with HAKMEM_VERBOSE=1. */
static _Atomic(size_t) page_guards;        /* in place, in free spans too */
static _Atomic(size_t) page_guards_max;    /* 0: not known yet */

static uint8_t *slice_guard(const hak_page_t *slice) { return hak_page_area(slice) + HAK_SLICE_SIZE - HAK_GUARD_SIZE; }

/* One more guard within the budget? (If so it is counted already.) */
static bool page_guard_budget(void) {
  size_t max = atomic_load_explicit(&page_guards_max, memory_order_relaxed);
  if (hak_unlikely(max == 0)) {   /* the same value whoever reads it first */
    size_t limit = hak_os_map_limit();
    max = (limit != 0 ? limit : 65530) / 4 + 1;
    atomic_store_explicit(&page_guards_max, max, memory_order_relaxed);
  }
  if (atomic_fetch_add_explicit(&page_guards, 1, memory_order_relaxed) < max) return true;
  atomic_fetch_sub_explicit(&page_guards, 1, memory_order_relaxed);
  static _Atomic(bool) said;
  if (!atomic_exchange_explicit(&said, true, memory_order_relaxed))
    hak_verbose("hakmem: warning: %zu page guards, a quarter of vm.max_map_count: further pages go unguarded\n", max);
  return false;
}

/* A span just taken for a page or a large block (`kind`), by the caller
 * alone (hak_span_alloc, the arena lock given back): a page keeps the
 * guard at its end or gets one; every other guard in it is lifted, all
 * with one call (mprotect leaves the accessible pages between as they
 * are, and merges the mappings: it needs no new one). */
void hak_secure_span_taken(hak_page_t *span, size_t slices, uint8_t kind) {
  hak_page_t *last = kind == HAK_SPAN_PAGE ? &span[slices - 1] : NULL, *lift_to = NULL;
  size_t lifted = 0;
  for (hak_page_t *slice = span; slice < span + slices; slice++) {
    if (!slice->guarded || slice == last) continue;
    slice->guarded = false;
    lift_to = slice;
    lifted++;
  }
  if (lifted > 0) {
    uint8_t *from = hak_page_area(span);
    protect(from, (size_t)(slice_guard(lift_to) + HAK_GUARD_SIZE - from), false);
    atomic_fetch_sub_explicit(&page_guards, lifted, memory_order_relaxed);
  }
  if (last == NULL || last->guarded || !page_guard_budget()) return;
  last->guarded = hak_secure_guard(slice_guard(last), true);
  if (!last->guarded) atomic_fetch_sub_explicit(&page_guards, 1, memory_order_relaxed);
}

/* Where a page of `slices` slices should start in a free span of `have`
 * (hak_span_alloc, under the arena lock: free slices' flags stay as they
 * are) to end on a slice that has a guard already: 0 if the span's first
 * slices do, or if no slice does within PLACE_AHEAD slices after. */
#define PLACE_AHEAD 16
size_t hak_secure_page_offset(const hak_page_t *span, size_t slices, size_t have) {
  for (size_t end = slices - 1; end < have && end < slices - 1 + PLACE_AHEAD; end++)
    if (span[end].guarded) return end - (slices - 1);
  return 0;
}

/* A segment is unmapped (under its arena's lock): its guards go with it. */
void hak_secure_segment_release(const hak_segment_t *seg) {
  size_t n = 0;
  for (size_t i = HAK_META_SLICES; i < HAK_SLICES; i++) n += seg->pages[i].guarded;
  atomic_fetch_sub_explicit(&page_guards, n, memory_order_relaxed);
}

/* ------------------------------------------------------------ canary */

#define CANARY_PATTERN  16      /* pattern bytes after the request, at most */

/* Both words are masked with a keyed hash of the block's address, so no
 * byte of the trailer has a predictable value: an off-by-one that writes
 * a 0 (a string's terminator) into a block with no pattern bytes changes
 * it too, except by a 1-in-256 chance. */
#define FAMILY_BITS 3
#define FAMILY_MASK ((1u << FAMILY_BITS) - 1)
#define SLACK_MAX   (UINT32_MAX >> FAMILY_BITS)
_Static_assert(HAK_SMALL_MAX <= SLACK_MAX, "a small block's slack is under 2^29 (canary_intact)");

/* The trailer, one 64-bit word: its word (the bytes from the request's end
 * to the trailer << FAMILY_BITS | the family) in its upper half, 0 in its
 * lower, masked with the keyed hash. Decoded (trailer_decode), the lower
 * half must be 0 (trailer_intact) and the upper is the word. */
static inline uint64_t trailer_encode(keys_t ks, const void *p, uint32_t word) {
  return keyed_hash(ks, p) ^ (uint64_t)word << 32;
}

static inline uint64_t trailer_decode(keys_t ks, const void *p, const uint8_t *end) {
  uint64_t stored;
  memcpy(&stored, end - HAK_CANARY_SIZE, sizeof stored);
  return stored ^ keyed_hash(ks, p);
}

static inline bool trailer_intact(uint64_t decoded) { return (uint32_t)decoded == 0; }
static inline uint32_t trailer_word(uint64_t decoded) { return (uint32_t)(decoded >> 32); }

/* Bytes from p, a block just handed out, to the end of its block. */
static size_t block_usable(const void *p) {
  hak_block_ref_t ref;
  hak_block_find(HAK_OP_USABLE_SIZE, p, &ref);
  return ref.usable;
}

/* The pattern bytes (at most CANARY_PATTERN, before the trailer) are two
 * words, the second at most at the trailer: stores and loads the same
 * whatever the slack, so no branch on it (the sizes a program asks for
 * come in no order a branch predictor learns). */
static inline const uint8_t *pattern_second(const uint8_t *pattern, const uint8_t *end) {
  return pattern + 8 < end - HAK_CANARY_SIZE ? pattern + 8 : end - HAK_CANARY_SIZE;
}

/* The bytes of the pattern words that are not pattern bytes, for n
 * pattern bytes: the 16 bytes from pattern_skip + CANARY_PATTERN - n, whose
 * first n are 0 and the rest 0xff. */
static const uint8_t pattern_skip[2 * CANARY_PATTERN] = {
  [CANARY_PATTERN ... 2 * CANARY_PATTERN - 1] = 0xff,
};

/* 16 bytes compared byte by byte: a compare's result is 0xff or 0 in each. */
typedef char bytes16_t __attribute__((vector_size(16)));

/* Whether each byte of r is 0xff. On x86-64, a byte-mask move and one
 * compare (folding the two halves as words takes GCC four instructions and
 * a test). */
static inline bool all_set(bytes16_t r) {
#if defined(__x86_64__)
  return __builtin_ia32_pmovmskb128(r) == 0xffff;
#else
  uint64_t half[2];
  memcpy(half, &r, sizeof half);
  return (half[0] & half[1]) == UINT64_MAX;
#endif
}

/* Write the canary of p, `usable` bytes to its block's end, allocated for
 * hak_secure_request(size) by `family`. A slack too large for the trailer
 * (512 MiB) is capped: the requested size then reads as somewhat larger.
 * (No block has one: a block's slack is under its class's step, a large
 * or huge block's under an OS page or a slice, a giant block's under an
 * OS page.) The pattern words may reach into the trailer, written after.
 * small: from the malloc fast path (a small slack; keys chosen). */
static inline __attribute__((always_inline)) void *canary_write(void *p, size_t usable, size_t size, unsigned family,
                                                                bool small) {
  size_t slack = usable - HAK_CANARY_SIZE - size;
  if (!small && slack > SLACK_MAX) slack = SLACK_MAX;
  uint8_t *end = (uint8_t *)p + usable;
  uint8_t *pattern = end - HAK_CANARY_SIZE - slack;
  uint64_t w = canary_words[0];
  memcpy(pattern, &w, 8);
  memcpy((uint8_t *)pattern_second(pattern, end), &w, 8);
  uint64_t t = trailer_encode(small ? keys_chosen(false) : keys(), p, (uint32_t)slack << FAMILY_BITS | family);
  memcpy(end - HAK_CANARY_SIZE, &t, sizeof t);
  return p;
}

static void *handout_as(void *p, size_t size, unsigned family) {
  if (p == NULL) return NULL;
  return canary_write(p, block_usable(p), size, family, false);
}

void *hak_secure_handout(void *p, size_t size) { return handout_as(p, size, HAK_FAMILY_MALLOC); }

/* Block p, just handed out (by malloc's family), is the family's. */
void *hak_secure_set_family(void *p, unsigned family) {
  if (p == NULL) return NULL;
  uint8_t *end = (uint8_t *)p + block_usable(p);
  keys_t ks = keys();
  uint64_t t = trailer_encode(ks, p, (trailer_word(trailer_decode(ks, p, end)) & ~FAMILY_MASK) | family);
  memcpy(end - HAK_CANARY_SIZE, &t, sizeof t);
  return p;
}

static HAK_NORETURN void report_overflow(hak_op_t op, const void *p, size_t size, size_t at) {
  if (size == SIZE_MAX)
    hak_fatal("heap overflow past the end of %p (its canary trailer was overwritten; found by %s)",
              p, hak_op_name(op));
  hak_fatal("heap overflow past the %zu bytes of %p (byte %zu after them was overwritten; found by %s)",
            size, p, at, hak_op_name(op));
}

/* A pattern byte of p (`size` bytes, then `slack`) was overwritten: which. */
static HAK_NOINLINE HAK_NORETURN void pattern_differs(hak_op_t op, const void *p, size_t size, size_t slack) {
  const uint8_t *pattern = (const uint8_t *)p + size;
  size_t i = 0;
  while (i + 1 < slack && i + 1 < CANARY_PATTERN && pattern[i] == (uint8_t)canary_words[0]) i++;
  report_overflow(op, p, size, i);
}

/* The family that must have allocated a block `op` frees. */
static unsigned op_family(hak_op_t op) {
  switch (op) {
    case HAK_OP_DELETE: return HAK_FAMILY_NEW;
    case HAK_OP_DELETE_ARRAY: return HAK_FAMILY_NEW_ARRAY;
    case HAK_OP_DELETE_ALIGNED: return HAK_FAMILY_NEW | HAK_FAMILY_ALIGNED;
    case HAK_OP_DELETE_ARRAY_ALIGNED: return HAK_FAMILY_NEW_ARRAY | HAK_FAMILY_ALIGNED;
    default: return HAK_FAMILY_MALLOC;
  }
}

static const char *const family_names[FAMILY_MASK + 1] = {
  [HAK_FAMILY_MALLOC] = "malloc", [HAK_FAMILY_NEW] = "new", [HAK_FAMILY_NEW_ARRAY] = "new[]",
  [HAK_FAMILY_NEW | HAK_FAMILY_ALIGNED] = "new (align_val_t)",
  [HAK_FAMILY_NEW_ARRAY | HAK_FAMILY_ALIGNED] = "new[] (align_val_t)",
};

/* The trailer names another family than op's: a mismatch, or (a value no
 * family has) an overwritten trailer. malloc_usable_size takes any (it
 * does not come here: so the frees need no registers kept across a call
 * that returns). */
static HAK_NOINLINE HAK_NORETURN void family_differs(hak_op_t op, const void *p, unsigned family) {
  if (family_names[family] == NULL) report_overflow(op, p, SIZE_MAX, 0);
  hak_fatal("%s of %p, allocated by %s (alloc-dealloc mismatch)", hak_op_name(op), p, family_names[family]);
}

/* Whether a block of `family` may be released by op. */
static inline bool family_fits(hak_op_t op, unsigned family) {
  return hak_likely(family == op_family(op)) || (op == HAK_OP_USABLE_SIZE && family_names[family] != NULL);
}

/* A sized free or delete of p (of `size` bytes) gave another size (as a
 * delete through a pointer to a base class without a virtual destructor
 * does). (Not which size: the fast path does not keep it.) */
static HAK_NOINLINE HAK_NORETURN void size_differs(hak_op_t op, const void *p, size_t size) {
  hak_fatal("%s of %p with a size other than the %zu bytes it was allocated with",
            op == HAK_OP_FREE ? "free_sized (or free_aligned_sized)" : hak_op_name(op), p, size);
}

static inline __attribute__((always_inline)) bool canary_intact(keys_t ks, hak_op_t op, const void *p, size_t usable,
                                                                bool sized, size_t given, size_t *size, bool small);

/* A block of `family` that op, a free or delete of another family,
 * releases, where the program's own operators explain it: its new (of the
 * kind op deletes) is its own, and took the block from malloc; or its
 * delete (of the block's kind) is its own, and gives the block to free.
 * Either is a correct program under glibc, whose new and delete are malloc
 * and free (cxx.c tells which operators the program replaced). */
static bool family_explained(hak_op_t op, unsigned family) {
  static const hak_cxx_form_t new_of_op[] = {
    [HAK_OP_DELETE] = HAK_CXX_NEW, [HAK_OP_DELETE_ARRAY] = HAK_CXX_NEW_ARRAY,
    [HAK_OP_DELETE_ALIGNED] = HAK_CXX_NEW_ALIGNED, [HAK_OP_DELETE_ARRAY_ALIGNED] = HAK_CXX_NEW_ARRAY_ALIGNED,
  };
  static const hak_cxx_form_t delete_of_family[] = {
    [HAK_FAMILY_NEW] = HAK_CXX_DELETE, [HAK_FAMILY_NEW_ARRAY] = HAK_CXX_DELETE_ARRAY,
    [HAK_FAMILY_NEW | HAK_FAMILY_ALIGNED] = HAK_CXX_DELETE_ALIGNED,
    [HAK_FAMILY_NEW_ARRAY | HAK_FAMILY_ALIGNED] = HAK_CXX_DELETE_ARRAY_ALIGNED,
  };
  if (family == HAK_FAMILY_MALLOC) return op_family(op) != HAK_FAMILY_MALLOC && hak_cxx_replaced(new_of_op[op]);
  return op == HAK_OP_FREE && family_names[family] != NULL && hak_cxx_replaced(delete_of_family[family]);
}

/* Block p released as its own family's free or delete does, with the
 * size given if `sized` (checked as that form checks it). */
static void release_as_family(void *p, unsigned family, bool sized, size_t given) {
  switch (family) {
    case HAK_FAMILY_MALLOC: sized ? hak_secure_free_sized(p, given) : hak_secure_free_plain(p); break;
    case HAK_FAMILY_NEW: sized ? hak_secure_delete_sized(p, given) : hak_secure_delete(p); break;
    case HAK_FAMILY_NEW_ARRAY: sized ? hak_secure_delete_array_sized(p, given) : hak_secure_delete_array(p); break;
    case HAK_FAMILY_NEW | HAK_FAMILY_ALIGNED:
      sized ? hak_secure_delete_aligned_sized(p, given) : hak_secure_delete_aligned(p);
      break;
    default: sized ? hak_secure_delete_array_aligned_sized(p, given) : hak_secure_delete_array_aligned(p); break;
  }
}

/* A quarantined block's second word (quarantine_fill). */
static inline uintptr_t quarantine_tag(keys_t ks, const void *p) { return (uintptr_t)p ^ ks.tag; }

/* A block two threads freed at once (left_quarantine_already, and
 * canary_failed). Never returns (noipa: as canary_failed, jumped to). */
static __attribute__((noipa)) void report_freed_at_once(const void *p) { hak_report_raced(HAK_OP_FREE, p); }

/* canary_intact found something wrong with p's canary: what, reported.
 * Returns only for a free or delete whose family mismatch the program's
 * own operators explain (family_explained): the block is then released as
 * its family's, with the size `given` if `sized`. (Out of line, from p and
 * its block alone: the checks keep nothing for it in registers. And noipa,
 * so that the compiler does not learn that it rarely returns: the free
 * fast path then jumps to it, where a call would need the stack aligned,
 * so a frame on every free.) */
static __attribute__((noipa)) void canary_failed(hak_op_t op, const void *p, size_t usable, bool sized,
                                                  size_t given) {
  /* Tagged since the caller's test: another thread's free of p, at once,
   * filled it (over the canary of a block of up to 64 bytes). */
  if (hak_block_tag_word(p) == quarantine_tag(keys(), p)) report_freed_at_once(p);
  size_t size;
  if (canary_intact(keys(), op, p, usable, false, 0, &size, false)) size_differs(op, p, size);   /* whole: the size was wrong */
  uint64_t decoded = trailer_decode(keys(), p, (const uint8_t *)p + usable);
  uint32_t word = trailer_word(decoded), slack = word >> FAMILY_BITS, family = word & FAMILY_MASK;
  if (!trailer_intact(decoded) || slack > usable - HAK_CANARY_SIZE) report_overflow(op, p, SIZE_MAX, 0);
  if (!family_fits(op, family)) {
    if (!family_explained(op, family)) family_differs(op, p, family);
    release_as_family((void *)p, family, sized, given);
    return;
  }
  pattern_differs(op, p, usable - HAK_CANARY_SIZE - slack, slack);
}

/* Whether the canary of live block p, whose block has `usable` bytes from
 * p on, is intact and names a family op takes, and (for a sized free or
 * delete) the size `given` is the requested size (canary_failed says what
 * is wrong if not); if so, *size is the requested size. `small`: a block
 * of a small class (the free fast path's). */
static inline __attribute__((always_inline)) bool canary_intact(keys_t ks, hak_op_t op, const void *p, size_t usable,
                                                                bool sized, size_t given, size_t *size, bool small) {
  const uint8_t *end = (const uint8_t *)p + usable;
  uint64_t decoded = trailer_decode(ks, p, end);
  uint32_t word = trailer_word(decoded);
  /* The slack, whether the family is op's and whether the trailer's lower
   * half is 0, in one comparison: the trailer rotated so that the slack
   * comes first, then the lower half (from bit 61 - 32 = 29 on), then the
   * family's difference from op's (its top bits). A small block's usable
   * size is under 2^29, so that comparison fails for anything in the
   * lower half; a larger block's may not be (a giant block's), which
   * tests the lower half itself. malloc_usable_size takes any family that
   * has a name. */
  uint64_t v = op == HAK_OP_USABLE_SIZE ? decoded & ~((uint64_t)FAMILY_MASK << 32)
                                        : decoded ^ (uint64_t)op_family(op) << 32;
  uint64_t slack = v >> (32 + FAMILY_BITS) | v << (32 - FAMILY_BITS);
  /* A size given is checked as the slack it implies, in the same
   * comparison (one wrapped past the block implies none). */
  bool slack_wrong = sized ? slack != usable - HAK_CANARY_SIZE - given : slack > usable - HAK_CANARY_SIZE;
  if (hak_unlikely((!small && !trailer_intact(decoded)) || slack_wrong ||
                   (op == HAK_OP_USABLE_SIZE && family_names[word & FAMILY_MASK] == NULL)))
    return false;
  *size = usable - HAK_CANARY_SIZE - slack;
  const uint8_t *pattern = (const uint8_t *)p + *size;
  size_t n = slack < CANARY_PATTERN ? slack : CANARY_PATTERN;
  __asm__("" : "+r"(n));   /* (else the compiler branches on slack < 8 below) */
  /* Both words in one vector, compared with the pattern byte by byte (the
   * bytes that are not pattern bytes pass). */
  fill_t words;
  bytes16_t skip;
  memcpy(&words[0], pattern, 8);
  memcpy(&words[1], pattern_second(pattern, end), 8);
  memcpy(&skip, pattern_skip + CANARY_PATTERN - n, 16);
  return hak_likely(all_set(((bytes16_t)words == (bytes16_t)canary_words) | skip));
}

/* The requested size of live block p (as canary_intact), or the report;
 * or RELEASED: a free or delete's block released as its family's instead
 * (canary_failed). */
#define RELEASED SIZE_MAX
static inline __attribute__((always_inline)) size_t canary_check(keys_t ks, hak_op_t op, const void *p, size_t usable,
                                                                 bool sized, size_t given) {
  size_t size;
  if (hak_unlikely(!canary_intact(ks, op, p, usable, false, 0, &size, false))) {
    canary_failed(op, p, usable, sized, given);
    return RELEASED;
  }
  return size;
}

/* ------------------------------------------------------------ quarantine */

#define QUARANTINE_BYTES (4u << 20)   /* per thread, in the larger blocks' ring; a larger block is freed at once */
#define QUARANTINE_FILL  64           /* bytes of each block filled and checked */

/* The rings a block may wait in. The blocks of one-slice pages (small
 * classes: at most 8 KiB, those the free fast path takes) have one of
 * their own, bounded by its slots alone: that path then keeps no count of
 * bytes, and frees of large blocks, which take the other ring over its
 * bytes, do not push small blocks out after a few frees. The rest (medium,
 * large and huge blocks, and the few small ones of the shared heap's pages
 * of several slices) wait in the other. */
enum { RING_SMALL, RING_LARGE };

/* A block of an arena segment (ref->seg; giant blocks skip quarantine):
 * it starts its block, so its second word is its own, where a quarantined
 * block keeps its tag (aligned blocks start their block too, alloc.c). */
static bool quarantinable(const hak_block_ref_t *ref) { return ref->seg != NULL; }

/* The live block p is (exactly, see hak_block_find; not in quarantine),
 * its canary checked: its requested size (or RELEASED, canary_check: then
 * released with the size `given` if `sized`). */
static size_t live_block(hak_op_t op, const void *p, hak_block_ref_t *ref, bool sized, size_t given) {
  hak_block_find(op, p, ref);
  keys_t ks = keys();
  if (quarantinable(ref) && hak_block_tag_word(p) == quarantine_tag(ks, p))
    hak_report_freed(op, p, "it is in quarantine");
  return canary_check(ks, op, p, ref->usable, sized, given);
}

/* The fill, as four copies of one two-word vector (the freed word, the tag),
 * at 0, 16, 32 and 48. In a block of less than QUARANTINE_FILL bytes (16 to
 * 48: the smallest classes; every block's size is a multiple of 16) the
 * last three are placed within it, overlapping whole (in a 16-byte block,
 * all on the first): all the same, so each is checked against the one
 * vector. The same stores and loads at every size, so no branch on it (the
 * sizes a program frees come in no order a branch predictor learns), and
 * the places are computed once, not clamped one by one (3 instructions a
 * malloc/free pair fewer). fill_places: where the last three go. */
typedef struct { size_t at[3]; } fill_places_t;
_Static_assert(QUARANTINE_FILL == 4 * 16, "fill_places places three vectors after the first");

static inline fill_places_t fill_places(size_t usable) {
  size_t last = (usable < QUARANTINE_FILL ? usable : QUARANTINE_FILL) - 16;   /* 0, 16, 32 or 48 */
  size_t first = last / 2 & ~(size_t)15;                                       /* 0, 0, 16 or 16 */
  return (fill_places_t){ { first, last - first, last } };
}

static inline void quarantine_fill(keys_t ks, void *p, size_t usable) {
  fill_t v = { freed_word, quarantine_tag(ks, p) };
  fill_places_t at = fill_places(usable);
  memcpy(p, &v, 16);
  for (size_t i = 0; i < 3; i++) memcpy((uint8_t *)p + at.at[i], &v, 16);
}

/* Whether p, whose fill failed its check as it left the quarantine, is
 * free already: it was in quarantine twice. Two threads freed it at once,
 * each passing the test for its tag before the other wrote it (a locked
 * exchange of the tag would close that window, at 15-20% of a free's time
 * here). The first copy to leave gave the block back, clearing its later
 * tags, so the second fails the check whatever became of the block: still
 * free (found so here), or handed out again (then reported as written
 * after free, by its new owner). Never handed out twice: only a copy whose
 * fill is intact gives the block back. */
static bool left_quarantine_already(const void *p) {
  hak_segment_t *seg = hak_segment_lookup(p);
  if (seg == NULL) return false;
  const hak_page_t *page = hak_slice_at(seg, p)->page;
  if (page->span_kind == HAK_SPAN_FREE) return true;
  return page->span_kind == HAK_SPAN_PAGE && hak_block_is_free(p, page);
}

/* The block leaves quarantine: unchanged since it was filled, or reported.
 * Never returns (noipa: as canary_failed, jumped to). */
static __attribute__((noipa)) void report_use_after_free(const void *p, size_t fill) {
  if (left_quarantine_already(p)) report_freed_at_once(p);
  const uint8_t *b = p;
  size_t i = 0;
  for (; i + 1 < fill; i++) {   /* the first byte that differs from the fill */
    uint64_t word = i / 8 % 2 == 1 ? quarantine_tag(keys(), p) : freed_word;
    uint8_t expected[8];
    memcpy(expected, &word, 8);
    if (b[i] != expected[i % 8]) break;
  }
  hak_fatal("use-after-free write to %p (the freed block was written at byte %zu)", p, i);
}

/* HAKMEM_ZERO_ON_FREE: the `usable` bytes of p, being freed, cleared. The
 * whole OS pages of a large one are given back (they come back as zero
 * pages) rather than written: writing them made a buffer the program
 * barely touched resident in free, just before it was unmapped (sort's
 * 1.3 GiB buffer: 1.3 GiB resident; an attack helper's finding). */
#define ZERO_BY_OS (64 * 1024)
static void zero_freed(void *p, size_t usable) {
  uint8_t *b = p, *from = (uint8_t *)hak_align_up((uintptr_t)b, HAK_OS_PAGE);
  uint8_t *to = (uint8_t *)hak_align_down((uintptr_t)(b + usable), HAK_OS_PAGE);
  if (usable < ZERO_BY_OS || !hak_os_zero(from, (size_t)(to - from))) {
    memset(p, 0, usable);
    return;
  }
  memset(b, 0, (size_t)(from - b));
  memset(to, 0, (size_t)(b + usable - to));
}

/* (Out of line, as every call the free fast path makes but its last: it
 * then keeps no registers.) */
static HAK_NOINLINE void release_zeroed(hak_heap_t *heap, void *p, size_t usable) {
  zero_freed(p, usable);
  hak_free_released(p, heap);
}

/* p leaves `ring` of quarantine. A block of the larger blocks' ring may
 * have lost its memory: a second copy of a block two threads freed at once
 * (left_quarantine_already), whose first copy gave back its huge segment,
 * or emptied its arena segment and that went back to the OS. Its segment
 * is looked up first (a small block's copy is not: its page's segment
 * goes only if it empties at a purge delay of 0, and the check would cost
 * every free; such a copy faults on its fill). */
static inline __attribute__((always_inline)) void quarantine_release(keys_t ks, hak_heap_t *heap, unsigned ring,
                                                                    void *p, size_t usable) {
  if (ring == RING_LARGE && hak_unlikely(hak_segment_lookup(p) == NULL)) {
    report_freed_at_once(p);
    return;
  }
  fill_t a, v = { freed_word, quarantine_tag(ks, p) };
  fill_places_t at = fill_places(usable);
  uint8_t *later[3];   /* where the last three vectors are */
  for (size_t i = 0; i < 3; i++) later[i] = (uint8_t *)p + at.at[i];
  memcpy(&a, p, 16);
  bytes16_t same = (bytes16_t)a == (bytes16_t)v;
  for (size_t i = 0; i < 3; i++) {
    memcpy(&a, later[i], 16);
    same &= (bytes16_t)a == (bytes16_t)v;
  }
  if (hak_unlikely(!all_set(same))) {
    report_use_after_free(p, usable < QUARANTINE_FILL ? usable : QUARANTINE_FILL);
    return;
  }
  if (hak_unlikely(hak_option(HAK_OPT_ZERO_ON_FREE))) {
    release_zeroed(heap, p, usable);
    return;
  }
  /* The tag leaves with the block (hak_free_released replaces the one in
   * its second word): left in its later words, it would come back with
   * the block, and a program that moved those over the second word (a
   * memmove of a buffer it wrote in part) would make the block look
   * quarantined, its free a double free (an attack helper's program). */
  for (size_t i = 0; i < 3; i++) memcpy(later[i] + 8, &freed_word, 8);
  hak_free_released(p, heap);
}

/* The oldest block out of a ring that has one: *p, its usable size. */
static size_t quarantine_take(hak_quarantine_t *q, unsigned ring, void **p) {
  *p = q->p[q->head];
  size_t usable = q->usable[q->head];
  q->head = (q->head + 1) % HAK_QUARANTINE_SLOTS;
  q->count--;
  if (ring == RING_LARGE) q->bytes -= usable;
  return usable;
}

static void quarantine_evict(hak_heap_t *heap, unsigned ring) {
  void *p;
  size_t usable = quarantine_take(&heap->quarantine[ring], ring, &p);
  if (hak_unlikely(hak_tracking)) hak_track_unquarantined(p, usable);   /* (quarantine_enter) */
  quarantine_release(keys(), heap, ring, p, usable);
  if (ring == RING_SMALL && heap->quarantine[RING_SMALL].head == 0) hak_quarantine_age(heap);   /* a turn */
}

/* Every block of the heap's quarantine leaves (its fill checked): at exit,
 * and at malloc_trim (purge.c), so that their pages can go back. */
void hak_quarantine_flush(hak_heap_t *heap) {
  for (unsigned ring = 0; ring < HAK_QUARANTINE_RINGS; ring++)
    while (heap->quarantine[ring].count > 0) quarantine_evict(heap, ring);
}

static void shared_tick_start(void);   /* below: the shared heap's clock */

/* p (filled and tagged already) after the newest block of its ring in
 * heap's quarantine, the oldest ones leaving first to make room. Under a
 * tool (tracking.h) a ring keeps a slot free: the free fast path, which
 * takes only a full ring's oldest slot, then always comes to
 * quarantine_put_slow, where the block is described as freed
 * (quarantine_enter). */
static void quarantine_append(hak_heap_t *heap, unsigned ring, void *p, size_t usable) {
  hak_quarantine_t *q = &heap->quarantine[ring];
  while (q->count > 0 && (q->count >= HAK_QUARANTINE_SLOTS - (size_t)hak_tracking ||
                          (ring == RING_LARGE && q->bytes + usable > QUARANTINE_BYTES)))
    quarantine_evict(heap, ring);
  q->p[(q->head + q->count) % HAK_QUARANTINE_SLOTS] = p;
  q->usable[(q->head + q->count) % HAK_QUARANTINE_SLOTS] = usable;
  q->count++;
  q->put++;
  if (ring == RING_LARGE) q->bytes += usable;
  if (heap->shared) shared_tick_start();
}

/* The larger blocks age as the heap goes on: the ones that were in
 * quarantine at the last tick leave at this one. A tick is a turn of the
 * small blocks' ring (its 64th block since the last left) or the heap's
 * heartbeat (alloc.c, every few thousand mallocs). So a larger block
 * waits for 64 to 128 small frees, as it waited for 64 frees of any size
 * when the two shared a ring, or for 64 larger ones or their bytes; a
 * thread that frees one and then only allocates lets it go at its second
 * heartbeat. Without ticks, a thread that frees a batch now and then (a
 * 32 KiB array of pointers, each of whose blocks it frees too) held 64
 * batches. (Small blocks wait for 64 more small frees; a thread that
 * frees only larger blocks holds 64 small ones.) */
static void quarantine_age_ring(hak_heap_t *heap, unsigned ring) {
  hak_quarantine_t *q = &heap->quarantine[ring];
  while (q->count > 0 && q->put - q->count < q->put_at_tick) quarantine_evict(heap, ring);   /* (the oldest's number) */
  q->put_at_tick = q->put;
}

void hak_quarantine_age(hak_heap_t *heap) { quarantine_age_ring(heap, RING_LARGE); }

/* The shared heap's quarantine (the blocks of exited threads, and of
 * threads past their heap's exit) has no heartbeat, and no free of its own
 * pushes its blocks out: they waited until other threads' exits did, or
 * malloc_trim, each keeping its page (up to 256 KiB) from going back to the
 * OS (64 blocks of 16 KiB held 16 MiB resident for good; an attack
 * helper's program). So it ages by the clock: a tick each SHARED_TICK_MS
 * while a block waits there, at which the blocks of both rings that were
 * there at the last one leave (each waits one to two ticks). The purger
 * ticks it (or, without one, a thread's heartbeat, purge.c). */
#define SHARED_TICK_MS 500
static _Atomic(uint64_t) shared_tick_at;   /* ms: the next tick; 0 while none waits. Written under the shared heap's lock */

static void shared_tick_start(void) {
  if (atomic_load_explicit(&shared_tick_at, memory_order_relaxed) != 0) return;
  uint64_t at = hak_clock_ms() + SHARED_TICK_MS;
  atomic_store_explicit(&shared_tick_at, at, memory_order_relaxed);
  hak_note_pending_work(at);
}

/* A tick, if one is due (`wait`: the purger, which holds no lock; else a
 * heartbeat's purge work, which skips it when its thread holds one: the
 * shared heap's own). Returns the next tick, or 0. */
uint64_t hak_quarantine_shared_due(uint64_t now, bool wait) {
  uint64_t at = atomic_load_explicit(&shared_tick_at, memory_order_relaxed);
  if (at == 0 || now < at) return at;
  if (!wait && hak_locks_held != 0) return now + SHARED_TICK_MS;
  hak_heap_t *shared = hak_heap_shared();
  for (unsigned ring = 0; ring < HAK_QUARANTINE_RINGS; ring++) quarantine_age_ring(shared, ring);
  bool waiting = shared->quarantine[RING_SMALL].count + shared->quarantine[RING_LARGE].count > 0;
  at = waiting ? now + SHARED_TICK_MS : 0;
  atomic_store_explicit(&shared_tick_at, at, memory_order_relaxed);
  hak_heap_release(shared);
  return at;
}

/* The free fast path's block `old`, out of quarantine, turned its ring. */
static HAK_NOINLINE void quarantine_turned(hak_heap_t *heap, void *old, size_t old_usable) {
  quarantine_release(keys(), heap, RING_SMALL, old, old_usable);
  hak_quarantine_age(heap);
}

/* Thread exit: the blocks of the thread's quarantine go on waiting, oldest
 * first, in the shared heap's (with those of threads that exited before,
 * and the frees of threads past their heap's exit). Emptied at once, they
 * were reused at once, and a use-after-free write by another thread just
 * after went unseen. (Before the thread's pages are abandoned: as the
 * blocks are live there, the pages go to the reclaim queues until the
 * blocks leave.) */
void hak_quarantine_hand_over(hak_heap_t *heap) {
  if (heap->quarantine[RING_SMALL].count == 0 && heap->quarantine[RING_LARGE].count == 0) return;
  hak_heap_t *shared = hak_heap_shared();
  for (unsigned ring = 0; ring < HAK_QUARANTINE_RINGS; ring++) {
    hak_quarantine_t *q = &heap->quarantine[ring];
    while (q->count > 0) {
      void *p;
      size_t usable = quarantine_take(q, ring, &p);
      quarantine_append(shared, ring, p, usable);
    }
  }
  hak_heap_release(shared);
}

static void quarantine_put_borrowed(unsigned ring, void *p, size_t usable);

/* A block a free puts in quarantine (heap's, its ring not full), filled
 * already. Under memcheck it is a freed block from here on, so that a read
 * of it is reported as a use after free; it is described as live again
 * just before it leaves (quarantine_evict), whose check reads it, and whose
 * release describes it as freed for good. */
static void quarantine_enter(hak_heap_t *heap, unsigned ring, void *p, size_t usable) {
  if (hak_unlikely(hak_tracking)) hak_track_quarantined(p);
  quarantine_append(heap, ring, p, usable);
}

/* Into `ring` of quarantine, filled already: the ring is not full, or
 * (the larger blocks') p would take it over its bytes; or the heap is the
 * empty one (whose quarantine stays empty). */
static HAK_NOINLINE void quarantine_put_slow(hak_heap_t *heap, unsigned ring, void *p, size_t usable) {
  if (hak_unlikely(heap == &hak_heap_empty)) {
    quarantine_put_borrowed(ring, p, usable);
    return;
  }
  quarantine_enter(heap, ring, p, usable);
}

/* Into quarantine: the small blocks' ring if small_page (p is of a
 * one-slice page: the free fast path's), else the other. Usually the ring
 * is full (and the other's bytes leave room), and p takes the oldest
 * block's slot, which leaves. */
static inline __attribute__((always_inline)) void quarantine_put(keys_t ks, hak_heap_t *heap, void *p, size_t usable,
                                                                bool small_page) {
  hak_assert(!small_page || usable <= HAK_SMALL_MAX);
  unsigned ring = small_page ? RING_SMALL : RING_LARGE;
  hak_quarantine_t *q = &heap->quarantine[ring];
  quarantine_fill(ks, p, usable);
  size_t head = q->head;
  void *old = q->p[head];
  size_t old_usable = q->usable[head];
  if (hak_likely(q->count == HAK_QUARANTINE_SLOTS &&
                 (ring == RING_SMALL || q->bytes - old_usable + usable <= QUARANTINE_BYTES))) {
    q->p[head] = p;
    q->usable[head] = usable;
    q->head = (head + 1) % HAK_QUARANTINE_SLOTS;
    if (ring == RING_LARGE) {
      q->bytes += usable - old_usable;
      q->put++;
    } else if (hak_unlikely(q->head == 0)) {
      quarantine_turned(heap, old, old_usable);
      return;
    }
    quarantine_release(ks, heap, ring, old, old_usable);
    return;
  }
  quarantine_put_slow(heap, ring, p, usable);
}

/* A thread with no heap of its own (one that only frees, or past its
 * heap's exit) borrows one (secure_free's fast path does not ask: the
 * empty heap's quarantine is never full, so it comes here). */
static void quarantine_put_borrowed(unsigned ring, void *p, size_t usable) {
  hak_heap_t *heap = hak_heap_thread_init();
  if (heap == NULL) {
    if (hak_option(HAK_OPT_ZERO_ON_FREE)) zero_freed(p, usable);
    hak_free_generic(p, &hak_heap_empty);
    return;
  }
  quarantine_enter(heap, ring, p, usable);
  hak_heap_release(heap);
}

/* At exit, the main thread's quarantine is checked too, and the shared
 * heap's (exited threads' blocks, hak_quarantine_hand_over). */
__attribute__((destructor)) static void quarantine_check_at_exit(void) {
  hak_heap_t *heap = hak_heap_get();
  if (heap != &hak_heap_empty) hak_quarantine_flush(heap);
  hak_heap_t *shared = hak_heap_shared();
  hak_quarantine_flush(shared);
  hak_heap_release(shared);
}

/* ------------------------------------------------------------ the API */

/* malloc, new and new[]: a small block from the first page of its class
 * (as hak_malloc_generic takes it: the direct tables are empty when calls
 * are counted or tracked), whose block size is at hand; the rest through
 * the generic path. */
static HAK_NOINLINE void *secure_alloc_slow(size_t size, unsigned family) {
  hak_heap_t *heap = hak_heap_get();
  size_t request = hak_secure_request(size);
  void *p = heap->heartbeat == 0 ? hak_malloc_at_heartbeat(request, heap)   /* secure_alloc beat it to 0 */
                                 : hak_malloc_generic(request, heap, false);
  if (p == NULL) return NULL;
  /* A block start: in a page, its block's size is its usable size (no
   * need for block_usable's exact check). */
  hak_segment_t *seg = hak_segment_lookup(p);
  const hak_page_t *page = seg != NULL ? seg->slices[hak_slice_of(p)].page : NULL;
  if (page != NULL && page->span_kind == HAK_SPAN_PAGE) return canary_write(p, page->block_size, size, family, false);
  return handout_as(p, size, family);
}

/* The throwing operator new and new[]: as malloc, but a failure goes on
 * to the new handler, or bad_alloc (alloc.c). */
static HAK_NOINLINE void *secure_new_slow(size_t size, unsigned family) {
  void *p = secure_alloc_slow(size, family);
  return hak_likely(p != NULL) ? p : hak_new_failed(size, family);
}

/* (The slow path out of line: the fast one then keeps no registers.)
 * throwing: operator new's (its slow path calls the new handler). A block
 * or link that fails hak_page_pop's checks goes to the slow path too,
 * whose pop reports it: so the fast path makes no call that returns, and
 * needs no stack frame (2 instructions a malloc). */
static inline __attribute__((always_inline)) void *secure_alloc(size_t size, unsigned family, bool throwing) {
  hak_heap_t *heap = hak_heap_get();
  if (hak_likely(size <= HAK_SMALL_MAX - HAK_CANARY_SIZE)) {
    hak_page_t *page = heap->direct[hak_direct_index(size + HAK_CANARY_SIZE)];
    hak_block_t *b = page->free, *next;
    if (hak_likely(b != NULL) && hak_likely(b->free_tag == hak_free_tag(page)) &&
        hak_likely(hak_block_next_quick(page, b, &next)) && hak_likely(hak_heap_beat(heap)))
      return canary_write(hak_page_take(page, b, next), page->block_size, size, family, true);   /* slack < HAK_SMALL_MAX */
  }
  return throwing ? secure_new_slow(size, family) : secure_alloc_slow(size, family);
}

void *hak_secure_malloc(size_t size) { return secure_alloc(size, HAK_FAMILY_MALLOC, false); }

/* operator new and new[] (alloc.c): the nothrow forms, as malloc; the
 * throwing ones, which never return NULL. */
void *hak_secure_new(size_t size, unsigned family) { return secure_alloc(size, family, false); }
void *hak_secure_new_throwing(size_t size, unsigned family) { return secure_alloc(size, family, true); }

static HAK_NOINLINE void secure_free_slow(void *p, hak_op_t op, bool sized, size_t given);

/* Whether p's first two words say it is live: not free in its page, not
 * in quarantine (a thread with no heap: see quarantine_put_borrowed).
 * Under a tool, false: secure_free_slow's live_block reads the word as
 * memcheck needs (tracking.h), where a call here would cost every free a
 * stack frame. */
static inline bool not_freed(keys_t ks, const void *p, const hak_page_t *page) {
  if (hak_unlikely(hak_tracking)) return false;
  uintptr_t word = ((const hak_block_t *)p)->free_tag;
  return word != hak_free_tag(page) && word != quarantine_tag(ks, p);
}

/* A live block of a page, `usable` bytes: its canary (and the size given,
 * if sized) checked, into quarantine. `small`: the page is a small class's
 * (one slice: the fast path's). */
static inline __attribute__((always_inline)) void free_live(keys_t ks, hak_heap_t *heap, hak_op_t op, void *p,
                                                            size_t usable, bool sized, size_t given, bool small) {
  size_t size;
  if (hak_unlikely(!canary_intact(ks, op, p, usable, sized, given, &size, small))) {
    canary_failed(op, p, usable, sized, given);
    return;
  }
  quarantine_put(ks, heap, p, usable, small);
}

/* A free the fast path's check does not take, of a pointer into a mapped
 * segment: a block of a page of several slices (medium classes), found as
 * live_block finds it, or the rest. (Out of line, and finding p's slice
 * again: the fast path then keeps no more registers.) */
static HAK_NOINLINE void secure_free_in_segment(void *p, hak_op_t op, bool sized, size_t given) {
  const hak_slice_t *slice = hak_slice_at(hak_segment_of(p), p);
  hak_page_t *page = slice->page;
  keys_t ks = keys_chosen(true);
  if (hak_page_block_starts(page, p) && not_freed(ks, p, page))
    free_live(ks, hak_heap_get(), op, p, page->block_size, sized, given, false);
  else secure_free_slow(p, op, sized, given);
}

/* free, or a form of delete (op), and the size it gives if `sized`. The
 * usual case first: the start of a live block of a
 * one-slice page (as live_block finds it) freed by a thread with a heap,
 * into quarantine; then a medium one (secure_free_in_segment); the rest in
 * secure_free_slow. */
static inline __attribute__((always_inline)) void secure_free(void *p, hak_op_t op, bool sized, size_t given) {
  hak_segment_t *seg = hak_segment_lookup(p);
  if (hak_likely(seg != NULL)) {
    const hak_slice_t *slice = hak_slice_at(seg, p);
    hak_page_t *page = slice->page;
    hak_heap_t *heap = hak_heap_get();
    keys_t ks = keys_chosen(true);
    if (hak_likely(hak_block_check_shared(slice, p) && not_freed(ks, p, page)))
      free_live(ks, heap, op, p, page->remote_block_size, sized, given, true);
    else secure_free_in_segment(p, op, sized, given);
    return;
  }
  secure_free_slow(p, op, sized, given);
}

/* Each form of C++ delete (free.c), its op known here. */
void hak_secure_delete(void *p) { secure_free(p, HAK_OP_DELETE, false, 0); }
void hak_secure_delete_array(void *p) { secure_free(p, HAK_OP_DELETE_ARRAY, false, 0); }
void hak_secure_delete_aligned(void *p) { secure_free(p, HAK_OP_DELETE_ALIGNED, false, 0); }
void hak_secure_delete_array_aligned(void *p) { secure_free(p, HAK_OP_DELETE_ARRAY_ALIGNED, false, 0); }
void hak_secure_delete_sized(void *p, size_t size) { secure_free(p, HAK_OP_DELETE, true, size); }
void hak_secure_delete_array_sized(void *p, size_t size) { secure_free(p, HAK_OP_DELETE_ARRAY, true, size); }
void hak_secure_delete_aligned_sized(void *p, size_t size) { secure_free(p, HAK_OP_DELETE_ALIGNED, true, size); }
void hak_secure_delete_array_aligned_sized(void *p, size_t size) { secure_free(p, HAK_OP_DELETE_ARRAY_ALIGNED, true, size); }

/* free itself, and free_sized (free.c), their op known here. */
void hak_secure_free_plain(void *p) { secure_free(p, HAK_OP_FREE, false, 0); }
void hak_secure_free_sized(void *p, size_t size) { secure_free(p, HAK_OP_FREE, true, size); }

static void secure_free_slow(void *p, hak_op_t op, bool sized, size_t given) {
  if (p == NULL) return;
  hak_block_ref_t ref;
  size_t size = live_block(op, p, &ref, sized, given);
  if (size == RELEASED) return;
  if (sized && given != size) size_differs(op, p, size);
  hak_heap_t *heap = hak_heap_get();
  bool borrowed = heap == &hak_heap_empty;   /* a thread that only frees, or past its heap's exit */
  if (borrowed) heap = hak_heap_thread_init();
  if (heap == NULL || !quarantinable(&ref) || ref.usable > QUARANTINE_BYTES) {
    if (hak_option(HAK_OPT_ZERO_ON_FREE)) zero_freed(p, ref.usable);
    hak_free_generic(p, heap != NULL ? heap : &hak_heap_empty);
  } else {
    quarantine_put(keys(), heap, p, ref.usable, false);
  }
  if (borrowed && heap != NULL) hak_heap_release(heap);
}

size_t hak_secure_usable_size(const void *p) {
  if (p == NULL) return 0;
  hak_block_ref_t ref;
  return live_block(HAK_OP_USABLE_SIZE, p, &ref, false, 0);
}

/* Whether block `ref` (`usable` bytes) can take a request of `need` bytes
 * in place: it fits, without wasting half, and a large or huge block's
 * guard page would still follow the request's last OS page. (A large or
 * huge block shrunk by a page or more in place kept its guard at its old
 * end: a read a page past the new request went unseen.) A giant block, a
 * mapping of its own that ends at its last page, keeps to the same rule:
 * shrunk in place, it kept pages past its request, and a slack too large
 * for its canary (over 512 MiB: 1,280 MiB shrunk to 700) put the canary
 * where an overflow does not reach, and made free_sized of the size asked
 * a mismatch (an attack helper's program). */
static bool fits_in_place(const hak_block_ref_t *ref, size_t need, size_t usable) {
  if (need > usable || need < usable / 2) return false;
  return ref->kind == HAK_SPAN_PAGE || hak_align_up(need, HAK_OS_PAGE) >= usable;
}

/* Shrinks and small growth stay in place (with a new canary) where the
 * block's guard page stays right (fits_in_place); the rest moves (the move
 * is what quarantines the old block), with the default build's room to
 * grow (alloc.c, hak_realloc_growth), but for a huge block too large for
 * the quarantine, which is resized as the default build does (mremap, its
 * guard page moved to its new end). */
void *hak_secure_realloc(void *p, size_t size) {
  if (p == NULL) return hak_secure_malloc(size);
  if (size == 0) { secure_free(p, HAK_OP_REALLOC, false, 0); return NULL; }
  hak_block_ref_t ref;
  size_t old = live_block(HAK_OP_REALLOC, p, &ref, false, 0), usable = ref.usable;
  size_t need = hak_secure_request(size);
  if (fits_in_place(&ref, need, usable)) return canary_write(p, usable, size, HAK_FAMILY_MALLOC, false);
  int saved = errno;   /* (a way tried and refused on the way is not the call's failure) */
  if (ref.kind == HAK_SPAN_HUGE && usable > QUARANTINE_BYTES && size > HAK_MEDIUM_MAX && !hak_tracking) {
    if (!hak_huge_take_for_resize(ref.page)) hak_report_raced(HAK_OP_REALLOC, p);
    void *q = hak_huge_realloc(ref.seg, ref.page, need);
    if (q != NULL) { errno = saved; return hak_secure_handout(q, size); }
  }
  void *q = NULL;
  hak_growth_t growth = hak_realloc_growth(usable, need);
  if (growth == HAK_GROW_QUARTER)
    q = handout_as(hak_malloc_generic(usable + usable / 4, hak_heap_get(), false), size, HAK_FAMILY_MALLOC);
  else if (growth == HAK_GROW_HUGE)
    q = handout_as(hak_huge_alloc(need, 0, false), size, HAK_FAMILY_MALLOC);
  if (q == NULL) q = hak_secure_malloc(size);
  if (q == NULL) return NULL;   /* errno is ENOMEM; p is untouched */
  errno = saved;
  memcpy(q, p, old < size ? old : size);
  hak_secure_free_plain(p);
  return q;
}

#endif
