/* The check macro of the consumer programs, which are built the way a
 * user's program is (against an installed or in-tree hakmem, without the
 * test suite's hak_test.h): a failed check is printed and counted, and
 * main returns 1 if any failed. */
#ifndef CONSUMER_CHECK_H
#define CONSUMER_CHECK_H
#include <stdio.h>

static int failures;

#define CHECK(cond, ...)                                              \
  do {                                                                \
    if (!(cond)) {                                                    \
      failures++;                                                     \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                   \
      fputc('\n', stderr);                                            \
    }                                                                 \
  } while (0)

#endif
