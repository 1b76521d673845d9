/* Size classes: every size maps to the smallest class that holds it, and
 * classes above 128 B waste at most 1/9 of themselves (the README's promise). Pages of each class
 * hold enough blocks and waste little of their span. */
#include "hak_test.h"
#include "internal.h"

static void every_size_maps_to_smallest_fitting_class(void) {
  for (size_t size = 0; size <= HAK_MEDIUM_MAX; size++) {
    size_t bin = hak_bin_of(size);
    CHECKF(bin >= 1 && bin < HAK_CLASS_BINS, "size %zu -> bin %zu", size, bin);
    CHECKF(hak_bin_size(bin) >= size, "size %zu > class %zu", size, hak_bin_size(bin));
    CHECKF(bin == 1 || hak_bin_size(bin - 1) < size, "size %zu fits the smaller class %zu", size, hak_bin_size(bin - 1));
  }
  CHECKF(hak_bin_of(HAK_MEDIUM_MAX) == HAK_CLASS_BINS - 1, "largest class is %zu", hak_bin_of(HAK_MEDIUM_MAX));
}

static void classes_are_aligned_and_increasing(void) {
  for (size_t bin = 1; bin < HAK_CLASS_BINS; bin++) {
    CHECKF(hak_bin_size(bin) % HAK_ALIGN == 0, "class %zu", hak_bin_size(bin));
    CHECKF(bin == 1 || hak_bin_size(bin) > hak_bin_size(bin - 1), "bin %zu", bin);
    CHECKF(hak_bin_of(hak_bin_size(bin)) == bin, "class size %zu maps elsewhere", hak_bin_size(bin));
  }
}

/* The shared heap's classes: every multiple of 64 from 1 to 4 KiB, each
 * once (its own bins, past HAK_CLASS_BINS, are exactly those that are not
 * classes of the others); other sizes as everyone's. */
static void shared_heap_steps_by_lines_from_1_to_4_kib(void) {
  size_t own = 0;
  for (size_t size = 1; size <= HAK_SMALL_MAX; size++) {
    size_t bin = hak_shared_bin_of(size), want = size > HAK_LINE_STEP_MIN && size <= HAK_LINE_STEP_MAX ? (size + 63) / 64 * 64
                                                                                              : hak_bin_size(hak_bin_of(size));
    CHECKF(bin >= 1 && bin < HAK_BINS && hak_bin_size(bin) == want, "size %zu -> bin %zu of %zu", size, bin, hak_bin_size(bin));
    CHECKF(bin < HAK_CLASS_BINS || hak_bin_size(hak_bin_of(size)) != want, "size %zu: own bin for a class", size);
    if (bin >= HAK_CLASS_BINS && size % 64 == 0) own++;
  }
  CHECKF(own == HAK_SHARED_BINS, "%zu of the shared heap's own bins in use", own);
  for (size_t bin = HAK_CLASS_BINS; bin < HAK_BINS; bin++)
    CHECKF(hak_shared_bin_of(hak_bin_size(bin)) == bin, "bin %zu (%zu) maps elsewhere", bin, hak_bin_size(bin));
}

/* What aligned allocation rests on (alloc.c, alloc_aligned): for every
 * alignment from 32 B to a slice, the class a multiple of it gets (a thread
 * heap's, and the shared heap's up to HAK_SMALL_MAX) is a multiple of it. */
static void classes_of_multiples_keep_their_alignment(void) {
  for (size_t align = 2 * HAK_ALIGN; align <= HAK_SLICE_SIZE; align *= 2)
    for (size_t m = align; m <= HAK_MEDIUM_MAX; m += align) {
      CHECKF(hak_bin_size(hak_bin_of(m)) % align == 0, "%zu (a multiple of %zu): class %zu", m, align,
             hak_bin_size(hak_bin_of(m)));
      CHECKF(m > HAK_SMALL_MAX || hak_shared_block_size(m) % align == 0, "%zu (a multiple of %zu): shared class %zu",
             m, align, hak_shared_block_size(m));
    }
}

/* heap->recent keeps the medium classes above HAK_SMALL_MAX up to 32 KiB. */
static void recent_classes_are_the_medium_ones_up_to_32_kib(void) {
  for (size_t size = HAK_SMALL_MAX + 1; size <= HAK_RECENT_MAX; size++)
    CHECKF(HAK_RECENT_FIRST + hak_recent_index(size) == hak_bin_of(size), "size %zu: ring %zu, class %zu",
           size, hak_recent_index(size), hak_bin_of(size));
  CHECKF(hak_bin_of(HAK_SMALL_MAX + 1) == HAK_RECENT_FIRST, "first is %zu", hak_bin_of(HAK_SMALL_MAX + 1));
  CHECKF(hak_bin_of(HAK_RECENT_MAX) == HAK_RECENT_FIRST + HAK_RECENT_BINS - 1, "last is %zu", hak_bin_of(HAK_RECENT_MAX));
  CHECKF(!hak_bin_has_recent(HAK_RECENT_FIRST - 1) && hak_bin_has_recent(HAK_RECENT_FIRST) &&
         hak_bin_has_recent(HAK_RECENT_FIRST + HAK_RECENT_BINS - 1) && !hak_bin_has_recent(HAK_RECENT_FIRST + HAK_RECENT_BINS),
         "the range's ends");
}

static void waste_is_bounded_above_128_bytes(void) {
  for (size_t size = 129; size <= HAK_MEDIUM_MAX; size++) {
    size_t cls = hak_bin_size(hak_bin_of(size));
    CHECKF((cls - size) * 9 <= cls, "size %zu wastes %zu of %zu", size, cls - size, cls);
  }
}

static void pages_hold_enough_blocks(void) {
  for (size_t bin = 1; bin < HAK_BINS; bin++) {
    size_t bs = hak_bin_size(bin), slices = hak_page_slices_for(bin);
    size_t span = slices * HAK_SLICE_SIZE, blocks = span / bs;
    CHECKF(slices >= 1 && slices <= HAK_PAGE_MAX_SLICES, "class %zu: %zu slices", bs, slices);
    /* Few blocks of the largest classes (see hak_page_slices_for), many of the small ones. */
    CHECKF(blocks >= 1 && blocks <= UINT16_MAX, "class %zu: %zu blocks", bs, blocks);
    CHECKF(blocks >= 16 || blocks == 1 || span <= 2 * HAK_PAGE_TARGET_BYTES, "class %zu: %zu blocks in %zu bytes", bs, blocks, span);
    CHECKF((span - blocks * bs) * 8 <= span, "class %zu: page wastes %zu of %zu", bs, span - blocks * bs, span);
  }
}

int main(void) {
  hak_test_begin("unit_size_classes");
  RUN_CASE(every_size_maps_to_smallest_fitting_class);
  RUN_CASE(classes_are_aligned_and_increasing);
  RUN_CASE(shared_heap_steps_by_lines_from_1_to_4_kib);
  RUN_CASE(classes_of_multiples_keep_their_alignment);
  RUN_CASE(recent_classes_are_the_medium_ones_up_to_32_kib);
  RUN_CASE(waste_is_bounded_above_128_bytes);
  RUN_CASE(pages_hold_enough_blocks);
  return 0;
}
