/* What a program using an installed hakmem sees, built as an outside
 * project builds it (pkg-config, find_package, add_subdirectory): only
 * <hakmem.h> and the library, linked with -lhakmem (or -lhakmem-secure).
 *
 * Checks that the header and the library agree on the version, that malloc
 * and friends are hakmem's (hak_good_size predicts what malloc gives, and
 * hak_free accepts malloc's blocks), over sizes of every tier, and that the
 * sized frees are there under the hak_ and the C23 names. */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <hakmem.h>

/* C23, which this C library may not declare yet. */
void free_sized(void *p, size_t size);
void free_aligned_sized(void *p, size_t alignment, size_t size);

#include "consumer_check.h"

/* malloc(n) must give at least what hak_good_size(n) says, and of a small
 * size at most what it says of n rounded up to 256 (a thread heap's
 * classes from 1 to 4 KiB are up to 256 bytes apart, and a thread's first
 * small blocks are whole cache lines); hakmem's own free takes the block
 * back (it would stop the program for a foreign block). */
static size_t check_size(size_t n) {
  unsigned char *p = malloc(n);
  CHECK(p != NULL, "malloc(%zu) failed", n);
  if (p == NULL) return 0;
  size_t usable = malloc_usable_size(p);
  size_t good = hak_good_size(n), most = n <= 8192 ? hak_good_size(((n ? n : 1) + 255) / 256 * 256) : good;
  CHECK(usable >= good && usable <= most, "malloc(%zu): usable %zu, hak_good_size %zu", n, usable, good);
  CHECK(usable >= n, "malloc(%zu): usable %zu", n, usable);
  if (usable > 0) {   /* the secure variant's malloc(0) has no usable byte */
    p[0] = 1;
    p[usable - 1] = 2;
  }
  if (n % 2) free(p); else hak_free(p);
  return usable;
}

int main(void) {
  CHECK(hak_version() == HAKMEM_VERSION, "library %d, header %d", hak_version(), HAKMEM_VERSION);
  CHECK(HAKMEM_VERSION == HAKMEM_VERSION_MAJOR * 10000 + HAKMEM_VERSION_MINOR * 100 + HAKMEM_VERSION_PATCH,
        "HAKMEM_VERSION %d", HAKMEM_VERSION);

  /* Every size up to 16 KiB, then ascending steps of about 1/64 with the
   * neighbours of every 4 KiB multiple around each, to 80 MiB: all size
   * classes, large spans and huge blocks, and each of their boundaries.
   * (Ascending, so a freed huge block is never reused for a larger one: a
   * reused huge block may hold a little more than a fresh one.) */
  size_t checked = 0, distinct = 0, last = 0;
  for (size_t n = 0; n <= 16384; n++, checked++) {
    size_t usable = check_size(n);
    distinct += usable != last;
    last = usable;
  }
  for (size_t n = 16384; n <= ((size_t)80 << 20); n += n / 64) {
    size_t page = n & ~(size_t)4095;
    size_t sizes[] = { page - 1, page, page + 1, n };
    for (int i = 0; i < 4; i++, checked++) {
      size_t usable = check_size(sizes[i]);
      distinct += usable != last;
      last = usable;
    }
  }
  CHECK(distinct > 150, "only %zu distinct usable sizes", distinct);
  volatile size_t absurd = SIZE_MAX;
  CHECK(hak_good_size(absurd) == 0, "hak_good_size(SIZE_MAX) = %zu", hak_good_size(absurd));
  CHECK(malloc(absurd) == NULL, "malloc(SIZE_MAX) succeeded");

  /* Sized frees, under both names, with the sizes the blocks came from. */
  free_sized(malloc(100), 100);
  hak_free_sized(malloc(5000), 5000);
  free_sized(NULL, 10);
  void *q = realloc(malloc(1000), 600);   /* kept in place: still freed with 600 */
  free_sized(q, 600);
  for (size_t align = 16; align <= 65536; align *= 2) {
    void *a = aligned_alloc(align, 3 * align / 2);
    CHECK(a != NULL && (uintptr_t)a % align == 0, "aligned_alloc(%zu) = %p", align, a);
    memset(a, 0x5a, 3 * align / 2);
    if (align % 32) free_aligned_sized(a, align, 3 * align / 2);
    else hak_free_aligned_sized(a, align, 3 * align / 2);
  }

  if (failures) return 1;
  printf("hakmem %d.%d.%d: %zu sizes checked, %zu distinct usable sizes\n", HAKMEM_VERSION_MAJOR,
         HAKMEM_VERSION_MINOR, HAKMEM_VERSION_PATCH, checked, distinct);
  return 0;
}
