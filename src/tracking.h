/* Tools that watch the heap from outside: valgrind's memcheck, and
 * AddressSanitizer in the sanitizer build (HAKMEM_SANITIZE=address).
 *
 * memcheck: by default it replaces every malloc it finds, hakmem's
 * included. Run with --soname-synonyms=somalloc=nouserintercepts, it
 * leaves hakmem (preloaded or linked) in place, and then sees no heap
 * blocks at all unless hakmem describes them. Under memcheck (decided once
 * at start-up; other valgrind tools see hakmem as it runs) it does, with
 * client requests: a block handed out is MALLOCLIKE (its usable size: the
 * bytes malloc_usable_size allows; undefined, its tag word too, which
 * hakmem's checks read through hak_track_tag_word), a freed block
 * FREELIKE, and every free block stays NOACCESS except while the
 * allocator itself reads or writes its link and tag.
 *
 * ASan: the sanitizer build poisons the same free blocks, and in a live
 * block the bytes past the request (up to the block's end), until
 * malloc_usable_size hands them out. Large and huge blocks are unpoisoned
 * when freed (their memory may be unmapped, and ASan's shadow would
 * outlive the mapping), as are a freed page's blocks.
 *
 * All of that happens on the generic paths only: tracking sets
 * HAK_OWNER_COUNTED, which sends every malloc and free there (as
 * HAKMEM_STATS does), so the fast paths carry none of it and cost the same
 * when no tool runs. Without valgrind's headers at build time (and
 * outside ASan), tracking is compiled out. */
#ifndef HAKMEM_TRACKING_H
#define HAKMEM_TRACKING_H

extern bool hak_tracking HAK_INTERNAL;   /* under memcheck, or the ASan build */

/* Under memcheck: tracking outside the ASan build. */
static inline bool hak_tracking_memcheck(void) {
#if defined(__SANITIZE_ADDRESS__)
  return false;
#else
  return hak_tracking;
#endif
}

HAK_INTERNAL bool hak_tracking_init(void);
/* p was just handed out for `size` bytes (the start of its block: aligned
 * blocks are too, alloc.c); zero: its first `size` bytes are zero. */
HAK_INTERNAL void hak_track_handout(void *p, size_t size, bool zero);
/* The live block p now holds `size` of its `usable` bytes (realloc in
 * place; malloc_usable_size hands out all of them). */
HAK_INTERNAL void hak_track_resize(void *p, size_t size, size_t usable);
/* realloc cut the live large or huge block p in place from `was` usable
 * bytes to `usable` (holding `size` of them): the rest went back to the
 * arena or the OS, as a freed block's memory does. */
HAK_INTERNAL void hak_track_cut(void *p, size_t size, size_t usable, size_t was);
HAK_INTERNAL void hak_track_free(void *p, size_t usable, bool in_page);   /* p: a block start */
/* The secure variant's quarantine (secure.c): freed block p enters it (to
 * memcheck, a freed block), or leaves it (live again for its check, which
 * reads its `usable` bytes, and its release, which frees it). */
HAK_INTERNAL void hak_track_quarantined(void *p);
HAK_INTERNAL void hak_track_unquarantined(void *p, size_t usable);
/* Block b's tag word (its second), for the checks that tell a live block
 * from a free one: under memcheck, read as defined, and left as defined or
 * as accessible as it was. A live block's may hold bytes the program never
 * wrote (a struct's padding, part of a buffer copied whole: legal), and
 * memcheck would report hakmem's compare of them (glibc reports nothing). */
HAK_INTERNAL uintptr_t hak_track_tag_word(const hak_block_t *b);
HAK_INTERNAL void hak_track_open(void *b);                      /* a free block's link and tag */
HAK_INTERNAL void hak_track_close(void *b);
HAK_INTERNAL void hak_track_carve(void *first, size_t bytes, bool carved);
HAK_INTERNAL void hak_track_close_list(const hak_page_t *page, hak_block_t *list, const hak_block_t *tail);
HAK_INTERNAL void hak_track_page_freed(void *area, size_t bytes);

#endif
