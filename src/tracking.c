/* Client requests describing hakmem's blocks to memcheck, or the same
 * blocks poisoned for ASan (see tracking.h). */
#include "internal.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define HAK_TRACK_ASAN 1
#elif defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define HAK_TRACK_MEMCHECK 1
#endif
#endif

bool hak_tracking;

#if HAK_TRACK_ASAN || HAK_TRACK_MEMCHECK

static size_t usable_of(void *p, hak_block_ref_t *ref) {
  hak_block_find(HAK_OP_USABLE_SIZE, p, ref);
  return ref->usable;
}

/* Blocks freed by other threads keep their link open until their owner
 * has moved them onto its own list (list .. tail). */
void hak_track_close_list(const hak_page_t *page, hak_block_t *list, const hak_block_t *tail) {
  for (hak_block_t *b = list;;) {
    hak_block_t *next = hak_block_next(page, b);
    hak_track_close(b);
    if (b == tail) return;
    b = next;
  }
}

#endif

#if HAK_TRACK_ASAN

bool hak_tracking_init(void) { return hak_tracking = true; }

void hak_track_handout(void *p, size_t size, bool zero) {
  (void)zero;
  if (p == NULL) return;
  hak_block_ref_t ref;
  hak_track_resize(p, size, usable_of(p, &ref));
}

void hak_track_resize(void *p, size_t size, size_t usable) {
  ASAN_UNPOISON_MEMORY_REGION(p, size);
  ASAN_POISON_MEMORY_REGION((uint8_t *)p + size, usable - size);
}

void hak_track_cut(void *p, size_t size, size_t usable, size_t was) {
  hak_track_resize(p, size, usable);
  ASAN_UNPOISON_MEMORY_REGION((uint8_t *)p + usable, was - usable);
}

void hak_track_free(void *p, size_t usable, bool in_page) {
  if (in_page) ASAN_POISON_MEMORY_REGION(p, usable);
  else ASAN_UNPOISON_MEMORY_REGION(p, usable);
}

/* (Quarantined blocks stay as they are: the secure variant is not built
 * for ASan's tests.) */
void hak_track_quarantined(void *p) { (void)p; }
void hak_track_unquarantined(void *p, size_t usable) { (void)p; (void)usable; }

HAK_NO_ASAN uintptr_t hak_track_tag_word(const hak_block_t *b) { return b->free_tag; }
void hak_track_open(void *b) { ASAN_UNPOISON_MEMORY_REGION(b, sizeof(hak_block_t)); }
void hak_track_close(void *b) { ASAN_POISON_MEMORY_REGION(b, sizeof(hak_block_t)); }

void hak_track_carve(void *first, size_t bytes, bool carved) {
  if (carved) ASAN_POISON_MEMORY_REGION(first, bytes);
  else ASAN_UNPOISON_MEMORY_REGION(first, bytes);
}

void hak_track_page_freed(void *area, size_t bytes) { ASAN_UNPOISON_MEMORY_REGION(area, bytes); }

#elif HAK_TRACK_MEMCHECK

/* Only memcheck needs the blocks described (callgrind, for one, must see
 * the fast paths as they run): it alone answers GET_VBITS, which other
 * tools leave at its default, 0. */
bool hak_tracking_init(void) {
  char probe = 0, vbits;
  hak_tracking = RUNNING_ON_VALGRIND && VALGRIND_GET_VBITS(&probe, &vbits, 1) == 1;
  return hak_tracking;
}

void hak_track_handout(void *p, size_t size, bool zero) {
  (void)size;   /* memcheck sees the usable size: realloc keeps a block it fits */
  if (p == NULL) return;
  hak_block_ref_t ref;
  /* All of it undefined unless zeroed, the tag word too: hakmem's checks
   * read that word through hak_track_tag_word, so a program that tests it
   * unwritten is told, as on glibc. */
  VALGRIND_MALLOCLIKE_BLOCK(p, usable_of(p, &ref), 0, zero);
}

void hak_track_resize(void *p, size_t size, size_t usable) { (void)p; (void)size; (void)usable; }
void hak_track_cut(void *p, size_t size, size_t usable, size_t was) {
  (void)size;
  VALGRIND_RESIZEINPLACE_BLOCK(p, was, usable, 0);
}
void hak_track_free(void *p, size_t usable, bool in_page) { (void)usable; (void)in_page; VALGRIND_FREELIKE_BLOCK(p, 0); }
void hak_track_quarantined(void *p) { VALGRIND_FREELIKE_BLOCK(p, 0); }
void hak_track_unquarantined(void *p, size_t usable) {
  VALGRIND_MALLOCLIKE_BLOCK(p, usable, 0, 0);
  VALGRIND_MAKE_MEM_DEFINED(p, usable);
}
uintptr_t hak_track_tag_word(const hak_block_t *b) {
  const uintptr_t *word = &b->free_tag;
  unsigned char vbits[sizeof *word];
  unsigned got = VALGRIND_GET_VBITS(word, vbits, sizeof *word);   /* 1: read; else not addressable (a free block) */
  VALGRIND_MAKE_MEM_DEFINED(word, sizeof *word);
  uintptr_t tag = *word;
  if (got == 1) VALGRIND_SET_VBITS(word, vbits, sizeof *word);
  else VALGRIND_MAKE_MEM_NOACCESS(word, sizeof *word);
  return tag;
}
void hak_track_open(void *b) { VALGRIND_MAKE_MEM_DEFINED(b, sizeof(hak_block_t)); }
void hak_track_close(void *b) { VALGRIND_MAKE_MEM_NOACCESS(b, sizeof(hak_block_t)); }

/* Blocks about to be carved (`carved` false: writable for the carving),
 * or just carved (true: free, so inaccessible). */
void hak_track_carve(void *first, size_t bytes, bool carved) {
  if (carved) VALGRIND_MAKE_MEM_NOACCESS(first, bytes);
  else VALGRIND_MAKE_MEM_UNDEFINED(first, bytes);
}

void hak_track_page_freed(void *area, size_t bytes) { (void)area; (void)bytes; }

#else

bool hak_tracking_init(void) { return false; }
void hak_track_handout(void *p, size_t size, bool zero) { (void)p; (void)size; (void)zero; }
void hak_track_resize(void *p, size_t size, size_t usable) { (void)p; (void)size; (void)usable; }
void hak_track_cut(void *p, size_t size, size_t usable, size_t was) { (void)p; (void)size; (void)usable; (void)was; }
void hak_track_free(void *p, size_t usable, bool in_page) { (void)p; (void)usable; (void)in_page; }
void hak_track_quarantined(void *p) { (void)p; }
void hak_track_unquarantined(void *p, size_t usable) { (void)p; (void)usable; }
uintptr_t hak_track_tag_word(const hak_block_t *b) { return b->free_tag; }
void hak_track_open(void *b) { (void)b; }
void hak_track_close(void *b) { (void)b; }
void hak_track_carve(void *first, size_t bytes, bool carved) { (void)first; (void)bytes; (void)carved; }
void hak_track_close_list(const hak_page_t *page, hak_block_t *list, const hak_block_t *tail) {
  (void)page; (void)list; (void)tail;
}
void hak_track_page_freed(void *area, size_t bytes) { (void)area; (void)bytes; }

#endif
