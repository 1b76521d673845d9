/* Helpers of the unit tests, which test hakmem's layers through its
 * internal interface (src/internal.h), linked to the static library. */
#ifndef HAK_UNIT_H
#define HAK_UNIT_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include "internal.h"

#define UCHECK(cond, ...)                                                   \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                         \
      fputc('\n', stderr);                                                  \
      exit(1);                                                              \
    }                                                                       \
  } while (0)

#define UCASE(fn)                  \
  do {                             \
    fn();                          \
    printf("ok %s\n", #fn);        \
  } while (0)

#endif
