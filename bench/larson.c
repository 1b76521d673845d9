/* Larson-style server workload with malloc and free (the loop: larson.h).
 * After every round the arrays move one thread on, as in Larson where a new
 * thread inherits a finished thread's array.
 *
 *   --threads=2 --min=8 --max=1024 --slots=1000 --rounds=50 --ops=20000 --seed=1
 *   (--ops is per thread per round) */
#include "common.h"

#define LARSON_ALLOC(b, size, key) block_alloc(b, size, key)
#define LARSON_FREE(b) block_free(b)
#define LARSON_ROUNDS 50
#include "larson.h"
