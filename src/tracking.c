/* valgrind client requests describing hakmem's blocks (see tracking.h). */
#include "internal.h"

#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define HAK_HAVE_VALGRIND 1
#endif
#endif

bool hak_tracking;

#if HAK_HAVE_VALGRIND

/* Only memcheck needs the blocks described (callgrind, for one, must see
 * the fast paths as they run): it alone answers GET_VBITS, which other
 * tools leave at its default, 0. */
bool hak_tracking_init(void) {
  char probe = 0, vbits;
  hak_tracking = RUNNING_ON_VALGRIND && VALGRIND_GET_VBITS(&probe, &vbits, 1) == 1;
  return hak_tracking;
}

void hak_track_handout(void *p, bool zero) {
  if (p == NULL) return;
  hak_block_ref_t ref;
  hak_block_find(HAK_OP_USABLE_SIZE, p, &ref);
  VALGRIND_MALLOCLIKE_BLOCK(p, ref.usable, 0, zero);
  /* A block's tag word is read by every free (the double-free check),
   * whether or not the program wrote it: it holds 0, defined. */
  if (ref.block != NULL) VALGRIND_MAKE_MEM_DEFINED(&ref.block->free_tag, sizeof ref.block->free_tag);
}

void hak_track_free(void *p) { VALGRIND_FREELIKE_BLOCK(p, 0); }
void hak_track_open(void *b) { VALGRIND_MAKE_MEM_DEFINED(b, sizeof(hak_block_t)); }
void hak_track_close(void *b) { VALGRIND_MAKE_MEM_NOACCESS(b, sizeof(hak_block_t)); }

/* Blocks about to be carved (`carved` false: writable for the carving),
 * or just carved (true: free, so inaccessible). */
void hak_track_carve(void *first, size_t bytes, bool carved) {
  if (carved) VALGRIND_MAKE_MEM_NOACCESS(first, bytes);
  else VALGRIND_MAKE_MEM_UNDEFINED(first, bytes);
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

#else

bool hak_tracking_init(void) { return false; }
void hak_track_handout(void *p, bool zero) { (void)p; (void)zero; }
void hak_track_free(void *p) { (void)p; }
void hak_track_open(void *b) { (void)b; }
void hak_track_close(void *b) { (void)b; }
void hak_track_carve(void *first, size_t bytes, bool carved) { (void)first; (void)bytes; (void)carved; }
void hak_track_close_list(const hak_page_t *page, hak_block_t *list, const hak_block_t *tail) {
  (void)page; (void)list; (void)tail;
}

#endif
