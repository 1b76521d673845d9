// A C++ program that replaces one side of the operator pair only, with a
// call of the C library's allocator, as some programs do to count calls or
// to catch failures:
//   CXX_REPLACE_NEW     operator new(size_t), which calls malloc; hakmem's
//                       delete then frees malloc's blocks
//   CXX_REPLACE_DELETE  operator delete(void *), which calls free; free then
//                       gets the blocks of hakmem's new
// Under glibc, whose new and delete are malloc and free, both run. So must
// they under hakmem: the secure variant, which otherwise stops a block of
// new given to free and the other way round, takes those the program's own
// operators explain, and still stops a mismatch they do not (src/secure.c,
// family_explained).
#include "hak_test.h"

#include <new>

#if defined(CXX_REPLACE_NEW) == defined(CXX_REPLACE_DELETE)
#error "say which operator the program replaces"
#endif

static size_t replaced_calls;

#if defined(CXX_REPLACE_NEW)
void *operator new(std::size_t size)
{
    void *p = malloc(size != 0 ? size : 1);
    if (p == nullptr) throw std::bad_alloc();
    replaced_calls++;
    return p;
}
#else
void operator delete(void *p) noexcept
{
    if (p != nullptr) replaced_calls++;
    free(p);
}
#endif

struct alignas(64) over_aligned {
    char bytes[200];
};

// Every form whose blocks the replacement makes or takes, at small, medium
// and large sizes, the blocks written whole; containers too.
static void mixed_pairs_run()
{
    size_t before = replaced_calls;
    for (size_t size : { (size_t)24, (size_t)3000, (size_t)40000, (size_t)600000 }) {
        void *p = ::operator new(size);
        memset(p, 0x5a, size);
        ::operator delete(p);
        p = ::operator new(size);
        memset(p, 0x5b, size);
        ::operator delete(p, size);   // sized: calls delete
        char *a = new char[size];      // new[] calls new
        memset(a, 0x5c, size);
        delete[] a;                    // delete[] calls delete
        p = ::operator new(size, std::nothrow);
        memset(p, 0x5d, size);
        ::operator delete(p, std::nothrow);
    }
    hak_exercise_containers();
    CHECKF(replaced_calls - before >= 16, "the replacement was called %zu times", replaced_calls - before);
}

#ifdef HAK_TEST_SECURE
// A mismatch the replacement does not explain: an aligned new's block
// (hakmem's, of its own kind) given to free.
static void aligned_new_then_free()
{
    over_aligned *o = new over_aligned;
    hak_announce(o);
    free(o);
}
#endif

#if defined(HAK_TEST_SECURE) && defined(CXX_REPLACE_NEW)
// A sized delete of the replacement's malloc block that gives another size
// (a delete through a base class without a virtual destructor): the size
// the replacement asked malloc for is known, so it is checked still.
static void sized_delete_wrong_size()
{
    void *p = ::operator new(32);
    hak_announce(p);
    ::operator delete(p, (size_t)1032);
}
#endif

static void unexplained_mismatch_stopped()
{
#ifdef HAK_TEST_SECURE
    hak_child_report r = hak_run_in_child(aligned_new_then_free);
    hak_check_misuse_report(&r, "allocated by new (align_val_t) (alloc-dealloc mismatch)");
#ifdef CXX_REPLACE_NEW
    r = hak_run_in_child(sized_delete_wrong_size);
    hak_check_misuse_report(&r, "with a size other than the 32 bytes");
#endif
#endif
}

int main()
{
    hak_test_begin("cxx_half_replaced");
    RUN_CASE(mixed_pairs_run);
    RUN_CASE(unexplained_mismatch_stopped);
    return 0;
}
