/* Huge realloc that moves (issue #7.1): once mremap has moved a huge block,
 * its old address is free address space, and another thread's new segment
 * may be mapped there before the mover returns. The mover must leave that
 * address's segment-map entry alone. To make the race deterministic this
 * program defines mremap itself (the static library's call binds to it):
 * right after a move, it plays the other thread, mapping a segment at the
 * old address and marking it in the map. Normal build only (the sanitizers
 * intercept mremap themselves). */
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include "hak_test.h"
#include "internal.h"

static void *squatter;   /* the other thread's segment, at the old address */

void *mremap(void *old, size_t old_size, size_t new_size, int flags, ...)
{
  void *target = NULL;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    target = va_arg(ap, void *);
    va_end(ap);
  }
  void *moved = (void *)syscall(SYS_mremap, old, old_size, new_size, flags, target);
  if (moved != MAP_FAILED && moved != old && squatter == NULL) {
    void *s = mmap(old, HAK_SEGMENT_SIZE, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    CHECKF(s == old, "could not map at the vacated %p (got %p)", old, s);
    hak_segment_map_set(s, true);
    squatter = s;
  }
  return moved;
}

static void moved_block_leaves_the_old_address_alone(void)
{
  size_t size = HAK_LARGE_MAX + 1 * 1024 * 1024;
  uint8_t *p = hak_huge_alloc(size, 0, false);
  CHECKF(p != NULL, "huge alloc");
  memset(p, 0x5A, size);
  hak_segment_t *seg = hak_segment_of(p);
  /* Something right after the mapping: growing in place is impossible. */
  void *blocker = mmap((uint8_t *)seg + seg->size, HAK_OS_PAGE, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  CHECKF(blocker != MAP_FAILED, "blocker mapping");
  uint8_t *q = hak_huge_realloc(seg, hak_page_of(seg, p), size + 8 * 1024 * 1024);
  CHECKF(q != NULL && hak_segment_of(q) != seg, "the block did not move (%p -> %p)", (void *)p, (void *)q);
  CHECKF(squatter == seg, "no segment took the old address");
  CHECKF(hak_segment_is_mapped(squatter), "the mover cleared the map entry of another segment at %p", squatter);
  CHECKF(hak_segment_is_mapped(q), "the moved block is not in the map");
  for (size_t i = 0; i < size; i += 4096) CHECKF(q[i] == 0x5A, "contents moved at %zu", i);
  hak_huge_free(hak_segment_of(q), hak_page_of(hak_segment_of(q), q));
  hak_segment_map_set(squatter, false);
  munmap(squatter, HAK_SEGMENT_SIZE);
  munmap(blocker, HAK_OS_PAGE);
}

int main(void)
{
  hak_test_begin("unit_huge_move");
  hak_process_init();
  RUN_CASE(moved_block_leaves_the_old_address_alone);
  return 0;
}
