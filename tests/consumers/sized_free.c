/* free_sized / free_aligned_sized in the builds that check the size (the
 * allocator compiled into this program under its hak_ names): the debug
 * build (HAKMEM_DEBUG=1) and the secure variant (HAKMEM_SECURE=1). Every
 * size a block can rightly be freed with passes, including sizes realloc
 * kept the block for; a size the block cannot have come from stops the
 * program with hakmem's message. The secure variant knows the size each
 * block was asked for, so it also stops a size off by one byte. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "hakmem.h"

#include "consumer_check.h"

/* Runs free of a block of `size` (aligned to `align` if nonzero) with the
 * size `claimed` in a child; true if the child aborted with hakmem's
 * message naming the call (the secure variant's two sized frees share one
 * path, and its message names both). */
static bool rejected(size_t align, size_t size, size_t claimed) {
  int out[2];
  if (pipe(out) != 0) return false;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], STDERR_FILENO);
    void *p = align ? hak_aligned_alloc(align, size) : hak_malloc(size);
    if (align) hak_free_aligned_sized(p, align, claimed);
    else hak_free_sized(p, claimed);
    _exit(0);
  }
  close(out[1]);
  char msg[512] = "";
  size_t len = 0;
  ssize_t n;
  while ((n = read(out[0], msg + len, sizeof msg - 1 - len)) > 0) len += (size_t)n;
  msg[len] = 0;
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
#if HAKMEM_SECURE
  const char *words = "hakmem: error: free_sized (or free_aligned_sized) of";
#else
  const char *words = align ? "hakmem: error: free_aligned_sized of" : "hakmem: error: free_sized of";
#endif
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && strstr(msg, words) != NULL;
}

int main(void) {
  /* First, as a thread's first blocks (whole cache lines, from the shared
   * heap): size 0, and sizes below and at a line. */
  hak_free_sized(hak_malloc(0), 0);
  hak_free_aligned_sized(hak_aligned_alloc(64, 0), 64, 0);
  hak_free_aligned_sized(hak_aligned_alloc((size_t)1 << 20, 0), (size_t)1 << 20, 0);
  hak_free_sized(hak_malloc(1), 1);
  hak_free_sized(hak_calloc(1, 40), 40);
  hak_free_sized(hak_malloc(64), 64);
  /* Sizes of every tier freed with their own size, and a few bytes less
   * (still a size that block serves), plainly and aligned. */
  for (size_t n = 1; n <= ((size_t)40 << 20); n += n / 3 + 1) {
    hak_free_sized(hak_malloc(n), n);
    void *z = hak_calloc(1, n);
    hak_free_sized(z, n);
    for (size_t align = 32; align <= ((size_t)4 << 20); align *= 8)
      hak_free_aligned_sized(hak_aligned_alloc(align, n), align, n);
  }
  /* realloc keeps a block it shrinks by up to half, and grows by a quarter:
   * the size given to realloc is the one to free with. */
  void *p = hak_realloc(hak_malloc(1000), 520);
  hak_free_sized(p, 520);
  p = hak_realloc(hak_malloc(1000), 1100);
  hak_free_sized(p, 1100);
  p = hak_realloc(hak_aligned_alloc(256, 3000), 1600);
  hak_free_sized(p, 1600);
  hak_free_sized(NULL, 100);

  CHECK(!rejected(0, 100, 100), "free_sized with the right size stopped the program");
  CHECK(rejected(0, 100, 200), "a size larger than the block passed");
  CHECK(rejected(0, 4000, 100), "a size far smaller than the block passed");
  CHECK(rejected(0, 40, 1), "a 1-byte size for a 48-byte block passed");   /* (this thread's blocks are no longer whole lines) */
  CHECK(rejected(0, (size_t)2 << 20, 1000), "a small size for a large block passed");
  CHECK(rejected(0, (size_t)40 << 20, (size_t)1 << 20), "a small size for a huge block passed");
  CHECK(rejected(4096, 100, 10000), "an aligned block freed with a larger size passed");
  CHECK(rejected(64, 60000, 100), "an aligned block freed with a far smaller size passed");
  CHECK(!rejected(4096, 100, 100), "an aligned block freed with its size stopped the program");
#if HAKMEM_SECURE
  CHECK(rejected(0, 100, 99), "a size one byte short passed the secure variant");
  CHECK(rejected(0, 3000, 3001), "a size one byte over passed the secure variant");
  CHECK(rejected(4096, 100, 96), "an aligned block freed with a smaller size passed the secure variant");
  CHECK(rejected(0, (size_t)2 << 20, ((size_t)2 << 20) - 16), "a large block freed 16 bytes short passed the secure variant");
#endif
  if (failures) return 1;
  printf("sized frees checked\n");
  return 0;
}
