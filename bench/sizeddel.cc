/* C++ sized delete in a Larson-style server: like larson.c (each thread
 * frees a random slot of its array and allocates a new block into it, arrays
 * handed one thread on after every round), but blocks come from
 * `operator new(n)` and go back through `operator delete(p, n)`, the sized
 * form C++14 compilers emit for `delete` of a complete type. An allocator
 * that exports the sized form may skip looking the size up. The loop is
 * larson.h.
 *
 *   --threads=2 --min=8 --max=1024 --slots=1000 --rounds=100 --ops=20000 --seed=1 */
#include "common.h"
#include <new>

static void new_block(block_t *b, size_t size, uint64_t key)
{
    b->p = ::operator new(size);
    b->size = size;
    b->key = key;
    stamp(b->p, size, key);
}

static void delete_block(block_t *b)
{
    check(b->p, b->size, b->key);
    ::operator delete(b->p, b->size);
    b->p = nullptr;
}

#define LARSON_ALLOC(b, size, key) new_block(b, size, key)
#define LARSON_FREE(b) delete_block(b)
#define LARSON_ROUNDS 100
#include "larson.h"
